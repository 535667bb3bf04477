"""Application resolvers against dnsside, as applications ask: glibc (getaddrinfo, res_query,
res_search), Go's pure resolver and Java's JNDI.

They run inside a network namespace the test creates (testkit/netns.py), whose
/etc/resolv.conf names a real resolver on port 53 (dnsmasq, forwarding `svc-global` to
dnsside on 127.0.0.1:5353 inside the same namespace, NXDOMAIN for everything else) with
the search list a pod in namespace `default` would have, and `ndots:5`:

    nameserver 127.0.0.1
    search default.svc-global svc-global
    options ndots:5 timeout:2 attempts:2

Every client checks the same things: A with several addresses (clusters east and west),
AAAA, SRV with targets and ports, NXDOMAIN, short names through the search list; JNDI also
the ANY case (asking for "A AAAA" at once sends ANY: RFC 8482 gives it the A RRset).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit import topology as t
from testkit.netns import Netns
from testkit.serve import Dnsside, wait_for

CLIENTS = Path(__file__).resolve().parent / "clients"
RESOLV_CONF = ("nameserver 127.0.0.1\nsearch default.svc-global svc-global\n"
               "options ndots:5 timeout:2 attempts:2\n")
WEB = "web.default.svc-global"
WEB_A = ["10.10.0.1", "10.10.0.2", "10.20.0.1", "10.20.0.2"]
WEB_AAAA = ["fd10::1", "fd10::2", "fd20::1", "fd20::2"]
API_A = ["10.30.0.1", "10.31.0.1"]
# (target, port) of `_http._tcp.web.default`: local endpoints carry the EndpointSlice
# port (8080), mirrors the mirror Service's port (80).
WEB_HTTP_SRV = sorted([(f"web-0.east.{WEB}.", 8080), (f"web-1.east.{WEB}.", 8080),
                       (f"web-0.west.{WEB}.", 80), (f"web-1.west.{WEB}.", 80)])
WEB_GRPC_SRV = sorted((target, 9090) for target, _ in WEB_HTTP_SRV)


def topology() -> list[dict[str, Any]]:
    """`web.default`: a local dual-stack headless StatefulSet (east) and its west mirrors;
    `api.apps`: a local exported ClusterIP service and its west gateway-mode mirror."""
    ports = [("http", 80), ("grpc", 9090)]
    web = [
        t.service("default", "web", None, ports, {"mirror.linkerd.io/exported": "true"}),
        t.endpoint_slice("default", "web-v4", "web", [
            {"addresses": ["10.10.0.1"], "hostname": "web-0", "conditions": {"ready": True}},
            {"addresses": ["10.10.0.2"], "hostname": "web-1", "conditions": {"ready": True}},
        ], [("http", 8080), ("grpc", 9090)]),
        t.endpoint_slice("default", "web-v6", "web", [
            {"addresses": ["fd10::1"], "hostname": "web-0", "conditions": {"ready": True}},
            {"addresses": ["fd10::2"], "hostname": "web-1", "conditions": {"ready": True}},
        ], [("http", 8080), ("grpc", 9090)], address_type="IPv6"),
        *t.headless_link("default", "web", "west", {"web-0": ["10.20.0.1", "fd20::1"],
                                                    "web-1": ["10.20.0.2", "fd20::2"]}, ports),
    ]
    gateway_labels = {t.MIRROR: "true", t.CLUSTER: "west"}
    api = [
        t.service("apps", "api", ["10.30.0.1"], [("http", 8080)],
                  {"mirror.linkerd.io/exported": "true"}),
        t.endpoint_slice("apps", "api-x", "api", [
            {"addresses": ["10.30.1.1"], "conditions": {"ready": True}}], [("http", 8080)]),
        t.service("apps", "api-west", ["10.31.0.1"], [("http", 8080)], gateway_labels,
                  {t.FQ: "api.apps.svc.cluster.local"}),
        t.endpoint_slice("apps", "api-west-x", "api-west", [
            {"addresses": ["172.18.0.9"], "conditions": {"ready": True}}],
            [("http", 4143)], labels=gateway_labels),
    ]
    return web + api


@pytest.fixture(scope="module")
def resolver_ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Netns]:
    """The namespace with dnsside on 127.0.0.1:5353 and dnsmasq on 127.0.0.1:53."""
    tmp = tmp_path_factory.mktemp("appres")
    zone = t.write(tmp / "zone.json", topology())
    with Netns("apps", RESOLV_CONF) as ns, Dnsside(
        "--source", str(zone), "--cluster-name", "east", listen="127.0.0.1:5353",
        wrap=ns.cmd([]),
    ):
        log = (tmp / "dnsmasq.log").open("w")
        ns.popen(["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                  "--no-hosts", "--listen-address=127.0.0.1", "--bind-interfaces", "--port=53",
                  "--server=/svc-global/127.0.0.1#5353", "--address=/#/", "--cache-size=0",
                  "--log-facility=-", "--user=root", "--pid-file="],
                 stdout=log, stderr=subprocess.STDOUT)

        def forwarding() -> bool:
            out = ns.run(["dig", "@127.0.0.1", "+short", "+time=1", "+tries=1", WEB], 10)
            return "10.10.0.1" in out.stdout

        wait_for(forwarding, 30, "dnsmasq on port 53 forwarding to dnsside")
        yield ns


def run_client(ns: Netns, args: list[str], timeout: float = 120,
               env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Run a client inside the namespace; its JSON lines keyed by their "query"."""
    out = ns.run(args, timeout, env={**os.environ, **(env or {})})
    assert out.returncode == 0, f"{args[0]} failed:\n{out.stdout}\n{out.stderr}"
    results = {}
    for line in out.stdout.splitlines():
        obj = json.loads(line)
        results[obj["query"]] = obj
    return results


# --------------------------------------------------------------------------- glibc


def test_glibc_getaddrinfo_and_res_query(resolver_ns: Netns) -> None:
    r = run_client(resolver_ns, [sys.executable, str(CLIENTS / "glibc_resolve.py"),
                                 f"gai:{WEB}", f"gai4:{WEB}", f"gai6:{WEB}", "gai:web",
                                 "gai:api.apps", "gai:nope.default.svc-global.", "gai:nope",
                                 f"query:A:{WEB}", f"query:AAAA:{WEB}",
                                 f"query:SRV:_http._tcp.{WEB}", "query:A:nope.svc-global",
                                 "search:A:web", "search:SRV:_grpc._tcp.web",
                                 "search:A:api.apps"])
    # getaddrinfo: both families with AF_UNSPEC; the short names through the search list
    # (ndots:5: `web` → web.default.svc-global; `api.apps` → NXDOMAIN in default, then
    # api.apps.svc-global).
    assert r[f"gai:{WEB}"]["addresses"] == sorted(WEB_A + WEB_AAAA)
    assert r[f"gai4:{WEB}"]["addresses"] == WEB_A
    assert r[f"gai6:{WEB}"]["addresses"] == WEB_AAAA
    assert r["gai:web"]["addresses"] == sorted(WEB_A + WEB_AAAA)
    assert r["gai:api.apps"]["addresses"] == API_A
    for name in ("gai:nope.default.svc-global.", "gai:nope"):
        assert r[name]["not_found"], r[name]  # EAI_NONAME, not a temporary failure
    # res_query: the raw answers, SRV with glue.
    assert r[f"query:A:{WEB}"]["records"] == [f"A {a}" for a in WEB_A]
    assert r[f"query:AAAA:{WEB}"]["records"] == [f"AAAA {a}" for a in WEB_AAAA]
    srv = r[f"query:SRV:_http._tcp.{WEB}"]
    assert sorted((rec.split()[4], int(rec.split()[3])) for rec in srv["records"]) == WEB_HTTP_SRV
    assert f"web-0.west.{WEB}. 10.20.0.1" in srv["additional"]
    assert r["query:A:nope.svc-global"]["error"] == "HOST_NOT_FOUND"
    # res_search: the search list applies.
    assert r["search:A:web"]["qname"] == WEB + "."
    assert r["search:A:web"]["records"] == [f"A {a}" for a in WEB_A]
    grpc = r["search:SRV:_grpc._tcp.web"]
    assert grpc["qname"] == f"_grpc._tcp.{WEB}."
    assert sorted((rec.split()[4], int(rec.split()[3])) for rec in grpc["records"]) == WEB_GRPC_SRV
    assert r["search:A:api.apps"]["qname"] == "api.apps.svc-global."


# --------------------------------------------------------------------------- Go


def test_go_pure_resolver(resolver_ns: Netns, go_resolve: Path) -> None:
    r = run_client(resolver_ns, [str(go_resolve), f"host:{WEB}", "host:web", "host:api.apps",
                                 f"ip4:{WEB}", f"ip6:{WEB}", f"srv:http:tcp:{WEB}",
                                 "srv:grpc:tcp:web", f"srv:::_http._tcp.{WEB}.",
                                 "host:nope.default.svc-global.", "host:nope",
                                 "srv:nope:tcp:web"])
    assert r[f"host:{WEB}"]["addresses"] == sorted(WEB_A + WEB_AAAA)
    assert r["host:web"]["addresses"] == sorted(WEB_A + WEB_AAAA)  # search list, ndots:5
    assert r["host:api.apps"]["addresses"] == API_A
    assert r[f"ip4:{WEB}"]["addresses"] == WEB_A
    assert r[f"ip6:{WEB}"]["addresses"] == WEB_AAAA
    for query, want in ((f"srv:http:tcp:{WEB}", WEB_HTTP_SRV), ("srv:grpc:tcp:web", WEB_GRPC_SRV),
                        (f"srv:::_http._tcp.{WEB}.", WEB_HTTP_SRV)):
        got = r[query]
        assert sorted((s["target"], s["port"]) for s in got["srv"]) == want, got
        assert {(s["priority"], s["weight"]) for s in got["srv"]} == {(0, 25)}
    assert r["srv:grpc:tcp:web"]["cname"] == f"_grpc._tcp.{WEB}."
    for query in ("host:nope.default.svc-global.", "host:nope", "srv:nope:tcp:web"):
        assert r[query]["not_found"], r[query]


# --------------------------------------------------------------------------- Java


def test_java_jndi(resolver_ns: Netns, tmp_path: Path) -> None:
    """JNDI through dnsmasq on port 53, and straight to dnsside (it takes the server URL)."""
    queries = [f"A|{WEB}", f"AAAA|{WEB}", f"SRV|_http._tcp.{WEB}", f"A AAAA|{WEB}",
               f"A AAAA|web-1.west.{WEB}", "A|nope.default.svc-global",
               "SRV|_nope._tcp.web.default.svc-global"]
    java = shutil.which("java") or "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
    out = resolver_ns.run([java, str(CLIENTS / "Jndi.java"),
                           "dns://127.0.0.1/", *queries, "dns://127.0.0.1:5353/", *queries],
                          180, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    results = [json.loads(line) for line in out.stdout.splitlines()]
    by_server: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in results:
        by_server.setdefault(obj["server"], {})[obj["query"]] = obj
    assert set(by_server) == {"dns://127.0.0.1/", "dns://127.0.0.1:5353/"}
    for server, r in by_server.items():
        assert r[f"A|{WEB}"]["records"] == {"A": WEB_A}, server
        assert r[f"AAAA|{WEB}"]["records"] == {"AAAA": WEB_AAAA}, server
        srv = r[f"SRV|_http._tcp.{WEB}"]["records"]["SRV"]
        assert sorted((s.split()[3], int(s.split()[2])) for s in srv) == WEB_HTTP_SRV, server
        # "A AAAA" is one ANY query: RFC 8482 allows one RRset, dnsside gives the A one.
        assert r[f"A AAAA|{WEB}"]["records"] == {"A": WEB_A}, server
        assert r[f"A AAAA|web-1.west.{WEB}"]["records"] == {"A": ["10.20.0.2"]}, server
        for query in ("A|nope.default.svc-global", "SRV|_nope._tcp.web.default.svc-global"):
            assert r[query]["error"] == "javax.naming.NameNotFoundException", (server, r[query])
