"""Real clients spread over every member (--round-robin, docs/names.md "How clients pick an
address"): glibc's getaddrinfo under an application that connects to the first address,
musl's getaddrinfo on a name too big for a 512-byte answer, Go's resolver dialing, Java's
JNDI and InetAddress.

They run inside a network namespace the test creates (testkit/netns.py) whose
/etc/resolv.conf names dnsside itself, listening on 127.0.0.1:53 there: nothing between
the client and the answer's order. The namespace's loopback holds the members'
addresses and a listener accepts on them, so a client's connection really lands on
the member it picked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit import topology as t
from testkit.netns import Netns
from testkit.rawdns import bulk_objects
from testkit.serve import Dnsside

CLIENTS = Path(__file__).resolve().parent / "clients"
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n"
WEB = "web.default.svc-global"
WEB_A = ["10.10.0.1", "10.10.0.2", "10.10.0.3", "10.20.0.1", "10.20.0.2", "10.20.0.3"]
BIG = "big.bulk.svc-global"  # 123 addresses: 29 fit in 512 bytes
PORT = 8080


def topology() -> list[dict[str, Any]]:
    """`web.default`: three local pods (east) and three west mirrors; `big.bulk`: 123 local
    pods."""
    ports = [("http", PORT)]
    return [
        t.service("default", "web", None, ports, {"mirror.linkerd.io/exported": "true"}),
        t.endpoint_slice("default", "web-x", "web", [
            {"addresses": [f"10.10.0.{i}"], "hostname": f"web-{i}", "conditions": {"ready": True}}
            for i in (1, 2, 3)], ports),
        *t.headless_link("default", "web", "west", {f"web-{i}": [f"10.20.0.{i}"]
                                                     for i in (1, 2, 3)}, ports),
        *bulk_objects("big", "bulk", 123, 99),
    ]


@pytest.fixture(scope="module")
def spread_ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Netns]:
    """The namespace: dnsside on 127.0.0.1:53, web's addresses on lo, a listener on them."""
    tmp = tmp_path_factory.mktemp("spread")
    zone = t.write(tmp / "zone.json", topology())
    with Netns("spread", RESOLV_CONF) as ns, Dnsside(
        "--source", str(zone), "--cluster-name", "east", listen="127.0.0.1:53",
        wrap=ns.cmd([]),
    ):
        ns.add_addresses(WEB_A)
        listener = ns.popen([sys.executable, str(CLIENTS / "accept_all.py"), str(PORT)],
                            stdout=subprocess.PIPE, text=True)
        assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        yield ns


def spread(reached: list[str]) -> str:
    return ", ".join(f"{a} {n}" for a, n in sorted(Counter(reached).items()))


def test_glibc_connections_reach_every_member(spread_ns: Netns) -> None:
    """60 connections as create_connection makes them (getaddrinfo, the first address):
    glibc keeps the DNS order for addresses outside the client's subnet, so each member
    gets its share, 10 each here where nobody else asks."""
    out = spread_ns.run([sys.executable, str(CLIENTS / "connect_first.py"), WEB, str(PORT),
                         "60"], 120)
    assert out.returncode == 0, out.stderr
    reached = json.loads(out.stdout)["reached"]
    print(f"glibc, 60 connections: {spread(reached)}")
    counts = Counter(reached)
    assert sorted(counts) == WEB_A and min(counts.values()) >= 5, counts


@pytest.fixture(scope="module")
def musl_getaddrinfo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/interop/clients/musl_getaddrinfo.c built with Debian's musl-tools, static."""
    binary = tmp_path_factory.mktemp("musl") / "musl_getaddrinfo"
    built = subprocess.run([shutil.which("musl-gcc") or "musl-gcc", "-static", "-O2", "-o",
                            str(binary), str(CLIENTS / "musl_getaddrinfo.c")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return binary


def musl_lookups(ns: Netns, binary: Path, name: str, count: int) -> list[list[str]]:
    out = ns.run([str(binary), name, str(count)], 120)
    assert out.returncode == 0, out.stderr
    lookups = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lookups) == count and all(isinstance(x, list) for x in lookups), lookups
    return lookups


def test_musl_sees_every_address_of_a_large_name(spread_ns: Netns,
                                                 musl_getaddrinfo: Path) -> None:
    """musl asks without EDNS and takes a truncated answer as it is (no TCP before 1.2.4):
    each lookup of the 123 addresses sees the 29 that fit in 512 bytes, and 5 lookups in a
    row see all of them. The first address of a small name moves on with each lookup."""
    lookups = musl_lookups(spread_ns, musl_getaddrinfo, BIG, 5)
    seen = {a for lookup in lookups for a in lookup}
    print(f"musl, {BIG}: {[len(x) for x in lookups]} addresses a lookup, "
          f"{len(seen)} of 123 in 5 lookups")
    assert all(0 < len(x) < 123 for x in lookups) and len(seen) == 123
    firsts = [lookup[0] for lookup in musl_lookups(spread_ns, musl_getaddrinfo, WEB, 60)]
    print(f"musl, {WEB} first address over 60 lookups: {spread(firsts)}")
    counts = Counter(firsts)
    assert sorted(counts) == WEB_A and min(counts.values()) >= 5, counts


def test_go_dials_every_member(spread_ns: Netns, go_resolve: Path) -> None:
    """Go's own resolver (PreferGo) and net.Dial: RFC 6724's rule 9 only for IPv6 in Go, so
    the first IPv4 address of the answer is the one dialed."""
    out = spread_ns.run([str(go_resolve), *[f"dial:{WEB}:{PORT}"] * 30], 120)
    assert out.returncode == 0, out.stderr
    reached = [json.loads(line)["addresses"][0] for line in out.stdout.splitlines()]
    print(f"Go, 30 dials: {spread(reached)}")
    assert len(reached) == 30 and sorted(set(reached)) == WEB_A


def java(ns: Netns, tmp_path: Path, queries: list[str], *props: str) -> list[str]:
    """The first A value of each query, as Jndi.java prints it (JNDI, or INET: InetAddress)."""
    binary = shutil.which("java") or "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
    out = ns.run([binary, *props, str(CLIENTS / "Jndi.java"), "dns://127.0.0.1/", *queries],
                 180, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    return [json.loads(line)["first"]["A"] for line in out.stdout.splitlines()]


def test_java_reaches_more_than_one_member(spread_ns: Netns, tmp_path: Path) -> None:
    """JNDI's DNS provider gives the records in the answer's order: its first moves on.
    InetAddress (what HTTP clients use) asks glibc but caches a name for 30 s by default:
    a JVM sticks to one member until the cache expires, and spreads once it may ask again
    (networkaddress.cache.ttl / sun.net.inetaddr.ttl)."""
    jndi = java(spread_ns, tmp_path, [f"A|{WEB}"] * 30)
    print(f"Java JNDI, 30 lookups: {spread(jndi)}")
    assert sorted(set(jndi)) == WEB_A
    cached = java(spread_ns, tmp_path, [f"INET|{WEB}"] * 12)
    uncached = java(spread_ns, tmp_path, [f"INET|{WEB}"] * 12, "-Dsun.net.inetaddr.ttl=0")
    print(f"Java InetAddress, 12 lookups: cached {spread(cached)}; ttl 0 {spread(uncached)}")
    assert len(set(cached)) == 1 and len(set(uncached)) > 1
