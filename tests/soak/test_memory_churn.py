"""Memory under object churn with a constant live set, in seconds, without RSS.

The index is driven in-process through tens of thousands of the changes a real
installation makes to objects that keep their names: a slice's lone endpoint
(a selectorless Service: a database outside the cluster, a node) moving to a
new address, local pods and per-pod mirrors flipping readiness, per-pod mirrors
deleted and re-created with a new ClusterIP. The set of live objects stays the
same, so after a full collection the traced Python memory must come back to
where it was: anything kept per change shows up here long before it shows in a
process's RSS (bench/churn_memory.py --mix new measures that).
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from typing import Any

from dnsside.core.index import IndexOptions
from dnsside.model.events import (
    Delete,
    Kind,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import parse_object
from testkit import topology
from testkit.inprocess import empty_index

NS = "db"
GATEWAYS = {"west": "172.18.0.3", "north": "172.18.0.4"}
PORTS = [("pg", 5432)]
MIRRORS = 10  # per-pod mirrors of one global service: each change to one rebuilds it


def _service(name: str, ip: str, labels: dict[str, str],
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return topology.service(NS, name, [ip], PORTS, labels, annotations)


def _slice(name: str, service: str, ip: str, ready: bool) -> dict[str, Any]:
    return topology.endpoint_slice(NS, name, service, [
        {"addresses": [ip], "conditions": {"ready": ready}}], PORTS)


class World:
    """40 selectorless exported Services (one endpoint each) and 10 per-pod mirrors in
    two links; every change keeps the objects' names."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(40):
            name = f"ext-{i}"
            self.put(_service(name, self.ip(), {"mirror.linkerd.io/exported": "true"}))
            self.put(_slice(f"{name}-abcde", name, self.ip(), True))
        for i in range(MIRRORS):
            cluster = ("west", "north")[i % 2]
            name = f"pg-{i // 2}-{cluster}"
            labels = {"mirror.linkerd.io/mirrored-service": "true",
                      "mirror.linkerd.io/cluster-name": cluster,
                      "mirror.linkerd.io/headless-mirror-svc-name": f"pg-{cluster}"}
            fq = {"mirror.linkerd.io/remote-svc-fq-name": f"pg-{i // 2}.pg.{NS}.svc.cluster.local"}
            self.put(_service(name, self.ip(), labels, fq))
            self.put(_slice(f"{name}-fghij", name, GATEWAYS[cluster], True))

    def ip(self) -> str:
        self.n += 1
        return f"10.{self.n >> 16 & 255}.{self.n >> 8 & 255}.{self.n & 255}"

    def put(self, obj: dict[str, Any]) -> None:
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj

    def records(self) -> list[Any]:
        return [parse_object(o) for o in self.objects.values()]

    def change(self) -> list[Any]:
        """One change: a lone endpoint's new address, a readiness flip, or a per-pod mirror
        re-created (deleted, then back under its name with a new ClusterIP)."""
        r = self.rng.random()
        i = self.rng.randrange(40)
        if r < 0.5:
            sl = self.objects[("EndpointSlice", f"ext-{i}-abcde")]
            sl["endpoints"][0]["addresses"] = [self.ip()]
            return [Upsert(parse_object(sl))]
        i %= MIRRORS
        cluster = ("west", "north")[i % 2]
        name = f"pg-{i // 2}-{cluster}"
        svc, sl = self.objects[("Service", name)], self.objects[("EndpointSlice", f"{name}-fghij")]
        if r < 0.75:
            cond = sl["endpoints"][0]["conditions"]
            cond["ready"] = not cond["ready"]
            return [Upsert(parse_object(sl))]
        svc["spec"]["clusterIP"] = ip = self.ip()
        svc["spec"]["clusterIPs"] = [ip]
        return [Delete(Kind.SLICE, NS, f"{name}-fghij"), Delete(Kind.SERVICE, NS, name),
                Upsert(parse_object(svc)), Upsert(parse_object(sl))]


CHANGES = 6_000


def _traced_after_collect() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_traced_memory_returns_after_tens_of_thousands_of_changes() -> None:
    world = World(seed=28)
    options = IndexOptions(cluster_name="east")
    index = empty_index(options, zones=["svc-global"], mcs_zones=["clusterset.local"])
    links = [parse_object({"apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
                           "metadata": {"name": c, "namespace": "linkerd-multicluster"},
                           "spec": {"targetClusterName": c}}) for c in GATEWAYS]
    index.apply([Replace(frozenset(Kind), tuple([*world.records(), *links])), Synced()])
    assert len(index.global_services) == 41  # 40 exported Services, and pg
    tracemalloc.start()
    try:
        for _ in range(1_000):  # the tables and caches reach their working sizes
            index.apply(world.change())
        start = _traced_after_collect()
        for _ in range(CHANGES):
            index.apply(world.change())
        grown = _traced_after_collect() - start
    finally:
        tracemalloc.stop()
    assert len(index.global_services) == 41
    # Before the fix: about 150 bytes a change (a parse cache kept every lone endpoint
    # it had seen until it held 4,096): 469,950 bytes here before the fix.
    assert grown < 64 * 1024, f"{grown} bytes more after {CHANGES} changes"
