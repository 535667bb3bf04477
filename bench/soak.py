"""Soak: a real `dnsside serve` against a churning, faulty API server and flaky gateways,
every name's answer compared with an independent model.

    .venv/bin/python -m bench.soak --minutes 2 --seed 1 --out bench/out/soak.json
    .venv/bin/python -m bench.soak --minutes 30 --seed 1 --out bench/out/soak-30.json \\
        --report bench/SOAK_RESULTS.md

In this process: the fake API server of testkit/fakekube.py (on its own thread,
as testkit/serve.py's ThreadedKube runs it) and three small HTTP gateways on
loopback addresses (127.x.y.1-3) behind the Links' probe Services. Against
them, a `dnsside serve --gateway-probe on --gateway-probe-period 0.5` subprocess.
Then, until --minutes are up, in rounds of --round seconds:

* churn at --rate object writes a second: local pods scaled, made ready and not
  ready, given new IPs; per-pod mirrors (Service + slice + root slice) added and
  removed, their readiness flipped, their ClusterIPs changed; gateway-mode and
  remote-discovery mirrors deleted and re-created; Links deleted without their
  mirrors (orphans, as Linkerd leaves them) and re-created; a probe path
  changed; the federated Service deleted and re-created; gateways killed
  (connection refused), hung (accept, never answer) and revived;
* every other round an API fault, in rotation: 410 on every watch followed by
  a burst of 500s; the API unreachable for 20 s; every watch dropped; a slow API
  (every request waits 1 s); 410 on every watch;
* UDP and TCP queries all the time (A, AAAA, SRV, --qps a second), every
  SERVFAIL and timeout counted;
* at the end of the round churn stops and every name (services, SRV by port
  and protocol, clusters, every member that ever existed, an orphaned
  cluster's members) is compared with the model until they agree or the
  promised settle time is over (gateway changes 3 s, API changes 2 s after the
  API is back, so a Link changed while it was away 2 + 3 s); a difference at
  the deadline is a mismatch, logged as a diff with the Link and gateway changes
  since the last comparison and dnsside's own `/debug/explain` of two names.

The gateways also count stray probes: a request for a cluster whose Link has been
gone (with the API up) for more than 2 s (SPEC: only linked clusters are probed).
RSS and CPU are sampled from /proc, dnsside's stderr is kept for tracebacks and
ERROR lines, and the run ends with SIGTERM: during the lame-duck period
queries must still be answered and /readyz must say 503. The exit status is 1
on a mismatch, a SERVFAIL, timeout or other query failure after the first
sync, a traceback, a stray probe or a failed lame-duck check (and, with
`--max-rss-growth PCT`, RSS growing more than that over the last half). `--out` writes
the summary as JSON, `--report` the markdown report (bench/SOAK_RESULTS.md).

The hard part is **what dnsside may be expected to know**. The model is
computed from the soak's own description of the cluster (the `World`, from
which the Kubernetes objects are rendered), by SPEC §2's rules, never from
dnsside's code. Two inputs are not in the World:

* *Has this gateway ever answered dnsside's probe at this URL?* That decides
  whether a dead gateway is acted on, and it depends on probe timing. The
  gateways are ours, so they are the oracle: each records every path it served
  a 200 on, which is exactly the (cluster, URL) history SPEC says dnsside keeps
  for its whole life.
* *What has dnsside been able to read?* While the API server is unreachable,
  the objects dnsside should serve are those of the moment it went away (a
  snapshot of the World taken then), while gateways keep changing and must still
  be acted on: the mid-fault comparison uses the snapshot for objects and the
  live gateways for probes.

dnsside's retry backoff is capped at 1 s (`--kube-backoff-cap 1`): the settle
promise counts from the moment the API is back, and with the default 30 s cap a
reconnect may legitimately wait that long.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import hashlib
import ipaddress
import json
import os
import platform
import random
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from testkit import objects
from testkit.gateways import AsyncGateway
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
from testkit.serve import Dnsside, wait_for
from testkit.threadedkube import ThreadedKube

ROOT = Path(__file__).resolve().parent.parent

LOCAL = "east"
CLUSTERS = ("west", "north", "south")
GATEWAY_ADDR = {"west": "172.18.0.3", "north": "172.18.0.4", "south": "172.18.0.5"}
ZONE = "svc-global."
PROBE_PATHS = ("/ready", "/live")  # what our gateways answer 200 on
SETTLE_API = 2.0  # promised: an object change is answered within 2 s of the API being back
SETTLE_GATEWAY = 3.0  # promised: a gateway change leaves/enters the answers within 3 s
STRAY_GRACE = 2.0  # a probe of a cluster unlinked (visibly) longer ago than this is a stray
LATE_GRACE = 10.0  # after a mismatch, how long we keep looking to tell "late" from "wrong"
MAX_PODS = 5
FAULTS = ("410+500s", "pause-20s", "drop-watches", "slow-api", "410")
STAMP = "2026-11-01T00:00:00Z"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the world


@dataclass
class Pod:
    """A local endpoint (ip = pod IP) or a per-pod mirror (ip = its ClusterIP)."""

    ip: str
    ready: bool = True


@dataclass
class Remote:
    """What one linked cluster contributes to a global service, as Linkerd mirrors it."""

    mode: str  # "pods" (headless mirroring), "gateway" (ClusterIP mirror), "discovery"
    pods: dict[str, Pod] = field(default_factory=dict)  # mode "pods": hostname -> mirror
    ip: str | None = None  # modes gateway/discovery: the mirror's ClusterIP; None = deleted
    ready: bool = True  # mode gateway: the remote service has ready endpoints


@dataclass
class GService:
    ns: str
    name: str
    ports: tuple[tuple[str, int], ...]
    headless: bool
    local_pods: dict[str, Pod] | None = None  # headless, exported locally
    local_ip: str | None = None  # ClusterIP, exported locally
    local_ready: bool = True  # the local ClusterIP Service's slice has a ready endpoint
    remote: dict[str, Remote] = field(default_factory=dict)
    federated: list[str] | None = None  # <name>-federated ClusterIPs; None = absent


@dataclass
class World:
    """Everything the soak has put in the fake API server, in Linkerd's terms."""

    services: dict[tuple[str, str], GService]
    links: dict[str, str | None]  # cluster -> probeSpec.path of its Link; None = no Link
    probe_ip: dict[str, str]
    probe_port: dict[str, int]

    def probe_url(self, cluster: str) -> str | None:
        path = self.links.get(cluster)
        if path is None:
            return None
        return f"http://{self.probe_ip[cluster]}:{self.probe_port[cluster]}{path}"


class Ips:
    """Never-reused addresses, so a stale answer can never look like a fresh one."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.n = prefix, 0

    def next(self) -> str:
        self.n += 1
        return f"{self.prefix}.{self.n // 250 % 250}.{self.n % 250 + 1}"


def build_world(probe_ip: dict[str, str], probe_port: dict[str, int]) -> tuple[World, Ips, Ips]:
    """The starting topology: StatefulSets across clusters, a ClusterIP service with gateway
    and remote-discovery mirrors, a federated-only service, a service with no local part."""
    pod_ips, svc_ips = Ips("10.42"), Ips("10.43")

    def pods(prefix: str, n: int, ips: Ips) -> dict[str, Pod]:
        return {f"{prefix}-{i}": Pod(ips.next()) for i in range(n)}

    def remote_pods(name: str, n: int) -> Remote:
        return Remote("pods", pods=pods(name, n, svc_ips))

    services = [
        GService("db", "cockroachdb", (("grpc", 26257), ("http", 8080)), True,
                 local_pods=pods("cockroachdb", 3, pod_ips),
                 remote={c: remote_pods("cockroachdb", 3) for c in CLUSTERS}),
        GService("db", "cassandra", (("cql", 9042),), True,
                 local_pods=pods("cassandra", 2, pod_ips),
                 remote={"west": remote_pods("cassandra", 2), "north": remote_pods("cassandra", 2),
                         "south": Remote("gateway", ip=svc_ips.next())}),
        GService("db", "etcd", (("client", 2379), ("peer", 2380)), True,
                 local_pods=pods("etcd", 3, pod_ips),
                 remote={"west": remote_pods("etcd", 3), "north": remote_pods("etcd", 2)}),
        GService("db", "kafka", (("broker", 9092),), True,
                 remote={"north": remote_pods("kafka", 3),
                         "south": Remote("gateway", ip=svc_ips.next())}),
        GService("web", "web", (("http", 80),), False, local_ip=svc_ips.next(),
                 remote={"west": Remote("gateway", ip=svc_ips.next()),
                         "north": Remote("gateway", ip=svc_ips.next()),
                         "south": Remote("discovery", ip=svc_ips.next())}),
        GService("web", "payments", (("https", 8443),), False,
                 federated=["10.44.0.1", "fd00:44::1"]),
    ]
    world = World({(s.ns, s.name): s for s in services}, {c: "/ready" for c in CLUSTERS},
                  dict(probe_ip), dict(probe_port))
    return world, pod_ips, svc_ips


# --------------------------------------------------------------------------- rendering

Key = tuple[str, str, str]  # (kind, namespace, name)


def _slice(ns: str, service: str, labels: dict[str, str], endpoints: list[dict[str, Any]],
           ports: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """A slice with a generated name that stays the same across renders (a hash of its
    Service's name), so a re-render replaces the slice instead of adding one."""
    name = f"{service}-{hashlib.sha1(service.encode()).hexdigest()[:5]}"
    return objects.endpoint_slice(ns, name, service, endpoints, ports, labels=labels,
                                  generated=True, created=STAMP)


def render(world: World) -> dict[Key, dict[str, Any]]:
    """The Kubernetes objects of ``world``, as Linkerd and Kubernetes would leave them in the
    local cluster (shapes from examples/demo-east.yaml)."""
    out: dict[Key, dict[str, Any]] = {}
    service = functools.partial(objects.service, filled_in=True, created=STAMP)
    endpoint = functools.partial(objects.endpoint, filled_in=True)

    def put(obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        out[(obj["kind"], m["namespace"], m["name"])] = obj

    for c in CLUSTERS:
        labels = {CLUSTER: c, "mirror.linkerd.io/mirrored-gateway": "true"}
        name = f"probe-gateway-{c}"
        put(service(LINK_NS, name, [world.probe_ip[c]], [("mc-probe", world.probe_port[c])],
                    labels))
        put(_slice(LINK_NS, name, {**MIRRORING_CONTROLLER, **labels},
                   [endpoint(GATEWAY_ADDR[c], True)], [("mc-probe", 4191)]))
        path = world.links[c]
        if path is not None:
            put(objects.link(
                c, GATEWAY_ADDR[c], probe={"path": path, "port": str(world.probe_port[c]),
                                           "period": "3s", "timeout": "30s",
                                           "failureThreshold": "3"},
                credentials=f"cluster-credentials-{c}",
                selector={"matchLabels": {EXPORTED: "true"}},
                extra_spec={"targetClusterDomain": "cluster.local", "gatewayPort": "4143"},
                labels={"multicluster.linkerd.io/cluster-name": c}, created=STAMP))
    for s in world.services.values():
        ns, app = s.ns, {"app": s.name}
        fq = f"{s.name}.{ns}.svc.cluster.local"
        if s.local_pods is not None:
            put(service(ns, s.name, None, s.ports, {**app, EXPORTED: "true"}))
            eps = [endpoint(p.ip, p.ready, host, pod=host, namespace=ns)
                   for host, p in sorted(s.local_pods.items())]
            put(_slice(ns, s.name, {**SLICE_CONTROLLER, **app}, eps, s.ports))
        if s.local_ip is not None:
            put(service(ns, s.name, [s.local_ip], s.ports, {**app, EXPORTED: "true"}))
            put(_slice(ns, s.name, {**SLICE_CONTROLLER, **app},
                       [endpoint("10.42.250.1", s.local_ready, pod=f"{s.name}-abcde",
                                 namespace=ns)], s.ports))
        for c, r in s.remote.items():
            mirror = mirror_labels(c, app)
            root = f"{s.name}-{c}"
            ann = {FQ: fq}
            if r.mode == "pods":
                put(service(ns, root, None, s.ports, mirror, ann))
                put(_slice(ns, root, {**MIRRORING_CONTROLLER, **mirror},
                           [endpoint(p.ip, True, host) for host, p in sorted(r.pods.items())],
                           s.ports))
                for host, p in r.pods.items():
                    labels = {**mirror, HEADLESS: root}
                    name = f"{host}-{c}"
                    put(service(ns, name, [p.ip], s.ports, labels, {FQ: f"{host}.{fq}"}))
                    put(_slice(ns, name, {**MIRRORING_CONTROLLER, **labels},
                               [endpoint(GATEWAY_ADDR[c], p.ready)], [(s.ports[0][0], 4143)]))
            elif r.ip is not None:
                if r.mode == "discovery":
                    labels = {**mirror, **remote_discovery_labels(c, s.name)}
                    put(service(ns, root, [r.ip], s.ports, labels, ann))
                else:
                    put(service(ns, root, [r.ip], s.ports, mirror, ann))
                    if r.ready:  # no ready remote endpoint: Kubernetes deletes the slice
                        put(_slice(ns, root, {**MIRRORING_CONTROLLER, **mirror},
                                   [endpoint(GATEWAY_ADDR[c], True)], [(s.ports[0][0], 4143)]))
        if s.federated is not None:
            clusters = ",".join(f"{s.name}@{c}" for c in CLUSTERS)
            put(service(ns, f"{s.name}-federated", s.federated, s.ports,
                        {MIRROR: "true", **app}, {REMOTE_DISCOVERY: clusters}))
    return out


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Member:
    cluster: str
    host: str | None  # None: a cluster-level member
    addrs: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]
    ready: bool


@dataclass(frozen=True)
class Answer:
    """What a query gets: rcode, answer rdata (text, lower case), glue (name, type, addr)."""

    rcode: str
    answer: frozenset[str]
    glue: frozenset[tuple[str, str, str]] = frozenset()

    def show(self) -> str:
        parts = [self.rcode, "{" + ", ".join(sorted(self.answer)) + "}"]
        if self.glue:
            parts.append("glue {" + ", ".join(f"{n} {t} {a}" for n, t, a in sorted(self.glue))
                         + "}")
        return " ".join(parts)


NX = Answer("NXDOMAIN", frozenset())
Question = tuple[str, str]  # (qname, qtype)


def _family(addr: str) -> str:
    return "AAAA" if ":" in addr else "A"


def _norm(addr: str) -> str:
    return str(ipaddress.ip_address(addr))


def members(world: World, s: GService, failing: set[str]) -> list[Member]:
    """SPEC §2: local members, the mirrors of linked clusters (orphans are no members), the
    federated Service; gateway-routed members are not ready while their gateway fails."""
    out: list[Member] = []
    if s.local_pods is not None:
        out += [Member(LOCAL, h, (p.ip,), s.ports, p.ready) for h, p in s.local_pods.items()]
    if s.local_ip is not None:
        out.append(Member(LOCAL, None, (s.local_ip,), s.ports, s.local_ready))
    for c, r in s.remote.items():
        if world.links.get(c) is None:
            continue  # an orphan: no Link targets its cluster
        down = c in failing
        if r.mode == "pods":
            out += [Member(c, h, (p.ip,), s.ports, p.ready and not down)
                    for h, p in r.pods.items()]
        elif r.ip is not None:  # remote-discovery members are never probed
            ready = True if r.mode == "discovery" else r.ready and not down
            out.append(Member(c, None, (r.ip,), s.ports, ready))
    if s.federated is not None:
        out.append(Member("federated", None, tuple(s.federated), s.ports, True))
    return out


def failing_clusters(world: World, gateways: dict[str, str],
                     answered: set[tuple[str, str]]) -> set[str]:
    """Clusters whose gateway dnsside must treat as failing: linked (only linked clusters are
    probed), not answering now, and answered dnsside's probe at this URL at least once."""
    out = set()
    for c in CLUSTERS:
        url = world.probe_url(c)
        if url is not None and gateways[c] != "alive" and (c, url) in answered:
            out.add(c)
    return out


def expected(world: World, gateways: dict[str, str], answered: set[tuple[str, str]],
             questions: dict[tuple[str, str], Names]) -> dict[Question, Answer]:
    """The answer SPEC §3 prescribes for every question of ``questions``."""
    failing = failing_clusters(world, gateways, answered)
    out: dict[Question, Answer] = {}
    for key, names in questions.items():
        s = world.services[key]
        base = f"{s.name}.{s.ns}.{ZONE}"
        ready = [m for m in members(world, s, failing) if m.ready]

        def target(m: Member, base: str = base) -> str:
            return f"{m.host}.{m.cluster}.{base}" if m.host else f"{m.cluster}.{base}"

        def addresses(ms: list[Member], qtype: str) -> Answer:
            if not ms:
                return NX
            return Answer("NOERROR", frozenset(_norm(a) for m in ms for a in m.addrs
                                               if _family(a) == qtype))

        def srv(ms: list[Member], port_name: str | None, proto: str = "tcp") -> Answer:
            records = [(m, port) for m in ms for pn, port in m.ports
                       if proto == "tcp" and (port_name is None or pn == port_name)]
            if not records:
                return NX
            weight = max(1, 100 // len(records))
            answer = frozenset(f"0 {weight} {port} {target(m)}" for m, port in records)
            glue = frozenset((target(m), _family(a), _norm(a)) for m, _ in records
                             for a in m.addrs)
            return Answer("NOERROR", answer, glue)

        for qtype in ("A", "AAAA"):
            out[(base, qtype)] = addresses(ready, qtype)
        out[(base, "SRV")] = srv(ready, None)
        for port_name, proto in names.srv:
            out[(f"_{port_name}._{proto}.{base}", "SRV")] = srv(ready, port_name, proto)
        for c in names.clusters:
            in_c = [m for m in ready if m.cluster == c]
            for qtype in ("A", "AAAA"):
                out[(f"{c}.{base}", qtype)] = addresses(in_c, qtype)
        for c, host in names.hosts:
            one = [m for m in ready if m.cluster == c and m.host == host]
            out[(f"{host}.{c}.{base}", "A")] = addresses(one, "A")
    return out


@dataclass
class Names:
    """Every name of one global service the soak asks about: all that ever existed, so the
    ones that must be NXDOMAIN now (deleted pods, orphans) are asked too."""

    srv: set[tuple[str, str]] = field(default_factory=set)  # (port name, proto)
    clusters: set[str] = field(default_factory=set)
    hosts: set[tuple[str, str]] = field(default_factory=set)  # (cluster, hostname)

    def learn(self, s: GService) -> None:
        self.srv |= {(pn, "tcp") for pn, _ in s.ports} | {("nope", "tcp"), (s.ports[0][0], "udp")}
        self.clusters |= {LOCAL, "federated", *CLUSTERS}
        if s.local_pods:
            self.hosts |= {(LOCAL, h) for h in s.local_pods}
        for c, r in s.remote.items():
            self.hosts |= {(c, h) for h in r.pods}


# --------------------------------------------------------------------------- DNS


def ask(host: str, port: int, qname: str, qtype: str, *, tcp: bool,
        sock: socket.socket | None = None, timeout: float = 3.0, edns: bool = False
        ) -> dns.message.Message:
    q = dns.message.make_query(qname, qtype, use_edns=0 if edns else False, payload=1232)
    if tcp:
        return dns.query.tcp(q, host, port=port, timeout=timeout, sock=sock)
    return dns.query.udp(q, host, port=port, timeout=timeout)


def parse(msg: dns.message.Message) -> Answer:
    rcode = dns.rcode.to_text(msg.rcode())
    answer = set()
    for rrset in msg.answer:
        for rd in rrset:
            text = rd.to_text().lower()
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
                text = _norm(text)
            answer.add(text)
    glue = {(rrset.name.to_text().lower(), dns.rdatatype.to_text(rrset.rdtype), _norm(rd.to_text()))
            for rrset in msg.additional
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) for rd in rrset}
    return Answer(rcode, frozenset(answer), frozenset(glue))


class TcpAsker:
    """One TCP connection for the comparisons (reopened when dnsside closes it): a whole
    SRV answer with its glue, never truncated."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.sock: socket.socket | None = None

    def __call__(self, qname: str, qtype: str) -> Answer:
        for attempt in range(3):
            if self.sock is None:
                self.sock = socket.create_connection((self.host, self.port), timeout=3)
            try:
                return parse(ask(self.host, self.port, qname, qtype, tcp=True, sock=self.sock))
            except (OSError, EOFError, dns.exception.DNSException):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


@dataclass
class QueryStats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: Counter[str] = field(default_factory=Counter)  # by transport
    rcodes: Counter[str] = field(default_factory=Counter)
    timeouts: int = 0
    other_errors: int = 0
    truncated: int = 0
    errors: list[str] = field(default_factory=list)  # the first few, with their time

    def error(self, t0: float, what: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(f"+{time.monotonic() - t0:.1f}s {what}")


class Load(threading.Thread):
    """Queries all the time, UDP or TCP, over every name the soak knows; counts SERVFAIL,
    timeouts and any other failure. Paced at ``qps`` (a rate, not a synchronisation)."""

    def __init__(self, host: str, port: int, names: Callable[[], list[Question]], qps: float,
                 tcp: bool, stats: QueryStats, seed: int, t0: float) -> None:
        super().__init__(daemon=True, name=f"load-{'tcp' if tcp else 'udp'}")
        self.host, self.port, self.names, self.qps, self.tcp = host, port, names, qps, tcp
        self.stats, self.rng, self.t0 = stats, random.Random(seed), t0
        self.stop = threading.Event()
        self.sock: socket.socket | None = None

    def run(self) -> None:
        due = time.monotonic()
        proto = "tcp" if self.tcp else "udp"
        while not self.stop.is_set():
            qname, qtype = self.rng.choice(self.names())
            try:
                if self.tcp and self.sock is None:
                    self.sock = socket.create_connection((self.host, self.port), timeout=3)
                msg = ask(self.host, self.port, qname, qtype, tcp=self.tcp, sock=self.sock,
                          edns=self.rng.random() < 0.5)
                rcode = dns.rcode.to_text(msg.rcode())
                with self.stats.lock:
                    self.stats.sent[proto] += 1
                    self.stats.rcodes[rcode] += 1
                    self.stats.truncated += bool(msg.flags & dns.flags.TC)
                    if rcode not in ("NOERROR", "NXDOMAIN"):
                        self.stats.error(self.t0, f"{proto} {qname} {qtype}: {rcode}")
            except dns.exception.Timeout:
                with self.stats.lock:
                    self.stats.sent[proto] += 1
                    self.stats.timeouts += 1
                    self.stats.error(self.t0, f"{proto} {qname} {qtype}: timeout")
                self._reset()
            except (OSError, EOFError, dns.exception.DNSException) as exc:
                if self.tcp and isinstance(exc, (EOFError, ConnectionError)):
                    self._reset()  # the server closed an idle or capped connection: reopen
                    continue
                with self.stats.lock:
                    self.stats.sent[proto] += 1
                    self.stats.other_errors += 1
                    self.stats.error(self.t0, f"{proto} {qname} {qtype}: {exc!r}")
                self._reset()
            due = max(due + 1 / self.qps, time.monotonic() - 1)
            self.stop.wait(max(0.0, due - time.monotonic()))
        self._reset()

    def _reset(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


# --------------------------------------------------------------------------- /proc


@dataclass
class Sample:
    t: float  # seconds since start
    rss_kb: int
    cpu_s: float


class Sampler(threading.Thread):
    """dnsside's VmRSS and CPU time every ``period`` seconds."""

    def __init__(self, pid: int, t0: float, period: float) -> None:
        super().__init__(daemon=True, name="sampler")
        self.pid, self.t0, self.period = pid, t0, period
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def sample(self) -> Sample | None:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        rss = int(status.split("VmRSS:")[1].split()[0])
        s = Sample(time.monotonic() - self.t0, rss, cpu)
        self.samples.append(s)
        return s

    def run(self) -> None:
        while not self.stop.wait(self.period):
            self.sample()


# --------------------------------------------------------------------------- the soak


@dataclass
class Fault:
    kind: str
    at: float  # seconds since start
    api_back: float = 0.0
    note: str = ""


@dataclass
class Comparison:
    at: float
    kind: str  # "settled", "mid-fault" (compared with the world when the API went away)
    budget_from: str  # which change set the deadline
    names: int
    ok: bool
    took: float  # seconds from the end of churn to agreement (or the deadline)
    budget: float  # seconds from the end of churn to the deadline
    late: float | None = None  # mismatch: seconds past the deadline it agreed, None = never
    diff: list[str] = field(default_factory=list)
    state: str = ""
    journal: list[str] = field(default_factory=list)  # cluster-wide changes since the last one
    explain: list[str] = field(default_factory=list)  # dnsside's /debug/explain of a few names


class Soak:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.t0 = time.monotonic()
        self.kube = ThreadedKube(tmp)
        pid = os.getpid()
        base = f"127.{50 + pid % 150}.{pid // 150 % 250}"
        self.gateways = {c: AsyncGateway(c, f"{base}.{i + 1}", PROBE_PATHS)
                         for i, c in enumerate(CLUSTERS)}
        for gw in self.gateways.values():
            gw.on_request = self._probed
            self.kube.run(gw.set_mode("alive"))
        # Probes of clusters no Link targets (SPEC: only linked clusters are probed), counted
        # once the unlink has been visible to dnsside for STRAY_GRACE seconds.
        self.unlinked_since: dict[str, float] = {}
        self.api_away = False
        self.stray_probes: Counter[str] = Counter()
        self.world, self.pod_ips, self.svc_ips = build_world(
            {c: g.host for c, g in self.gateways.items()},
            {c: g.port for c, g in self.gateways.items()})
        self.objects: dict[Key, dict[str, Any]] = {}
        self.names: dict[tuple[str, str], Names] = {k: Names() for k in self.world.services}
        self.questions: list[Question] = []
        self.writes = 0
        self.churn_time = 0.0  # seconds spent churning (comparisons excluded)
        self.ops: Counter[str] = Counter()
        self.faults: list[Fault] = []
        self.comparisons: list[Comparison] = []
        self.paused_world: World | None = None
        self.api_back = 0.0  # time.monotonic() the API was last whole again
        self.last_object = 0.0  # time.monotonic() of the last object write
        self.last_gateway = 0.0  # ... of the last change that moves a gateway's verdict
        self.hidden_link_change = False  # a Link changed while the API was away
        self.stats = QueryStats()
        # (seconds since start, what): Link, probe path and gateway changes, for the diagnosis
        # of a mismatch (those are what decide whether a whole cluster is served).
        self.journal: list[tuple[float, str]] = []
        self.push()

    def _probed(self, cluster: str) -> None:
        """A gateway got a request (on the fake's loop thread): a stray probe when its cluster
        has been unlinked, visibly to dnsside, for a while."""
        since = self.unlinked_since.get(cluster)
        if since is None or self.api_away:
            return
        if time.monotonic() - max(since, self.api_back) > STRAY_GRACE:
            self.stray_probes[cluster] += 1
            what = (f"{cluster}: probed although unlinked for {time.monotonic() - since:.1f}s "
                    f"(API whole for {time.monotonic() - self.api_back:.1f}s)")
            self.note(what)
            log(f"STRAY PROBE {what}")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ writing the world

    def push(self) -> int:
        """Render the world and write the difference to the fake API server; returns the
        number of object writes."""
        new = render(self.world)
        old = self.objects
        changed = [o for k, o in new.items() if old.get(k) != o]
        gone = [k for k in old if k not in new]

        def write() -> None:
            for obj in changed:
                self.kube.kube.apply(obj)
            for kind, ns, name in gone:
                self.kube.kube.delete(kind, ns, name)

        if changed or gone:
            self.kube.call(write)
            self.last_object = time.monotonic()
        self.objects = new
        for key, s in self.world.services.items():
            self.names[key].learn(s)
        self.questions = self._questions()
        n = len(changed) + len(gone)
        self.writes += n
        return n

    def _questions(self) -> list[Question]:
        qs: list[Question] = []
        for (qname, qtype) in expected(self.world, self.gateway_modes(), set(), self.names):
            qs.append((qname, qtype))
        return qs

    def gateway_modes(self) -> dict[str, str]:
        return {c: g.mode for c, g in self.gateways.items()}

    def answered(self) -> set[tuple[str, str]]:
        """The oracle: (cluster, URL) pairs our gateways served dnsside a 200 on."""
        def read() -> set[tuple[str, str]]:
            return {(c, f"http://{g.host}:{g.port}{p}") for c, g in self.gateways.items()
                    for p in g.answered}
        result: set[tuple[str, str]] = self.kube.call(read)
        return result

    # ------------------------------------------------------------------ churn

    def churn_once(self) -> int:
        """One random change, as Linkerd, Kubernetes or an operator would make it."""
        rng, w = self.rng, self.world
        op = rng.choices(
            ["local_scale", "local_ready", "local_ip", "remote_scale", "remote_ready",
             "remote_ip", "mirror_delete", "link", "gateway", "probe_path", "federated"],
            weights=[10, 12, 8, 12, 14, 8, 5, 2.5, 2.5, 0.4, 0.6])[0]
        svc = rng.choice(list(w.services.values()))
        if op == "link":
            c = rng.choice(CLUSTERS)
            if w.links[c] is None:
                w.links[c] = rng.choice(PROBE_PATHS) if rng.random() < 0.2 else "/ready"
                op = "relink"
                self.unlinked_since.pop(c, None)
                self.note(f"{c}: Link re-created, probe path {w.links[c]}")
            elif rng.random() < 0.5:
                w.links[c] = None
                op = "unlink"
                self.unlinked_since[c] = time.monotonic()
                self.note(f"{c}: Link deleted (mirrors left behind)")
            self.link_changed()
        elif op == "gateway":
            c = rng.choice(CLUSTERS)
            mode = rng.choice(["alive", "alive", "dead", "hung"])
            if self.gateways[c].mode != mode:
                self.note(f"{c}: gateway {self.gateways[c].mode} -> {mode}")
            self.kube.run(self.gateways[c].set_mode(mode))
            self.last_gateway = time.monotonic()
            op = f"gateway_{mode}"
        elif op == "probe_path":
            c = rng.choice(CLUSTERS)
            if w.links[c] is not None:
                w.links[c] = PROBE_PATHS[1 - PROBE_PATHS.index(w.links[c])]
                self.note(f"{c}: Link's probe path -> {w.links[c]}")
                self.link_changed()
        elif op == "federated":
            fed = w.services[("web", "payments")]
            if fed.federated is None:
                fed.federated = [self.svc_ips.next(), f"fd00:44::{rng.randint(2, 9999):x}"]
            elif rng.random() < 0.5:
                fed.federated = None
            else:
                fed.federated = [self.svc_ips.next(), fed.federated[1]]
        elif op.startswith("local"):
            if svc.local_pods is None:
                if svc.local_ip is not None:  # the local ClusterIP service's endpoints
                    svc.local_ready = not svc.local_ready if op == "local_ready" else True
            elif op == "local_scale":
                self._scale(svc.local_pods, svc.name, self.pod_ips)
            elif svc.local_pods:
                host = rng.choice(sorted(svc.local_pods))
                if op == "local_ready":
                    svc.local_pods[host].ready = not svc.local_pods[host].ready
                else:
                    svc.local_pods[host].ip = self.pod_ips.next()
        elif svc.remote:
            c = rng.choice(sorted(svc.remote))
            r = svc.remote[c]
            if r.mode == "pods":
                if op in ("remote_scale", "mirror_delete") or not r.pods:
                    self._scale(r.pods, svc.name, self.svc_ips,
                                shrink=op == "mirror_delete" or None)
                else:
                    host = rng.choice(sorted(r.pods))
                    if op == "remote_ready":
                        r.pods[host].ready = not r.pods[host].ready
                    else:  # Linkerd re-creates a per-pod mirror with a new ClusterIP
                        r.pods[host].ip = self.svc_ips.next()
            elif op == "mirror_delete" or r.ip is None:
                r.ip = None if r.ip is not None else self.svc_ips.next()
            elif op == "remote_ready" and r.mode == "gateway":
                r.ready = not r.ready
            else:
                r.ip = self.svc_ips.next()
        self.ops[op] += 1
        n = self.push()
        return n + op.startswith("gateway")

    def link_changed(self) -> None:
        """A Link came, went or changed its probe path: what is probed changes once dnsside
        reads it. With the API up that is at once; while it is away, up to SETTLE_API after
        it is back, and the probe's verdict takes SETTLE_GATEWAY more."""
        self.last_gateway = time.monotonic()
        if self.api_away:
            self.hidden_link_change = True

    def note(self, what: str) -> None:
        self.journal.append((self.elapsed(), what))

    def _scale(self, pods: dict[str, Pod], prefix: str, ips: Ips,
               shrink: bool | None = None) -> None:
        """Add the next ordinal or remove the last, as a StatefulSet scales."""
        if shrink is None:
            shrink = len(pods) >= MAX_PODS or (bool(pods) and self.rng.random() < 0.5)
        if shrink and pods:
            del pods[max(pods, key=lambda h: int(h.rsplit("-", 1)[1]))]
        elif not shrink:
            used = {int(h.rsplit("-", 1)[1]) for h in pods}
            i = next(i for i in range(MAX_PODS + 1) if i not in used)
            pods[f"{prefix}-{i}"] = Pod(ips.next())

    def churn(self, seconds: float, during: Callable[[float], None] | None = None) -> None:
        """Churn at --rate object writes a second for ``seconds``; ``during(t)`` runs between
        changes (fault timers)."""
        start = time.monotonic()
        end = start + seconds
        due = start
        while time.monotonic() < end:
            n = self.churn_once()
            if during is not None:
                during(time.monotonic())
            due = max(due + n / self.args.rate, time.monotonic() - 1)
            time.sleep(max(0.0, min(due, end) - time.monotonic()))
        self.churn_time += time.monotonic() - start

    # ------------------------------------------------------------------ faults

    def fault(self, kind: str) -> Fault:
        """Start an API fault; returns it (api_back filled in for the instant ones)."""
        f = Fault(kind, self.elapsed())
        k = self.kube
        self.api_away = kind not in ("drop-watches", "410")

        def expire(fail: int) -> None:
            # A write dnsside's watches have not seen, then compaction: every resume point
            # is too old, so every re-watch gets 410 Expired and must relist.
            k.kube.apply({"kind": "ConfigMap", "metadata": {"name": "soak-bump",
                                                            "namespace": "default"},
                          "data": {"t": str(time.time())}})
            k.kube.compact()
            k.kube.drop_streams()
            # Then the lists fail (and only those: every re-watch still gets its 410), so
            # the relist that 410 forces cannot succeed until the burst is over.
            k.kube.failing_status = fail
            k.kube.failing_match = lambda request: request.query.get("watch") not in (
                "1", "true")

        if kind == "drop-watches":
            f.note = f"{k.call(k.kube.drop_streams)} streams reset"
        elif kind == "410":
            k.call(expire, 0)
        elif kind == "410+500s":
            self.paused_world = copy.deepcopy(self.world)
            k.call(expire, 500)
            f.note = (f"history compacted, streams reset (410 on every re-watch), every list "
                      f"500 for {self.args.burst_for:g} s")
        elif kind == "slow-api":
            k.call(setattr, k.kube, "latency", self.args.slow_latency)
            k.call(k.kube.drop_streams)
            f.note = f"{self.args.slow_latency:g} s per request for {self.args.slow_for:g} s"
        elif kind == "pause-20s":
            self.paused_world = copy.deepcopy(self.world)
            k.run(k.kube.set_unreachable(True))
            f.note = f"API unreachable for {self.args.pause_for:g} s"
        self.faults.append(f)
        log(f"fault {kind} at +{f.at:.1f}s {f.note}")
        return f

    def end_fault(self, f: Fault) -> None:
        """Wait for the fault to be over (bounded) and note when the API was whole again."""
        k = self.kube
        if f.kind == "slow-api":
            k.call(setattr, k.kube, "latency", 0.0)
            back = time.monotonic() + self.args.slow_latency  # requests already waiting
        elif f.kind == "pause-20s":
            k.run(k.kube.set_unreachable(False))
            self.paused_world = None
            back = time.monotonic()
        elif f.kind == "410+500s":
            k.call(setattr, k.kube, "failing_status", 0)
            k.call(setattr, k.kube, "failing_match", None)
            self.paused_world = None
            back = time.monotonic()
        else:
            back = time.monotonic()
        self.api_back = back
        self.api_away = False
        f.api_back = back - self.t0

    # ------------------------------------------------------------------ comparisons

    def compare(self, kind: str, world: World, asker: TcpAsker) -> Comparison:
        """Stop-the-world comparison: poll every name until all agree with the model or the
        settle deadline passes; a disagreement at the deadline is a mismatch. Agreement is
        one whole pass over every name with no difference, begun before the deadline (a pass
        takes 0.1-0.3 s); the model is recomputed for each pass, since gateways' answered
        history may still grow while we look."""
        stop = time.monotonic()
        terms = {"object": self.last_object + SETTLE_API,
                 "gateway": self.last_gateway + SETTLE_GATEWAY,
                 "api back": self.api_back + SETTLE_API, "now": stop}
        if kind == "settled" and self.hidden_link_change:
            terms["link while away"] = self.api_back + SETTLE_API + SETTLE_GATEWAY
            self.hidden_link_change = False
        why, deadline = max(terms.items(), key=lambda kv: kv[1])
        first_diff: list[str] = []
        passes = 0
        while True:
            want = expected(world, self.gateway_modes(), self.answered(), self.names)
            diff = []
            for (qname, qtype), answer in sorted(want.items()):
                got = asker(qname, qtype)
                if got != answer:
                    diff.append(f"{qname} {qtype}: want {answer.show()}; got {got.show()}")
            passes += 1
            now = time.monotonic()
            if not diff:
                c = Comparison(stop - self.t0, kind, why, len(want), True, now - stop,
                               deadline - stop)
                break
            if now >= deadline:
                first_diff = diff
                since = self.comparisons[-1].at if self.comparisons else 0.0
                journal = [f"+{t:.1f}s {what}" for t, what in self.journal if t >= since]
                explain = [self.explain(*d.split(":", 1)[0].split()) for d in diff[:2]]
                late = self._late(world, asker, deadline)
                c = Comparison(stop - self.t0, kind, why, len(want), False, now - stop,
                               deadline - stop, late, first_diff[:40], self.describe(world),
                               journal, explain)
                break
            time.sleep(0.05)
        self.comparisons.append(c)
        status = "ok" if c.ok else (f"MISMATCH ({len(first_diff)} names; "
                                    + (f"agreed {c.late:.1f}s late)" if c.late is not None
                                       else "still wrong)"))
        log(f"compare {kind} at +{c.at:.1f}s: {c.names} names, {status}, {c.took:.2f}s "
            f"(budget {c.budget:.2f}s from {why}, {passes} passes)")
        for line in c.diff[:12]:
            log(f"  {line}")
        if not c.ok:
            log(f"  state: {c.state}")
            for line in c.journal:
                log(f"  journal {line}")
            for line in c.explain:
                log(f"  explain {line}")
        return c

    def explain(self, qname: str, qtype: str) -> str:
        """dnsside's own account of a name (`/debug/explain`), one line, for a mismatch."""
        try:
            code, body = self.srv.http(f"/debug/explain?name={qname}&type={qtype}")
        except OSError as exc:
            return f"{qname} {qtype}: {exc!r}"
        with contextlib.suppress(ValueError):
            body = json.dumps(json.loads(body), separators=(",", ":"))
        return f"{qname} {qtype} (HTTP {code}): {body[:3000]}"

    def _late(self, world: World, asker: TcpAsker, deadline: float) -> float | None:
        """After a mismatch: when (past the deadline) did dnsside agree, if at all?"""
        end = deadline + LATE_GRACE
        while time.monotonic() < end:
            want = expected(world, self.gateway_modes(), self.answered(), self.names)
            if all(asker(q, t) == a for (q, t), a in want.items()):
                return time.monotonic() - deadline
            time.sleep(0.2)
        return None

    def describe(self, world: World) -> str:
        """The facts the model used, for a mismatch's log entry."""
        answered = self.answered()
        parts = []
        for c in CLUSTERS:
            url = world.probe_url(c)
            paths = sorted("/" + u.rsplit("/", 1)[1] for cc, u in answered if cc == c)
            parts.append(f"{c}: link {'none' if url is None else world.links[c]}, gateway "
                         f"{self.gateways[c].mode}, answered on {paths}")
        return "; ".join(parts)

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        args = self.args
        flags = ["--kubeconfig", self.kube.kubeconfig, "--cluster-name", LOCAL,
                 "--gateway-probe", "on", "--gateway-probe-period", "0.5",
                 "--kube-backoff-cap", str(args.backoff_cap), "--lameduck", str(args.lameduck),
                 "--log-level", "info"]
        started = time.monotonic()
        srv = Dnsside(*flags, wait_synced=False)
        self.srv = srv
        srv.wait_log("initial sync done", timeout=60)
        sync_s = time.monotonic() - started
        log(f"dnsside pid {srv.proc.pid} synced in {sync_s:.2f}s, dns {srv.host}:{srv.port}")
        sampler = Sampler(srv.proc.pid, self.t0, args.sample_every)
        sampler.sample()
        sampler.start()
        # Every gateway has answered dnsside once before the churn may kill one: from then
        # on the model's "answered" oracle is the only timing-dependent input.
        wait_for(lambda: all(g.answered for g in self.gateways.values()), 15,
                 "every gateway to be probed once")
        loads = [Load(srv.host, srv.port, lambda: self.questions, args.qps * share, tcp,
                      self.stats, args.seed + i, self.t0)
                 for i, (tcp, share) in enumerate(((False, 0.75), (True, 0.25)))]
        for load in loads:
            load.start()
        asker = TcpAsker(srv.host, srv.port)
        self.compare("settled", self.world, asker)

        end = self.t0 + args.minutes * 60
        rnd = 0
        churn_s = max(3.0, args.round - SETTLE_GATEWAY)
        writes_at_start = self.writes
        while time.monotonic() < end:
            rnd += 1
            kind = FAULTS[(rnd // 2 - 1) % len(FAULTS)] if rnd % 2 == 0 and args.faults else None
            if kind is None or kind in ("drop-watches", "410"):
                if kind is not None:
                    self.end_fault(self.fault(kind))
                self.churn(churn_s)
            elif kind == "slow-api":
                f = self.fault(kind)
                over = time.monotonic() + args.slow_for

                def slow_over(now: float, f: Fault = f, over: float = over) -> None:
                    if now >= over and not f.api_back:
                        self.end_fault(f)

                self.churn(churn_s, slow_over)
                if not f.api_back:
                    self.end_fault(f)
            else:  # the API is away: dnsside can read nothing until it is back
                f = self.fault(kind)
                paused = self.paused_world
                assert paused is not None
                away = args.pause_for if kind == "pause-20s" else args.burst_for
                self.churn(max(1.0, away / 2 - SETTLE_GATEWAY))
                # Mid-fault: the objects as they were when the API went away, the gateways
                # as they are now (the probe does not need the API).
                self.compare("mid-fault", paused, asker)
                self.churn(max(1.0, f.at + away - self.elapsed()))
                self.end_fault(f)
            upcoming = FAULTS[(rnd // 2) % len(FAULTS)] if rnd % 2 and args.faults else None
            if upcoming == "410+500s" and all(self.world.links.values()):
                # The Link fault is only a test with an orphan around: make one (Linkerd's
                # unlink leaves the mirrors), settled before the fault like any change.
                c = self.rng.choice(CLUSTERS)
                self.world.links[c] = None
                self.unlinked_since[c] = time.monotonic()
                self.note(f"{c}: Link deleted (mirrors left behind), before the Link fault")
                self.ops["unlink"] += 1
                self.push()
                self.link_changed()
            self.compare("settled", self.world, asker)
        changes = self.writes - writes_at_start
        rate = changes / self.churn_time if self.churn_time else 0.0
        log(f"churn: {changes} object writes in {self.churn_time:.0f}s of churn ({rate:.1f}/s)")

        for load in loads:
            load.stop.set()
        for load in loads:
            load.join(10)
        asker.close()
        lameduck = self.lameduck(srv)
        sampler.stop.set()
        sampler.join(5)
        self.kube.close()
        return self.summary(srv, sampler.samples, sync_s, changes, rate, lameduck)

    def lameduck(self, srv: Dnsside) -> dict[str, Any]:
        """SIGTERM: until the lame-duck period ends, queries (UDP and new TCP connections)
        must be answered as before and /readyz must say 503; then a clean exit."""
        # The world is still now; what dnsside answers just before SIGTERM is what it must
        # keep answering (correctness was the comparisons' business).
        model = expected(self.world, self.gateway_modes(), self.answered(), self.names)
        asker = TcpAsker(srv.host, srv.port)
        want = {q: asker(*q) for q, a in sorted(model.items()) if a.rcode == "NOERROR"
                and a.answer}
        asker.close()
        probes = list(want)[:20]
        sent = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        # /readyz turns 503 as soon as the signal is handled (poll with a deadline), and
        # stays 503 until the end.
        try:
            turned: float | None = wait_for(
                lambda: srv.http("/readyz")[0] == 503 and time.monotonic(), 1.0,
                "/readyz 503 after SIGTERM") - sent
        except AssertionError:
            turned = None
        ready_codes: Counter[int] = Counter()
        answered = failed = 0
        failures: list[str] = []
        i = 0
        while time.monotonic() < sent + self.args.lameduck - 1.0:
            code, _ = srv.http("/readyz")
            ready_codes[code] += 1
            qname, qtype = probes[i % len(probes)]
            for tcp in (False, True):
                try:
                    msg = ask(srv.host, srv.port, qname, qtype, tcp=tcp, timeout=2, edns=True)
                    got, before = parse(msg), want[(qname, qtype)]
                    if msg.flags & dns.flags.TC:  # too big for UDP: as many records as fit
                        ok = got.rcode == before.rcode and got.answer <= before.answer
                    else:
                        ok = got == before
                except (OSError, EOFError, dns.exception.DNSException) as exc:
                    ok, got = False, Answer(repr(exc), frozenset())
                answered += ok
                failed += not ok
                if not ok and len(failures) < 10:
                    failures.append(f"{'tcp' if tcp else 'udp'} {qname} {qtype}: "
                                    f"{got.show()}")
            i += 1
            time.sleep(0.1)
        try:
            rc: int | None = srv.proc.wait(self.args.lameduck + 10)
        except Exception:
            rc = None
        took = time.monotonic() - sent
        ok = (turned is not None and failed == 0 and answered > 0 and set(ready_codes) == {503}
              and rc == 0 and took >= self.args.lameduck - 0.5)
        result = {"ok": ok, "answered": answered, "failed": failed, "failures": failures,
                  "readyz_503_after_s": None if turned is None else round(turned, 2),
                  "readyz": dict(ready_codes), "exit_code": rc, "exit_after_s": round(took, 2)}
        log(f"lame duck: {result}")
        return result

    def summary(self, srv: Dnsside, samples: list[Sample], sync_s: float, changes: int,
                rate: float, lameduck: dict[str, Any]) -> dict[str, Any]:
        lines = srv.lines
        tracebacks = [i for i, x in enumerate(lines) if x.startswith("Traceback")]
        errors = [x for x in lines if " ERROR " in x or " CRITICAL " in x
                  or '"level": "ERROR"' in x]
        # Warnings are expected (gateways failing, watches restarting): counted by logger and
        # first words, so an unexpected kind stands out in the report.
        warnings = Counter(" ".join(x.split(" WARNING ", 1)[1].split()[:6])
                           for x in lines if " WARNING " in x)
        tb_text = ["\n".join(lines[i:i + 30]) for i in tracebacks[:5]]
        st = self.stats
        mism = [c for c in self.comparisons if not c.ok]
        rss = [s.rss_kb / 1024 for s in samples]
        half = samples[len(samples) // 2] if samples else None
        last = samples[-1] if samples else None
        growth = ((last.rss_kb - half.rss_kb) / half.rss_kb * 100
                  if half and last and half.rss_kb else 0.0)
        second_half = [s for s in samples if half and s.t >= half.t]
        slope = 0.0
        if len(second_half) >= 3:
            ts = [s.t / 60 for s in second_half]
            ys = [s.rss_kb / 1024 for s in second_half]
            slope = statistics.linear_regression(ts, ys).slope
        cpu = (samples[-1].cpu_s - samples[0].cpu_s) if len(samples) >= 2 else 0.0
        wall = (samples[-1].t - samples[0].t) if len(samples) >= 2 else 0.0
        servfail = st.rcodes.get("SERVFAIL", 0)
        ok = (not mism and servfail == 0 and st.timeouts == 0 and st.other_errors == 0
              and not tracebacks and lameduck["ok"] and len(self.comparisons) > 1
              and not self.stray_probes
              and (self.args.max_rss_growth is None or growth <= self.args.max_rss_growth))
        return {
            "ok": ok,
            "seed": self.args.seed,
            "minutes": self.args.minutes,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "git": _git_head(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load "
                       f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            "sync_s": round(sync_s, 2),
            "comparisons": len(self.comparisons),
            "comparisons_mid_fault": sum(c.kind == "mid-fault" for c in self.comparisons),
            "names_compared": sum(c.names for c in self.comparisons),
            "mismatches": len(mism),
            "settle_max_s": round(max((c.took for c in self.comparisons if c.ok), default=0), 2),
            "mismatch_details": [dataclasses.asdict(c) for c in mism],
            "comparison_list": [{"at": round(c.at, 1), "kind": c.kind, "ok": c.ok,
                                 "took": round(c.took, 2), "budget": round(c.budget, 2),
                                 "budget_from": c.budget_from, "names": c.names}
                                for c in self.comparisons],
            "changes": changes,
            "changes_per_s": round(rate, 1),
            "ops": dict(self.ops),
            "queries": dict(st.sent),
            "queries_total": sum(st.sent.values()),
            "rcodes": dict(st.rcodes),
            "servfail": servfail,
            "timeouts": st.timeouts,
            "other_query_errors": st.other_errors,
            "truncated_udp": st.truncated,
            "query_error_samples": st.errors,
            "faults": [dataclasses.asdict(f) for f in self.faults],
            "rss_mb": {"start": round(rss[0], 1) if rss else None,
                       "peak": round(max(rss), 1) if rss else None,
                       "end": round(rss[-1], 1) if rss else None,
                       "half": round(half.rss_kb / 1024, 1) if half else None,
                       "growth_last_half_pct": round(growth, 2),
                       "slope_last_half_mb_per_min": round(slope, 3)},
            "cpu_s": round(cpu, 1),
            "cpu_pct_of_one_core": round(cpu / wall * 100, 1) if wall else 0.0,
            "rss_samples": [(round(s.t, 1), s.rss_kb) for s in samples],
            "tracebacks": len(tracebacks),
            "traceback_text": tb_text,
            "error_lines": len(errors),
            "error_line_samples": errors[:20],
            "warnings": dict(warnings.most_common(25)),
            "log_lines": len(lines),
            "lameduck": lameduck,
            "gateway_200s": {c: g.served for c, g in self.gateways.items()},
            "stray_probes": dict(self.stray_probes),
            "journal": [f"+{t:.2f}s {what}" for t, what in self.journal],
        }


def _git_head() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
                             capture_output=True, text=True, timeout=10)
    except OSError:
        return "?"
    return out.stdout.strip() or "?"


# --------------------------------------------------------------------------- report


def report(s: dict[str, Any], cmd: str) -> str:
    """bench/SOAK_RESULTS.md from a summary."""
    rss = s["rss_mb"]
    verdict = "**PASS**" if s["ok"] else "**FAIL**"
    lines = [
        "# Soak results (`bench/soak.py`)",
        "",
        f"{verdict}: {s['minutes']:g} minutes, seed {s['seed']}, finished {s['finished']}, "
        f"code `{s['git']}`; {s['machine']}.",
        "",
        f"    {cmd}",
        "",
        "| what | result |",
        "|---|---|",
        f"| comparisons of every name with the model | {s['comparisons']} "
        f"({s['comparisons_mid_fault']} while the API was away), {s['names_compared']:,} answers |",
        f"| mismatches at the settle deadline | {s['mismatches']} |",
        f"| slowest agreement after churn stopped | {s['settle_max_s']} s |",
        f"| object changes | {s['changes']:,} ({s['changes_per_s']}/s while churning) |",
        f"| queries (after the first sync) | {s['queries_total']:,} ({s['queries']}) |",
        f"| SERVFAIL / timeouts / other errors | {s['servfail']} / {s['timeouts']} / "
        f"{s['other_query_errors']} |",
        f"| rcodes | {s['rcodes']} |",
        f"| RSS start / peak / end | {rss['start']} / {rss['peak']} / {rss['end']} MB |",
        f"| RSS growth over the last half | {rss['growth_last_half_pct']} % "
        f"({rss['half']} → {rss['end']} MB; slope {rss['slope_last_half_mb_per_min']} MB/min) |",
        f"| CPU | {s['cpu_s']} s ({s['cpu_pct_of_one_core']} % of one core) |",
        f"| tracebacks / ERROR lines in dnsside's log | {s['tracebacks']} / {s['error_lines']} |",
        f"| lame duck (SIGTERM) | {'ok' if s['lameduck']['ok'] else 'FAILED'}: "
        f"{s['lameduck']['answered']} answered, {s['lameduck']['failed']} failed, /readyz "
        f"{s['lameduck']['readyz']}, exit {s['lameduck']['exit_code']} after "
        f"{s['lameduck']['exit_after_s']} s |",
        f"| probes of unlinked clusters | {sum(s['stray_probes'].values())} |",
        f"| initial sync | {s['sync_s']} s |",
        "",
        "## Faults injected",
        "",
        "| at | fault | API whole again at | detail |",
        "|---|---|---|---|",
    ]
    for f in s["faults"]:
        lines.append(f"| +{f['at']:.1f} s | {f['kind']} | +{f['api_back']:.1f} s | {f['note']} |")
    if s["warnings"]:
        lines += ["", "## dnsside's warnings (by first words)", "", "| warning | count |",
                  "|---|---|"]
        lines += [f"| `{k}` | {v} |" for k, v in s["warnings"].items()]
    lines += ["", "## Churn", "", "| operation | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(s["ops"].items())]
    lines += ["", "## Mismatches", ""]
    if not s["mismatch_details"]:
        lines.append("None.")
    for m in s["mismatch_details"]:
        late = (f"agreed {m['late']:.1f} s after the deadline" if m["late"] is not None
                else f"still different {LATE_GRACE:g} s after the deadline")
        lines += [f"### +{m['at']:.1f} s ({m['kind']}; budget {m['budget']:.2f} s; {late})",
                  "", f"State: {m['state']}", "", "```"]
        lines += m["diff"]
        lines += ["```", ""]
    lines += ["", "<details><summary>Every comparison</summary>", "",
              "| at | kind | names | result | agreed after | budget (from) |",
              "|---|---|---|---|---|---|"]
    lines += [f"| +{c['at']} s | {c['kind']} | {c['names']} | {'ok' if c['ok'] else 'MISMATCH'} "
              f"| {c['took']} s | {c['budget']} s ({c['budget_from']}) |"
              for c in s["comparison_list"]]
    lines += ["", "</details>"]
    if s["query_error_samples"]:
        lines += ["", "## Query errors", "", "```", *s["query_error_samples"], "```"]
    if s["traceback_text"] or s["error_line_samples"]:
        lines += ["", "## dnsside log: tracebacks and ERROR lines", "", "```",
                  *s["traceback_text"], *s["error_line_samples"], "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, help="write the JSON summary here")
    ap.add_argument("--report", type=Path, help="write the markdown report here")
    ap.add_argument("--rate", type=float, default=40.0, help="object writes a second")
    ap.add_argument("--qps", type=float, default=300.0, help="background queries a second")
    ap.add_argument("--round", type=float, default=15.0, help="seconds between comparisons")
    ap.add_argument("--no-faults", dest="faults", action="store_false")
    ap.add_argument("--pause-for", type=float, default=20.0)
    ap.add_argument("--burst-for", type=float, default=10.0,
                    help="seconds of 500s after the 410s of the 410+500s fault")
    ap.add_argument("--slow-latency", type=float, default=1.0)
    ap.add_argument("--slow-for", type=float, default=8.0)
    ap.add_argument("--backoff-cap", type=float, default=1.0)
    ap.add_argument("--lameduck", type=float, default=5.0)
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--max-rss-growth", type=float, metavar="PCT",
                    help="also fail when RSS grew more than PCT %% over the last half")
    ap.add_argument("--dnsside-log", type=Path, help="write dnsside's stderr here")
    args = ap.parse_args()
    cmd = " ".join(["python", "-m", "bench.soak", *sys.argv[1:]])
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        soak = Soak(args, Path(tmp))
        try:
            summary = soak.run()
        finally:
            if getattr(soak, "srv", None) is not None and soak.srv.proc.poll() is None:
                soak.srv.proc.kill()
    if args.dnsside_log and getattr(soak, "srv", None) is not None:
        args.dnsside_log.parent.mkdir(parents=True, exist_ok=True)
        args.dnsside_log.write_text("\n".join(soak.srv.lines) + "\n")
    text = json.dumps(summary, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.report:
        args.report.write_text(report(summary, cmd))
    short = {k: summary[k] for k in ("ok", "comparisons", "mismatches", "changes_per_s",
                                     "queries_total", "servfail", "timeouts", "tracebacks",
                                     "error_lines", "rss_mb", "cpu_s")}
    log(f"summary: {json.dumps(short)}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
