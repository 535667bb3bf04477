"""The standalone install's zone name server answers where its NS record points.

dnsside publishes `Z. NS Z.` with the pod's IP as glue, and glue has no port: a
resolver that follows the NS (BIND `type stub`, unbound `stub-prime: yes`, any
secondary) asks port 53 of the pod's IP. This test runs dnsside as the generated
standalone manifest runs it, in a network namespace of its own standing in for the
pod:

* the container's `args`, its `env` (POD_IP from the downward API becomes the
  namespace's address) and the `dnsside` ConfigMap's DNSSIDE_* data, all read from
  `dnsside install` output; only the source of the zone (a file instead of the API
  server) and `--gateway-probe off` are the test's;
* as uid/gid 65532 with no capability (`setpriv`), the pod's `securityContext`
  sysctls applied to the namespace (`sysctl -w`), as the kubelet applies them to
  the pod sandbox: port 53 binds only thanks to
  `net.ipv4.ip_unprivileged_port_start` (checked both ways);
* BIND `type stub` and unbound `stub-prime: yes`, started by the test in the same
  namespace from configs it writes (testkit/resolvers.py), answer A, AAAA and SRV
  questions exactly as dnsside does directly.

And the old layout (`dnsside install --dns-port 5353`, what every install was
before): the resolvers are pointed at port 5353, where dnsside answers and where
they learn the NS and its glue, and then ask port 53 of the glue, where nothing
listens: no answer but SERVFAIL.

The namespace has a loopback interface only, with the pod address (192.0.2.53,
TEST-NET-1) on it: nothing leaves it. Needs root (CI runs as root), `ip`,
`setpriv`, `named` and `unbound`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.exception
import dns.rcode
import pytest
import yaml

from testkit.netns import Netns
from testkit.resolvers import Bind, Resolver, Unbound, same_answer
from testkit.serve import ROOT, Dnsside
from tests.interop.test_resolver_matrix import BIG, NGINX, PG, QUESTIONS, ROACH, zone_objects

POD_IP = "192.0.2.53"
UID = 65532  # the manifests' runAsUser/runAsGroup
PORT_SYSCTL = "net.ipv4.ip_unprivileged_port_start"


# A few questions of each kind for the old layout (the new one gets the whole list).
FEW = [(NGINX, "A"), (PG, "AAAA"), ("_http._tcp." + NGINX, "SRV"), (ROACH, "SRV"),
       (BIG, "SRV")]

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def inside(ns: Netns) -> Iterator[None]:
    """This thread (and every process it starts) in ``ns``'s network, then back."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns.name}", os.O_RDONLY)
    try:
        _setns(target)
        yield
    finally:
        _setns(home)
        os.close(home)
        os.close(target)


def standalone(*flags: str) -> dict[str, Any]:
    """What `dnsside install --cluster-name east FLAGS` gives the pod: the container's
    args and env, the ConfigMap's data and the pod's sysctls."""
    out = subprocess.run([sys.executable, "-m", "dnsside", "install", "--cluster-name", "east",
                          *flags], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (source,) = c["envFrom"]
    cm_name = source["configMapRef"]["name"]
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cm_name)
    env: dict[str, str] = dict(cm["data"])
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}, e
            env[e["name"]] = POD_IP
    assert all(k.startswith("DNSSIDE_") or k == "POD_IP" for k in env), env
    svc = next(o for o in objs if o["kind"] == "Service")
    return {"args": c["args"], "env": env,
            "sysctls": {s["name"]: s["value"]
                        for s in pod["securityContext"].get("sysctls", ())},
            "service_port": next(p["port"] for p in svc["spec"]["ports"]
                                 if p["name"] == "dns"),
            "user": (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])}


@pytest.fixture(scope="module")
def zone_file() -> Iterator[Path]:
    """The matrix's zone, readable by uid 65532 (pytest's tmp dirs are root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="dnsside-ns53-"))
    try:
        d.chmod(0o755)
        path = d / "zone.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                    "items": zone_objects()}))
        path.chmod(0o644)
        yield path
    finally:
        shutil.rmtree(d, ignore_errors=True)


def runtime_files() -> Iterator[tuple[Path, Path]]:
    """The files of the distributions dnsside needs to serve (the `fast` extra's uvloop
    included), found through their metadata, not a list here: (where it is, where it goes
    below a directory on sys.path)."""
    seen: set[str] = set()
    todo = ["dnsside"]
    while todo:
        try:
            dist = importlib.metadata.distribution(todo.pop())
        except importlib.metadata.PackageNotFoundError:  # needed on another Python only
            continue
        name = dist.metadata["Name"].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        if name != "dnsside":  # installed editable: its files are the checkout's
            for path in dist.files or ():  # relative to the directory it was installed in
                if not path.parts or path.parts[0] == "..":
                    continue  # a script in bin/, not an importable file
                yield Path(str(dist.locate_file(path))), Path(str(path))
        for req in dist.requires or ():
            marker = req.partition(";")[2]
            if "extra ==" not in marker or 'extra == "fast"' in marker:
                todo.append(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])


@pytest.fixture(scope="module")
def pod_python(zone_file: Path) -> dict[str, str]:
    """The environment in which uid 65532 runs dnsside from any checkout, one in a
    directory only root may enter included (as /root is, or a `mktemp -d`): a readable
    copy of dnsside and of the packages it needs, beside the zone file, on PYTHONPATH."""
    lib = zone_file.parent / "lib"
    shutil.copytree(ROOT / "dnsside", lib / "dnsside",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for src, relative in runtime_files():
        if not src.is_file() or src.suffix == ".pyc":
            continue
        dest = lib / relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    for d in [lib, *lib.rglob("*")]:
        d.chmod(0o755 if d.is_dir() else 0o644)
    return {"PYTHONPATH": str(lib), "PYTHONDONTWRITEBYTECODE": "1"}


def as_pod_user(user: tuple[int, int]) -> list[str]:
    uid, gid = user
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all"]


def bind_53(user: tuple[int, int]) -> subprocess.CompletedProcess[str]:
    code = ("import socket\n"
            "for fam, host in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET6, '::')):\n"
            "    socket.socket(fam, socket.SOCK_DGRAM).bind((host, 53))\n")
    return subprocess.run([*as_pod_user(user), sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def pod(manifest: dict[str, Any], zone: Path,
        python_env: dict[str, str]) -> Iterator[tuple[Netns, Dnsside]]:
    """A namespace with the pod's address and sysctls, dnsside in it as the manifest
    runs it; the calling thread inside the namespace throughout."""
    with Netns("ns53") as ns:
        subprocess.run(["ip", "-n", ns.name, "addr", "add", f"{POD_IP}/32", "dev", "lo"],
                       check=True, capture_output=True)
        with inside(ns):
            for name, value in manifest["sysctls"].items():
                subprocess.run(["sysctl", "-qw", f"{name}={value}"], check=True,
                               capture_output=True)
            args = manifest["args"]
            assert args[0] == "serve"
            listen = args[args.index("--listen") + 1]
            with Dnsside(*args[1:], "--source", str(zone), listen=listen,
                         env={**manifest["env"], **python_env},
                         wrap=as_pod_user(manifest["user"])) as server:
                assert f"listening on udp+tcp {listen}" in "\n".join(server.lines)
                server.host = POD_IP  # direct questions go to the glue address
                yield ns, server


# Nothing listens on the glue's port 53: BIND gives up at once (SERVFAIL), unbound only once
# its retransmit timeout for the address, which doubles from 376 ms, has reached its cap
# (2 minutes by default), dropping the client's question after 1.9 s meanwhile. So the
# readiness probe took about 30 s and each question of the old layout timed out (the
# test's 5 s): 52 s alone, 122 s in a loaded CI run. With the cap at 1 s the address is
# down after a few resends and every question gets its SERVFAIL at once: the same
# assertion, reached in about 5 s, on every question (unbound SERVFAILed the first only). An
# address that answers still answers through it (the port-53 test passes with it too).
DEAD_GLUE_UNBOUND = "    infra-cache-max-rtt: 1000\n"


def resolvers(tmp: Path, port: int, unbound_extra: str = "") -> list[Resolver]:
    """BIND `type stub` and unbound `stub-prime: yes`, told to ask POD_IP:``port``
    for the zone's NS; after that they go where the NS glue says."""
    (tmp / "bind").mkdir()
    (tmp / "unbound").mkdir()
    return [Bind(tmp / "bind", POD_IP, "stub", primaries_port=port),
            Unbound(tmp / "unbound", POD_IP, port, stub_prime=True, extra=unbound_extra)]


def stub_records(bind: Bind) -> set[tuple[str, ...]]:
    out = subprocess.run(["named-compilezone", "-f", "text", "-F", "text", "-o", "-",
                          "svc-global", str(bind.tmp / "stub.db")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    return {tuple(line.split()[2:]) for line in out.stdout.splitlines()}


def test_the_manifest_pod_answers_on_port_53_of_its_glue(zone_file: Path, pod_python: Any,
                                                         tmp_path: Path) -> None:
    manifest = standalone()
    assert manifest["sysctls"] == {PORT_SYSCTL: "53"}
    assert manifest["service_port"] == 53
    assert manifest["args"][manifest["args"].index("--listen") + 1] == "[::]:53"
    with pod(manifest, zone_file, pod_python) as (_ns, server):
        # dnsside (uid 65532, no capability) holds port 53 thanks to the sysctl; without
        # it the same user cannot bind 53 (EACCES comes before EADDRINUSE).
        subprocess.run(["sysctl", "-qw", f"{PORT_SYSCTL}=1024"], check=True)
        denied = bind_53(manifest["user"])
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
        subprocess.run(["sysctl", "-qw", f"{PORT_SYSCTL}=53"], check=True)

        ns_answer = server.query("svc-global", "NS", tcp=True)
        glue = [rr for rrset in ns_answer.additional for rr in rrset]
        assert [rr.address for rr in glue] == [POD_IP], ns_answer
        for r in resolvers(tmp_path, 53):
            r.start()
            try:
                for _, name, rdtype in QUESTIONS:
                    same_answer(server, r, name.lower(), rdtype)
                if isinstance(r, Bind):  # what BIND learned: the NS and the pod's address
                    assert stub_records(r) >= {("IN", "NS", "svc-global."),
                                               ("IN", "A", POD_IP)}
            finally:
                r.stop()


def test_the_old_layout_on_5353_leaves_the_glue_unanswered(zone_file: Path, pod_python: Any,
                                                           tmp_path: Path) -> None:
    """`--dns-port 5353`: dnsside answers on 5353 and the resolvers learn the NS there,
    but the glue sends them to port 53, where nothing answers."""
    manifest = standalone("--dns-port", "5353")
    assert manifest["sysctls"] == {}
    assert manifest["service_port"] == 5353
    with pod(manifest, zone_file, pod_python) as (_ns, server):
        server.port = 5353
        for r in resolvers(tmp_path, 5353, DEAD_GLUE_UNBOUND):
            # Ready = any answer: the probe's NXDOMAIN can never come through the glue.
            r.start(ready=lambda m: True)
            try:
                if isinstance(r, Bind):  # priming at 5353 works: it holds NS + glue
                    deadline = time.monotonic() + 20
                    while not (r.tmp / "stub.db").exists() and time.monotonic() < deadline:
                        time.sleep(0.2)
                    assert stub_records(r) >= {("IN", "NS", "svc-global."),
                                               ("IN", "A", POD_IP)}, r.log_text()[-2000:]
                for name, rdtype in FEW:
                    direct = server.query(name, rdtype, tcp=True)
                    assert direct.answer, (name, rdtype)
                    try:
                        via = r.query(name, rdtype, timeout=5.0)
                    except dns.exception.Timeout:
                        continue
                    assert via.rcode() == dns.rcode.SERVFAIL and not via.answer, (
                        f"{r.kind}: {name} {rdtype} answered through the glue:\n{via}")
            finally:
                r.stop()
