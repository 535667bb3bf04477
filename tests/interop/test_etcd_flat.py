"""etcd forms a cluster across two clusters from `--flat-network` answers alone.

test_etcd.py bootstraps etcd from the per-pod mirrors Linkerd leaves with headless
mirroring on. Here there are none: cluster east has only its own headless Service `etcd`
(exported for remote discovery), the Link to west with its credentials Secret, and the
ClusterIP remote-discovery mirror `etcd-west` Linkerd leaves with headless mirroring
off, which has no endpoints and which dnsside must leave out. Everything about west's
member (its hostname, its pod IP 10.99.0.12) is known only to west's own API server,
which accepts only the token in the Link's Secret and grants it exactly Linkerd's
remote-access role. So the SRV answer `_etcd-server-ssl._tcp.etcd.db.svc-global` names
`etcd-0.west.etcd.db.svc-global` only if dnsside read west through the Link.

Both fake API servers stay in the test process (the test loads them directly), but
listen inside the test's network namespace: their event-loop threads join it first
(`ThreadedKube(netns=...)`), so dnsside and etcd, started inside with `ip netns exec`,
reach them on 127.0.0.1 and dnsside answers etcd on 127.0.0.1:53.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.clusters import linked_cluster, local_cluster
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    remote_discovery_mirror,
    service,
)
from testkit.netns import Netns
from testkit.serve import Dnsside, wait_for
from testkit.threadedkube import ThreadedKube
from tests.interop.test_etcd import (
    ADDRESS,
    DOMAIN,
    PORTS,
    EtcdCluster,
    make_certificates,
    srv_targets,
    target,
)

ETCD_PORTS = [{"name": name, "port": port, "protocol": "TCP"} for name, port in PORTS]
# The remote-discovery mirror's ClusterIP: no pod has it; an answer with it is wrong.
MIRROR_IP = "10.96.50.1"
MEMBERS = ("east", "west")


def etcd_objects(cluster: str) -> list[dict[str, Any]]:
    """One cluster's StatefulSet `etcd` (one pod, `etcd-0`), exported for remote
    discovery: the same in both clusters, but for the pod's address."""
    return [
        service("etcd", "db", labels=dict(REMOTE_DISCOVERY_LABELS), ports=ETCD_PORTS),
        endpoint_slice(f"etcd-{cluster}1", "etcd", [endpoint(ADDRESS[cluster], "etcd-0")],
                       namespace="db", ports=ETCD_PORTS),
    ]


@pytest.fixture
def flat_etcd(tmp_path: Path) -> Iterator[tuple[Netns, Dnsside, ThreadedKube]]:
    """The namespace, dnsside serving east with --flat-network inside it, and west."""
    make_certificates(tmp_path)
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(Netns("etcdflat", "nameserver 127.0.0.1\n"
                                                   "options timeout:1 attempts:3\n"))
        ns.add_addresses(list(ADDRESS.values()))
        west = linked_cluster(tmp_path / "west", etcd_objects("west"), netns=ns.name)
        stack.callback(west.close)
        east = local_cluster(tmp_path / "east", [
            *etcd_objects("east"), link("west"),
            remote_discovery_mirror("etcd", "west", MIRROR_IP, "db", ETCD_PORTS)],
            {"west": west}, netns=ns.name)
        stack.callback(east.close)
        dnsside = stack.enter_context(Dnsside(
            "--source", "kube", "--kubeconfig", east.kubeconfig, "--cluster-name", "east",
            "--flat-network", "--kube-backoff-cap", "0.5",
            listen="127.0.0.1:53", wrap=ns.cmd([])))
        yield ns, dnsside, west


def addresses(ns: Netns, name: str) -> list[str]:
    out = ns.run(["dig", "@127.0.0.1", "+short", "+time=1", "+tries=1", name, "A"], 10)
    return sorted(out.stdout.split())


def test_etcd_forms_a_cluster_across_two_clusters_from_flat_network_answers(
    flat_etcd: tuple[Netns, Dnsside, ThreadedKube], tmp_path: Path
) -> None:
    ns, dnsside, west = flat_etcd
    expected = sorted(target(c) for c in MEMBERS)
    try:
        wait_for(lambda: srv_targets(ns) == expected, 15, "west's etcd-0 in the SRV answer")
    except AssertionError as e:
        raise AssertionError(f"{e}: {srv_targets(ns)}\n" + "\n".join(dnsside.lines[-20:])
                             ) from None
    # West's pod by its own address; the mirror's ClusterIP nowhere.
    assert addresses(ns, DOMAIN) == [ADDRESS["east"], ADDRESS["west"]]
    assert addresses(ns, target("west")) == [ADDRESS["west"]]
    # West was read, with the Link's credentials: the only token its API accepts.
    asked = west.call(lambda: {p for m, p in west.kube.requests if m == "GET"})
    assert "/apis/discovery.k8s.io/v1/endpointslices" in asked, asked

    cluster = EtcdCluster(ns, tmp_path)
    try:
        for name in MEMBERS:
            cluster.start(name, "new")

        def formed() -> dict[str, list[str]] | None:
            # Until a member has published its own name, the other lists it under the
            # placeholder its SRV bootstrap gave it: wait for the real names.
            started = cluster.started()
            return started if set(started) == set(MEMBERS) else None

        try:
            started = wait_for(formed, 90, "two etcd members from SRV discovery")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{cluster.diagnosis()}") from None
        assert started == {c: [f"https://{target(c)}:2380"] for c in MEMBERS}
        health = cluster.etcdctl("endpoint", "health")
        assert health.returncode == 0, health.stderr
        assert (health.stdout + health.stderr).count("is healthy") == 2, health.stderr
        put = cluster.etcdctl("put", "greeting", "hello from east", endpoints=["east"])
        assert put.returncode == 0 and put.stdout.strip() == "OK", put.stderr
        got = cluster.etcdctl("get", "greeting", "--print-value-only", endpoints=["west"])
        assert got.stdout.strip() == "hello from east", got.stderr
        put = cluster.etcdctl("put", "reply", "hello from west", endpoints=["west"])
        assert put.returncode == 0, put.stderr
        got = cluster.etcdctl("get", "reply", "--print-value-only", endpoints=["east"])
        assert got.stdout.strip() == "hello from west", got.stderr
        print(cluster.etcdctl("member", "list", "-w", "table").stdout)
    finally:
        cluster.stop()
