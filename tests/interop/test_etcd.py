"""A real peer client end to end: etcd (Debian's etcd-server, 3.4) bootstraps a cluster
from dnsside's SRV records, one member per cluster, and a fourth member joins once its
cluster appears in the source.

What a StatefulSet spread over linked clusters does: each member is started with
`--discovery-srv etcd.db.svc-global`, so it looks up
`_etcd-server-ssl._tcp.etcd.db.svc-global` (the Service's port named `etcd-server-ssl`),
resolves every target (`etcd-0.<cluster>.etcd.db.svc-global`) and finds itself among
them by address. etcd 3.4 bootstraps from SRV only over TLS (`-ssl`, https peer URLs),
so the test makes a CA and one certificate per member with `openssl`.

Everything runs inside a network namespace the test creates (testkit/netns.py): dnsside
serves the topology file on 127.0.0.1:53, which /etc/resolv.conf there names, so etcd's
own resolver asks it; each member binds its own 10.99.0.x address (added to the
namespace's loopback interface) with the usual ports.
The topology is the shape Linkerd leaves in cluster east (examples/demo-east.yaml): a
local headless Service `etcd` whose EndpointSlice has `etcd-0` at 10.99.0.11, and per-pod
mirrors for the linked clusters with ClusterIPs 10.99.0.12 (west), .13 (north) and, once
the file is rewritten, .14 (south).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit import topology as t
from testkit.netns import Netns
from testkit.serve import Dnsside, wait_for

DOMAIN = "etcd.db.svc-global"
SRV_NAME = f"_etcd-server-ssl._tcp.{DOMAIN}"
# Pod addresses, on the namespace's loopback interface (dnsside never answers loopback ones).
ADDRESS = {"east": "10.99.0.11", "west": "10.99.0.12", "north": "10.99.0.13",
           "south": "10.99.0.14"}
PORTS = [("etcd-server-ssl", 2380), ("etcd-client", 2379)]
TOKEN = "dnsside-etcd-test"


def target(cluster: str) -> str:
    return f"etcd-0.{cluster}.{DOMAIN}"


def topology(links: list[str]) -> list[dict[str, Any]]:
    """East's view: the local StatefulSet `etcd` (one pod) plus each link's mirrors."""
    objects = [
        t.service("db", "etcd", None, PORTS, {"mirror.linkerd.io/exported": "true"}),
        t.endpoint_slice("db", "etcd-7xk2p", "etcd", [
            {"addresses": [ADDRESS["east"]], "hostname": "etcd-0",
             "conditions": {"ready": True}}], PORTS),
    ]
    for cluster in links:
        objects += t.headless_link("db", "etcd", cluster, {"etcd-0": [ADDRESS[cluster]]}, PORTS)
    return objects


def write_atomically(path: Path, objects: list[dict[str, Any]]) -> None:
    """The file source must never read half a file: write aside, then rename."""
    tmp = path.with_suffix(".tmp")
    t.write(tmp, objects)
    os.replace(tmp, path)


def make_certificates(tmp: Path) -> None:
    """A CA and, per member, a key and certificate for its target name, the discovery
    domain (etcd checks the SRV domain against the SANs) and its addresses (127.0.0.1:
    connections between members inside the namespace come from there)."""
    def openssl(*args: str, stdin: bytes | None = None) -> bytes:
        out = subprocess.run(["openssl", *args], input=stdin, capture_output=True, timeout=60,
                             cwd=tmp)
        assert out.returncode == 0, out.stderr.decode()
        return out.stdout

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=dnsside etcd test CA")
    for cluster, address in ADDRESS.items():
        (tmp / f"{cluster}.ext").write_text(
            f"subjectAltName=DNS:{target(cluster)},DNS:{DOMAIN},IP:{address},IP:127.0.0.1\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n")
        csr = openssl("req", "-new", *ec, "-keyout", f"{cluster}.key",
                      "-subj", f"/CN=etcd-0.{cluster}")
        openssl("x509", "-req", "-CA", "ca.crt", "-CAkey", "ca.key", "-days", "2",
                "-extfile", f"{cluster}.ext", "-out", f"{cluster}.crt", stdin=csr)


class EtcdCluster:
    """The members started so far inside ``ns``; etcdctl run inside it too."""

    def __init__(self, ns: Netns, tmp: Path) -> None:
        self.ns = ns
        self.tmp = tmp
        self.logs: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen[Any]] = {}

    def start(self, cluster: str, state: str) -> None:
        address = ADDRESS[cluster]
        log = self.tmp / f"etcd-{cluster}.log"
        self.logs[cluster] = log
        with log.open("w") as out:
            self.procs[cluster] = self.ns.popen([
                "etcd", "--name", cluster, "--data-dir", str(self.tmp / f"data-{cluster}"),
                "--discovery-srv", DOMAIN,
                "--initial-advertise-peer-urls", f"https://{target(cluster)}:2380",
                "--listen-peer-urls", f"https://{address}:2380",
                "--listen-client-urls", f"http://{address}:2379",
                "--advertise-client-urls", f"http://{address}:2379",
                "--initial-cluster-token", TOKEN, "--initial-cluster-state", state,
                "--peer-trusted-ca-file", str(self.tmp / "ca.crt"),
                "--peer-cert-file", str(self.tmp / f"{cluster}.crt"),
                "--peer-key-file", str(self.tmp / f"{cluster}.key"),
                "--peer-client-cert-auth", "--logger", "zap", "--log-outputs", "stderr",
            ], stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(self.tmp)})

    def etcdctl(self, *args: str, endpoints: list[str] | None = None, timeout: float = 30
                ) -> subprocess.CompletedProcess[str]:
        urls = ",".join(f"http://{ADDRESS[c]}:2379" for c in endpoints or list(self.logs))
        return self.ns.run(["etcdctl", "--endpoints", urls, "--dial-timeout", "3s",
                            "--command-timeout", "10s", *args], timeout,
                           env={**os.environ, "ETCDCTL_API": "3", "HOME": str(self.tmp)})

    def members(self) -> list[dict[str, Any]]:
        """`member list` (JSON) from any member that answers; [] while none does."""
        out = self.etcdctl("member", "list", "-w", "json")
        if out.returncode != 0:
            return []
        return list(json.loads(out.stdout).get("members", []))

    def started(self) -> dict[str, list[str]]:
        """Name → peer URLs of the members that have started (a member added but not yet
        started has no name)."""
        return {m["name"]: sorted(m["peerURLs"]) for m in self.members() if m.get("name")}

    def leader(self) -> str | None:
        """The name of the running member that leads, if one does."""
        running = [c for c, p in self.procs.items() if p.poll() is None]
        if not running:
            return None
        status = self.etcdctl("endpoint", "status", "-w", "json", endpoints=running,
                              timeout=15)
        try:
            reports = json.loads(status.stdout)
        except ValueError:
            return None
        ids = {r["Status"]["header"]["member_id"]: c for c, r in zip(running, reports,
                                                                      strict=False)}
        leaders = {r["Status"].get("leader", 0) for r in reports} & set(ids)
        return ids[leaders.pop()] if len(leaders) == 1 else None

    def stop(self) -> None:
        """Followers first, together; the leader once it has stepped down. A leader told
        to stop tries to hand over its leadership first, and without a quorum to elect
        anyone that takes 7 s; alone, it steps down within an election timeout."""
        leader = self.leader()
        followers = [p for c, p in self.procs.items() if c != leader]
        for proc in followers:
            if proc.poll() is None:
                proc.terminate()
        for proc in followers:
            self.ns.stop(proc)
        if leader is not None:
            with contextlib.suppress(AssertionError):
                wait_for(lambda: self.leader() is None, 10, "the last leader to step down")
            self.ns.stop(self.procs[leader])

    def diagnosis(self) -> str:
        tails = [f"--- {c}\n" + "\n".join(p.read_text().splitlines()[-15:])
                 for c, p in self.logs.items() if p.exists()]
        return "\n".join(tails)


@pytest.fixture
def etcd_ns(tmp_path: Path) -> Iterator[tuple[Netns, Path, Dnsside]]:
    zone = tmp_path / "east.json"
    write_atomically(zone, topology(["west", "north"]))
    make_certificates(tmp_path)
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(Netns("etcd", "nameserver 127.0.0.1\n"
                                               "options timeout:1 attempts:3\n"))
        ns.add_addresses(list(ADDRESS.values()))
        dnsside = stack.enter_context(Dnsside("--source", str(zone), "--cluster-name", "east",
                                              listen="127.0.0.1:53", wrap=ns.cmd([])))
        yield ns, zone, dnsside


def srv_targets(ns: Netns) -> list[str]:
    out = ns.run(["dig", "@127.0.0.1", "+short", "+time=1", "+tries=1", SRV_NAME, "SRV"], 10)
    return sorted(line.split()[3].rstrip(".") for line in out.stdout.splitlines() if line)


def test_etcd_bootstraps_from_srv_and_a_fourth_member_joins(
    etcd_ns: tuple[Netns, Path, Dnsside], tmp_path: Path
) -> None:
    ns, zone, _dnsside = etcd_ns
    assert srv_targets(ns) == sorted(target(c) for c in ("east", "west", "north"))
    cluster = EtcdCluster(ns, tmp_path)
    try:
        check_cluster(ns, zone, cluster)
    finally:
        cluster.stop()


def check_cluster(ns: Netns, zone: Path, cluster: EtcdCluster) -> None:
    for name in ("east", "west", "north"):
        cluster.start(name, "new")

    def formed() -> dict[str, list[str]] | None:
        # Until a member has published its own name, the others list it under the
        # placeholder their SRV bootstrap gave it ("0", "1"): wait for the real names.
        started = cluster.started()
        return started if set(started) == {"east", "west", "north"} else None

    try:
        started = wait_for(formed, 90, "three etcd members from SRV discovery")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.diagnosis()}") from None
    assert started == {c: [f"https://{target(c)}:2380"] for c in ("east", "west", "north")}
    put = cluster.etcdctl("put", "greeting", "hello from east", endpoints=["east"])
    assert put.returncode == 0 and put.stdout.strip() == "OK", put.stderr
    got = cluster.etcdctl("get", "greeting", "--print-value-only", endpoints=["north"])
    assert got.stdout.strip() == "hello from east", got.stderr

    # Cluster south is linked: its mirrors appear in the source (the file is rewritten),
    # dnsside reloads it, and the SRV record grows a fourth target.
    write_atomically(zone, topology(["west", "north", "south"]))
    wait_for(lambda: len(srv_targets(ns)) == 4, 30, "south in the SRV answer")
    # The runtime reconfiguration etcd documents: announce the member, then start it
    # with --initial-cluster-state existing (here again from the SRV records). etcd
    # refuses a new member ("unhealthy cluster") until every member has been connected
    # for 5 s; an add whose reply was lost shows up as "already exists" on the retry.
    def added() -> bool:
        add = cluster.etcdctl("member", "add", "south",
                              f"--peer-urls=https://{target('south')}:2380", endpoints=["east"])
        return add.returncode == 0 or "Peer URLs already exists" in add.stderr

    wait_for(added, 60, "etcd to accept `member add south`")
    cluster.start("south", "existing")

    def joined() -> dict[str, list[str]] | None:
        started = cluster.started()
        return started if set(started) == {"east", "west", "north", "south"} else None

    try:
        started = wait_for(joined, 90, "the fourth member to join")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.diagnosis()}") from None
    assert set(started) == {"east", "west", "north", "south"}
    assert started["south"] == [f"https://{target('south')}:2380"]
    # The new member has the data: a serializable read answered from its own store.
    wait_for(lambda: cluster.etcdctl("get", "greeting", "--print-value-only",
                                     "--consistency=s", endpoints=["south"]
                                     ).stdout.strip() == "hello from east",
             30, "the key replicated to south")
    print(cluster.etcdctl("member", "list", "-w", "table").stdout)
