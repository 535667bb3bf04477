"""Generate a realistic Linkerd multicluster topology as a `kind: List` JSON file.

The shape of every object is copied from ``examples/demo-east.yaml`` (what
``kubectl get services,endpointslices -A -o json`` prints in the local cluster
``east``): for each global service, a local headless StatefulSet Service
exported with ``mirror.linkerd.io/exported`` and its EndpointSlice(s), and per
linked cluster a headless root mirror ``<svc>-<cluster>`` with its mirrored
slice plus one per-pod mirror Service ``<pod>-<cluster>`` (a ClusterIP) with a
slice holding the gateway address on port 4143. A few percent of the services
are gateway-mode ClusterIP mirrors or remote-discovery mirrors (one
cluster-level member per link), and the noise of a real cluster is there too:
federated Services, gateway probe Services, plain local Services.

Members are counted the way dnsside counts them (SPEC §2): one per local
endpoint hostname, one per per-pod mirror, one per cluster-level mirror or
local ClusterIP Service. A global service has 10-50 members: the same
StatefulSet (3-12 replicas) in the local cluster and in 2-4 of the 4 links.

    python -m bench.topology --members 100000 --out bench/out/topo-100000.json

also writes ``<out>.queries``: a dnsperf query file (an A/SRV mix over names
that exist and have ready members) and ``<out>.meta.json`` (counts, and one
per-pod mirror the propagation benchmark can flip).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit import objects
from testkit.objects import (
    CLUSTER,
    EXPORTED,
    FQ,
    HEADLESS,
    LINK_NS,
    MIRROR,
    MIRRORING_CONTROLLER,
    REMOTE_DISCOVERY,
    SLICE_CONTROLLER,
    mirror_labels,
    remote_discovery_labels,
)

LOCAL = "east"
LINKS = ("west", "north", "south", "central")
GATEWAY = {"west": "172.18.0.3", "north": "172.18.0.4", "south": "172.18.0.5",
           "central": "172.18.0.6"}
ZONE = "svc-global"
STAMP = "2026-11-01T00:00:00Z"
# (app kind, ports) — what multicluster StatefulSets typically expose.
APPS: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = (
    ("cockroachdb", (("grpc", 26257), ("http", 8080))),
    ("cassandra", (("cql", 9042), ("intra", 7000))),
    ("etcd", (("client", 2379), ("peer", 2380))),
    ("consul", (("http", 8500), ("serflan", 8301))),
    ("nats", (("client", 4222), ("cluster", 6222))),
    ("redis", (("redis", 6379),)),
    ("kafka", (("broker", 9092),)),
    ("web", (("http", 80),)),
)
REMOTE_RV = "mirror.linkerd.io/remote-resource-version"
VERSION = 4  # bump when the output changes, so cached files are regenerated


class Ips:
    """Deterministic, unique addresses from a /10."""

    def __init__(self, base: tuple[int, int]) -> None:
        self.base = base[0] << 24 | base[1] << 16
        self.n = 0

    def next(self) -> str:
        self.n += 1
        v = self.base + self.n
        return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"


@dataclass
class Topology:
    rng: random.Random
    items: list[dict[str, Any]] = field(default_factory=list)
    members: int = 0
    global_services: int = 0
    # (qname, qtype) of names that answer, by kind, for the query file
    names: dict[str, list[str]] = field(default_factory=dict)
    flip: dict[str, Any] = field(default_factory=dict)  # one per-pod mirror slice to toggle
    service_ips: Ips = field(default_factory=lambda: Ips((10, 64)))  # mirror ClusterIPs
    pod_ips: Ips = field(default_factory=lambda: Ips((10, 128)))  # local pod IPs
    rv: int = 4000

    def uid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def suffix(self) -> str:
        return f"{self.rng.getrandbits(20):05x}"

    def name(self, kind: str, value: str) -> None:
        self.names.setdefault(kind, []).append(value)

    def service(self, ns: str, name: str, labels: dict[str, str],
                annotations: dict[str, str] | None, cluster_ip: str | None,
                ports: tuple[tuple[str, int], ...], selector: dict[str, str] | None = None
                ) -> dict[str, Any]:
        """Add a Service as the API server lists it, with a uid of this topology's."""
        obj = objects.service(ns, name, None if cluster_ip is None else [cluster_ip], ports,
                              labels, annotations, selector=selector, filled_in=True,
                              uid=self.uid(), resource_version="1", created=STAMP)
        self.items.append(obj)
        return obj

    def slice(self, ns: str, service: str, labels: dict[str, str],
              endpoints: list[dict[str, Any]], ports: tuple[tuple[str, int], ...],
              owner: dict[str, Any] | None = None) -> dict[str, Any]:
        """Add an EndpointSlice of ``service`` under a generated name."""
        obj = objects.endpoint_slice(ns, f"{service}-{self.suffix()}", service, endpoints,
                                     ports, labels=labels, generated=True, owner=owner,
                                     uid=self.uid(), resource_version="1", created=STAMP)
        self.items.append(obj)
        return obj


def statefulset(t: Topology, ns: str, svc: str, app: str, ports: tuple[tuple[str, int], ...],
                replicas: int, links: list[str], local: bool) -> None:
    """One global headless service: a StatefulSet of ``replicas`` pods in each cluster."""
    fq = f"{svc}.{ns}.svc.cluster.local"
    served = False
    if local:
        owner = t.service(ns, svc, {"app": app, EXPORTED: "true"}, None, None, ports,
                          selector={"app": app})
        eps = []
        for i in range(replicas):
            pod = f"{svc}-{i}"
            ready = t.rng.random() > 0.02
            eps.append(objects.endpoint(t.pod_ips.next(), ready, pod, pod=pod, namespace=ns,
                                        pod_uid=t.uid(), filled_in=True))
            t.members += 1
            if ready:
                served = True
                t.name("host", f"{pod}.{LOCAL}.{svc}.{ns}.{ZONE}")
        for start in range(0, len(eps), 100):  # the controller's 100-endpoint slices
            t.slice(ns, svc, {**SLICE_CONTROLLER, "app": app}, eps[start : start + 100], ports,
                    owner)
        if served:
            t.name("cluster", f"{LOCAL}.{svc}.{ns}.{ZONE}")
    for link in links:
        root = f"{svc}-{link}"
        mirror = mirror_labels(link, {"app": app})
        t.rv += 1
        t.service(ns, root, mirror, {FQ: fq, REMOTE_RV: str(t.rv)}, None, ports)
        root_eps = []
        link_served = False
        for i in range(replicas):
            pod = f"{svc}-{i}"
            ip = t.service_ips.next()
            labels = {**mirror, HEADLESS: root}
            t.service(ns, f"{pod}-{link}", labels,
                      {FQ: f"{pod}.{fq}", REMOTE_RV: str(t.rv + 1)}, ip, ports)
            ready = t.rng.random() > 0.02  # a few gateways failing their probe
            s = t.slice(ns, f"{pod}-{link}", {**MIRRORING_CONTROLLER, **labels},
                        [objects.endpoint(GATEWAY[link], ready, filled_in=True)],
                        tuple((n, 4143) for n, _ in ports[:1]))
            root_eps.append(objects.endpoint(ip, True, pod, filled_in=True))
            t.members += 1
            if ready:
                link_served = served = True
                t.name("host", f"{pod}.{link}.{svc}.{ns}.{ZONE}")
                if not t.flip:
                    t.flip = {"slice": s["metadata"]["name"], "namespace": ns,
                              "service": f"{pod}-{link}", "qname": f"{svc}.{ns}.{ZONE}",
                              "host": f"{pod}.{link}.{svc}.{ns}.{ZONE}", "address": ip}
        t.slice(ns, root, {**MIRRORING_CONTROLLER, **mirror}, root_eps, ports)
        if link_served:
            t.name("cluster", f"{link}.{svc}.{ns}.{ZONE}")
    if served:
        t.global_services += 1
        t.name("svc", f"{svc}.{ns}.{ZONE}")
        for port_name, _ in ports:
            t.name("srv", f"_{port_name}._tcp.{svc}.{ns}.{ZONE}")


def clusterip_service(t: Topology, ns: str, svc: str, app: str,
                      ports: tuple[tuple[str, int], ...], links: list[str]) -> None:
    """A global ClusterIP service: local exported Service, gateway or remote-discovery mirrors."""
    fq = f"{svc}.{ns}.svc.cluster.local"
    owner = t.service(ns, svc, {"app": app, EXPORTED: "true"}, None, t.service_ips.next(),
                      ports, selector={"app": app})
    t.slice(ns, svc, {**SLICE_CONTROLLER, "app": app},
            [objects.endpoint(t.pod_ips.next(), True, pod=f"{svc}-{t.suffix()}", namespace=ns,
                              pod_uid=t.uid(), filled_in=True) for _ in range(3)],
            ports, owner)
    t.members += 1
    for n, link in enumerate(links):
        labels = mirror_labels(link, {"app": app})
        ann = {FQ: fq, REMOTE_RV: str(t.rv)}
        if n % 2:  # remote-discovery (flat network): no endpoints at all
            labels = {**labels, **remote_discovery_labels(link, svc)}
            t.service(ns, f"{svc}-{link}", labels, ann, t.service_ips.next(), ports)
        else:  # gateway mode: the slice is the gateway, ready follows the probe
            t.service(ns, f"{svc}-{link}", labels, ann, t.service_ips.next(), ports)
            t.slice(ns, f"{svc}-{link}", {**MIRRORING_CONTROLLER, **labels},
                    [objects.endpoint(GATEWAY[link], True, filled_in=True)],
                    tuple((p, 4143) for p, _ in ports[:1]))
        t.members += 1
        t.name("cluster", f"{link}.{svc}.{ns}.{ZONE}")
    t.global_services += 1
    t.name("svc", f"{svc}.{ns}.{ZONE}")
    for port_name, _ in ports:
        t.name("srv", f"_{port_name}._tcp.{svc}.{ns}.{ZONE}")
    # and Linkerd 2.17's federated Service: one more cluster-level member, "federated"
    t.service(ns, f"{svc}-federated", {MIRROR: "true", "app": app},
              {REMOTE_DISCOVERY: ",".join(f"{svc}@{x}" for x in links),
               "multicluster.linkerd.io/local-discovery": svc}, t.service_ips.next(), ports)
    t.members += 1
    t.name("cluster", f"federated.{svc}.{ns}.{ZONE}")


def generate(members: int, seed: int = 1) -> Topology:
    t = Topology(random.Random(seed))
    for link in LINKS:
        t.items.append(objects.link(
            link, GATEWAY[link], probe={"path": "/ready", "port": "4191", "period": "3s"},
            extra_spec={"gatewayPort": "4143"}, uid=t.uid(), resource_version=str(t.rv),
            created=STAMP))
        t.service(LINK_NS, f"probe-gateway-{link}",
                  {CLUSTER: link, "mirror.linkerd.io/mirrored-gateway": "true"}, None,
                  t.service_ips.next(), (("mc-probe", 4191),))
    n = 0
    while t.members < members:
        ns = f"team-{n // 40:03d}"  # 40 global services per namespace
        app, ports = APPS[n % len(APPS)]
        svc = f"{app}-{n:05d}"
        left = members - t.members
        if n % 25 == 7 and left >= 6:
            clusterip_service(t, ns, svc, app, ports, t.rng.sample(LINKS, 4))
        else:
            links = t.rng.sample(LINKS, t.rng.randint(2, 4))
            local = t.rng.random() < 0.8
            clusters = len(links) + local
            replicas = t.rng.randint(3, 12)
            if replicas * clusters > left:  # the last one: land exactly on `members`
                links, local, clusters = [LINKS[0]], False, 1
                replicas = left
            statefulset(t, ns, svc, app, ports, replicas, links, local)
        if n % 10 == 3:  # a plain local Service, not exported: never a member
            t.service(ns, f"{svc}-metrics", {"app": app}, None, t.service_ips.next(),
                     (("prom", 9090),), selector={"app": app})
        n += 1
    return t


def queries(t: Topology, count: int, seed: int = 2) -> list[str]:
    """A dnsperf query file: 70% A, 30% SRV, over names that exist and answer.

    A: 40% one pod (`<pod>.<cluster>.<svc>.<ns>.Z`), 15% one cluster, 15% the whole
    service; SRV: 20% `_<port>._tcp.<svc>.<ns>.Z`, 10% `<svc>.<ns>.Z`.
    """
    rng = random.Random(seed)
    mix = (("host", "A", 40), ("cluster", "A", 15), ("svc", "A", 15), ("srv", "SRV", 20),
           ("svc", "SRV", 10))
    kinds = [(k, qt) for k, qt, w in mix for _ in range(w)]
    out = []
    for _ in range(count):
        kind, qtype = rng.choice(kinds)
        out.append(f"{rng.choice(t.names[kind])} {qtype}")
    return out


def write(members: int, out: Path, n_queries: int = 50000, seed: int = 1) -> dict[str, Any]:
    t = generate(members, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"apiVersion": "v1", "items": t.items, "kind": "List",
           "metadata": {"resourceVersion": ""}}
    tmp = out.with_suffix(".tmp")
    with tmp.open("w") as f:
        json.dump(doc, f, separators=(",", ":"))
    tmp.replace(out)
    Path(str(out) + ".queries").write_text("\n".join(queries(t, n_queries)) + "\n")
    meta = {"version": VERSION, "members": t.members, "global_services": t.global_services,
            "objects": len(t.items), "bytes": out.stat().st_size, "flip": t.flip,
            "names": {k: len(v) for k, v in t.names.items()}}
    Path(str(out) + ".meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def cached(members: int, directory: Path) -> tuple[Path, dict[str, Any]]:
    """The topology file of ``members`` in ``directory``, generated unless already there."""
    out = directory / f"topo-{members}.json"
    meta_path = Path(str(out) + ".meta.json")
    if out.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("version") == VERSION:
            return out, meta
    return out, write(members, out)


DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo-east.yaml"


def demo(directory: Path, n_queries: int = 50000, seed: int = 2) -> tuple[Path, dict[str, Any]]:
    """The demo topology (``examples/demo-east.yaml``) and a query file of the same mix.

    The names come from the answers dnsside builds from the demo (the few that
    answer with records), sorted by shape into the kinds :func:`queries` draws from.
    """
    import struct

    from bench.nsd_zone import query_for, to_text
    from testkit.inprocess import file_index

    out = directory / "demo-east.queries"
    meta_path = directory / "demo-east.meta.json"
    if out.exists() and meta_path.exists() and out.stat().st_mtime >= DEMO.stat().st_mtime:
        return DEMO, json.loads(meta_path.read_text())
    index = file_index(DEMO, cluster_name=LOCAL)
    t = Topology(random.Random(seed))
    for key in sorted(index.responder.answers):
        wire, qtype = key[:-4], struct.unpack("!H", key[-4:-2])[0]
        reply = index.responder.respond(query_for(key), udp=False)
        if reply is None or reply[3] & 0xF or reply[6:8] == b"\0\0":
            continue
        labels = to_text(wire).rstrip(".").split(".")[:-1]  # without the zone
        if not labels:
            continue
        if labels[0].startswith("_") and qtype == 33:
            t.name("srv", ".".join(labels) + f".{ZONE}.")
        elif len(labels) == 2 and qtype == 1:
            t.name("svc", ".".join(labels) + f".{ZONE}.")
        elif len(labels) == 3 and qtype == 1:
            t.name("cluster", ".".join(labels) + f".{ZONE}.")
        elif len(labels) == 4 and qtype == 1:
            t.name("host", ".".join(labels) + f".{ZONE}.")
    directory.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(queries(t, n_queries, seed)) + "\n")
    meta = {"members": "demo", "names": {k: len(v) for k, v in t.names.items()}}
    meta_path.write_text(json.dumps(meta, indent=1))
    return DEMO, meta


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=1000)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--queries", type=int, default=50000, help="lines in the query file")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    meta = write(args.members, args.out, args.queries, args.seed)
    json.dump(meta, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
