"""Resident memory of `dnsside serve` under steady object churn: does it level off?

    .venv/bin/python -m bench.churn_memory [--minutes 8] [--rate 100] [--members 3000]
                                          [--trace] [--env MALLOC_ARENA_MAX=2] [--label NAME]

Loads `bench/topology.py`'s topology into the fake API server of tests/ (in this
process, on its own thread), plus a pool of per-pod mirrors and local services
that will be churned, then starts `dnsside serve --kubeconfig … --cluster-name
east --gateway-probe off` as a subprocess, so only dnsside's own memory is
measured (the fake's event history and stored versions live here). It then
changes objects at ``--rate`` changes a second, the number of live objects
staying the same:

* turnover: the oldest churn per-pod mirror (Service and slice) is deleted and a
  new one with a fresh pod name is created (a new DNS name, a new hostname);
* a per-pod mirror slice's readiness flipped; a per-pod mirror's ClusterIP changed;
* a local exported Service and its slice created under a fresh name, in a
  namespace that itself comes and goes (20 services each), the oldest deleted;
* every 30 s Link `north` deleted and re-created 3 s later;
* every 60 s a short-lived linked cluster `tmp-<n>` (a Link and 20 per-pod
  mirrors with their root) appears and the previous one goes, Link, mirrors and
  all (metric label sets of gone clusters);
* every ``--relist-every`` s the fake compacts its history and drops every watch,
  so dnsside gets 410 Expired and relists (it also bounds the fake's memory).

Every 10 s it samples dnsside's VmRSS (and, with ``--trace``, in dnsside itself:
tracemalloc's traced bytes, pymalloc's allocated blocks, glibc's mallinfo2 in-use
and free bytes, through a wrapper that starts the probe thread then runs the CLI:
nothing in dnsside changes). It prints the curve, the growth over the last half
(MB and MB/min by least squares) and writes bench/out/churn_memory-<label>.json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import gc
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from testkit import objects
from testkit.gateways import FakeGateway, point_probes
from testkit.objects import EXPORTED, FQ, HEADLESS
from testkit.serve import Dnsside

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"

SAMPLE_S = 10.0
GATEWAY = "172.18.0.4"


# --------------------------------------------------------------------------- objects


def _link(name: str) -> dict[str, Any]:
    return objects.link(name, GATEWAY, probe={"path": "/ready", "port": "4191", "period": "3s"},
                        extra_spec={"gatewayPort": "4143"})


class Churn:
    """The churn's own state: which objects exist, and how to make the next change."""

    def __init__(self, kube: Any, items: list[dict[str, Any]], seed: int, pods: int,
                 locals_: int) -> None:
        self.kube = kube
        self.rng = random.Random(seed)
        self.n = 0  # fresh-name counter
        self.changes = 0
        self.ip = 0
        # Global headless services with a root mirror: (ns, svc, cluster, app, ports).
        self.roots: list[tuple[str, str, str, str, list[tuple[str, int]]]] = []
        for o in items:
            labels = o["metadata"].get("labels") or {}
            if (o["kind"] == "Service" and labels.get("mirror.linkerd.io/mirrored-service")
                    and "mirror.linkerd.io/headless-mirror-svc-name" not in labels
                    and o["spec"]["clusterIP"] == "None"
                    and labels.get("mirror.linkerd.io/cluster-name")):
                fq = o["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"]
                self.roots.append((o["metadata"]["namespace"], fq.split(".")[0],
                                   labels["mirror.linkerd.io/cluster-name"], labels["app"],
                                   [(p["name"], p["port"]) for p in o["spec"]["ports"]]))
        self.pods: collections.deque[tuple[dict[str, Any], dict[str, Any]]] = collections.deque()
        self.locals: collections.deque[tuple[dict[str, Any], dict[str, Any]]] = (
            collections.deque())
        self.tmp: list[tuple[str, str, str]] = []  # (kind, ns, name) of the current tmp cluster
        self.tmp_n = 0
        self.initial: list[dict[str, Any]] = []
        for _ in range(pods):
            self.initial.extend(self._new_pod())
        for _ in range(locals_):
            self.initial.extend(self._new_local())
        self.changes = 0

    def next_ip(self) -> str:
        self.ip = (self.ip + 1) % (1 << 20)
        v = (10 << 24 | 200 << 16) + self.ip
        return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"

    def _pod_objects(self, root: tuple[str, str, str, str, list[tuple[str, int]]],
                     cluster: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        ns, svc, link, app, ports = root
        link = cluster or link
        self.n += 1
        pod = f"{svc}-c{self.n}"
        name = f"{pod}-{link}"
        labels = objects.mirror_labels(link, {"app": app, HEADLESS: f"{svc}-{link}"})
        service = objects.service(ns, name, [self.next_ip()], ports, labels,
                                  {FQ: f"{pod}.{svc}.{ns}.svc.cluster.local"}, filled_in=True)
        sl = objects.endpoint_slice(
            ns, f"{name}-{self.n:05x}", name,
            [objects.endpoint(GATEWAY, self.rng.random() > 0.1, filled_in=True)],
            [(ports[0][0], 4143)], labels=labels)
        return service, sl

    def _new_pod(self) -> list[dict[str, Any]]:
        pair = self._pod_objects(self.rng.choice(self.roots))
        self.pods.append(pair)
        return list(pair)

    def _new_local(self) -> list[dict[str, Any]]:
        self.n += 1
        ns = f"churn-{self.n // 20:05d}"
        name = f"app-{self.n}"
        ports = [("http", 8080), ("grpc", 9000 + self.n % 7)]
        service = objects.service(ns, name, [self.next_ip()], ports,
                                  {"app": name, EXPORTED: "true"}, filled_in=True)
        sl = objects.endpoint_slice(
            ns, f"{name}-{self.n:05x}", name,
            [objects.endpoint(self.next_ip(), True, pod=f"{name}-{i}", namespace=ns,
                              filled_in=True) for i in range(3)], ports, labels={"app": name})
        self.locals.append((service, sl))
        return [service, sl]

    # Each returns the writes to make, as (apply obj) or (delete kind, ns, name).
    def op(self) -> list[Any]:
        r = self.rng.random()
        if r < 0.25:  # turnover: a pod gone, another with a fresh name
            svc, sl = self.pods.popleft()
            return [_del(sl), _del(svc), *self._new_pod()]
        if r < 0.60:  # readiness flip
            i = self.rng.randrange(len(self.pods))
            svc, sl = self.pods[i]
            e = sl["endpoints"][0]
            e["conditions"]["ready"] = e["conditions"]["serving"] = not e["conditions"]["ready"]
            return [sl]
        if r < 0.85:  # a pod mirror's ClusterIP changed
            svc, _ = self.pods[self.rng.randrange(len(self.pods))]
            ip = self.next_ip()
            svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = ip, [ip]
            return [svc]
        svc, sl = self.locals.popleft()  # a local service gone, a new one elsewhere
        return [_del(sl), _del(svc), *self._new_local()]

    def tmp_cluster(self) -> list[Any]:
        """The previous short-lived cluster gone (Link and mirrors), a new one linked."""
        writes: list[Any] = [("delete", *k) for k in self.tmp]
        self.tmp_n += 1
        cluster = f"tmp-{self.tmp_n}"
        objs: list[dict[str, Any]] = [_link(cluster)]
        for root in self.rng.sample(self.roots, 20):
            objs.extend(self._pod_objects(root, cluster))
        self.tmp = [(o["kind"], o["metadata"].get("namespace", "linkerd-multicluster"),
                     o["metadata"]["name"]) for o in objs]
        return writes + objs

    def write(self, writes: list[Any]) -> None:
        """On the fake's loop thread."""
        for w in writes:
            if isinstance(w, tuple):
                with contextlib.suppress(KeyError):
                    self.kube.delete(w[1], w[2], w[3])
            else:
                self.kube.apply(w)
            self.changes += 1


def _del(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    return ("delete", obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])


REMOTE_DISCOVERY = "multicluster.linkerd.io/remote-discovery"


class SameNamesChurn:
    """The second mix: the changes of a real installation whose objects keep their names.

    Every change is to an object of the topology itself (nothing under a fresh name, the
    live set stays the same, give or take the few objects away for a while):

    * a local headless pod keeps its hostname and gets a new IP (the most frequent);
    * a local pod's readiness flips; a local ClusterIP service's endpoint readiness flips;
    * a per-pod mirror is deleted (its remote pod went not ready), Service and slice, and
      re-created a little later under the same names with a new ClusterIP;
    * a per-pod mirror's gateway endpoint flips readiness (Linkerd's probe of the gateway);
    * a cluster's remote-discovery mirror is deleted and re-created with a new ClusterIP;
    * a federated Service's members join and leave (its remote-discovery annotation).
    """

    WEIGHTS = (("pod_ip", 0.30), ("local_ready", 0.12), ("clusterip_ready", 0.08),
               ("pod_mirror_gone", 0.14), ("gateway_flip", 0.20),
               ("remote_discovery_gone", 0.06), ("federated", 0.10))
    AWAY = 40  # changes an object deleted by the mix stays away before it is re-created

    def __init__(self, kube: Any, items: list[dict[str, Any]], seed: int) -> None:
        self.kube = kube
        self.rng = random.Random(seed)
        self.changes = 0
        self.ip = 0
        self.counts: collections.Counter[str] = collections.Counter()
        services = {(o["metadata"]["namespace"], o["metadata"]["name"]): o
                    for o in items if o["kind"] == "Service"}
        slices: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for o in items:
            if o["kind"] == "EndpointSlice":
                key = (o["metadata"]["namespace"],
                       o["metadata"]["labels"]["kubernetes.io/service-name"])
                slices.setdefault(key, []).append(o)
        self.headless_slices: list[dict[str, Any]] = []  # local StatefulSets' slices
        self.clusterip_slices: list[dict[str, Any]] = []  # local ClusterIP services' slices
        self.pod_mirrors: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.remote_discovery: list[dict[str, Any]] = []
        self.federated: list[tuple[dict[str, Any], list[str]]] = []  # (Service, all members)
        for key, svc in services.items():
            labels = svc["metadata"].get("labels") or {}
            mirrored = labels.get("mirror.linkerd.io/mirrored-service") == "true"
            if not mirrored and labels.get("mirror.linkerd.io/exported") == "true":
                for sl in slices.get(key, []):
                    hosts = any("hostname" in e for e in sl["endpoints"])
                    (self.headless_slices if hosts else self.clusterip_slices).append(sl)
            elif "mirror.linkerd.io/headless-mirror-svc-name" in labels and slices.get(key):
                self.pod_mirrors.append((svc, slices[key][0]))
            elif REMOTE_DISCOVERY in labels:
                self.remote_discovery.append(svc)
            elif mirrored and key[1].endswith("-federated"):
                ann = svc["metadata"]["annotations"]
                self.federated.append((svc, ann[REMOTE_DISCOVERY].split(",")))
        # Objects the mix deleted, re-created after AWAY more changes: (due, objects).
        self.away: collections.deque[tuple[int, list[dict[str, Any]]]] = collections.deque()
        self.absent: set[int] = set()  # id() of the objects away

    def next_ip(self) -> str:
        self.ip = (self.ip + 1) % (1 << 20)
        v = (10 << 24 | 224 << 16) + self.ip
        return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"

    def _pick(self, pool: list[Any]) -> Any:
        """An object of ``pool`` that is not away; None when (nearly) all are."""
        for _ in range(20):
            item = self.rng.choice(pool) if pool else None
            first = item[0] if isinstance(item, tuple) else item
            if item is not None and id(first) not in self.absent:
                return item
        return None

    def _new_cluster_ip(self, svc: dict[str, Any]) -> None:
        ip = self.next_ip()
        svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = ip, [ip]

    def _away(self, objs: list[dict[str, Any]]) -> list[Any]:
        """Delete ``objs`` now, re-create them AWAY changes later."""
        self.away.append((self.changes + self.AWAY, objs))
        self.absent.add(id(objs[0]))
        return [_del(o) for o in reversed(objs)]

    def op(self) -> list[Any]:
        if self.away and self.away[0][0] <= self.changes:
            _, objs = self.away.popleft()
            self.absent.discard(id(objs[0]))
            self.counts["re-created"] += 1
            return list(objs)
        while True:
            r = self.rng.random()
            for what, weight in self.WEIGHTS:
                r -= weight
                if r < 0:
                    break
            writes = self._change(what)
            if writes:
                self.counts[what] += 1
                return writes

    def _change(self, what: str) -> list[Any] | None:
        """The writes of one change of kind ``what``; None when none can be made now."""
        if what == "pod_ip":  # a StatefulSet pod restarted: same hostname, new IP
            sl = self._pick(self.headless_slices)
            if sl is None:
                return None
            e = self.rng.choice(sl["endpoints"])
            e["addresses"] = [self.next_ip()]
            if "targetRef" in e:
                e["targetRef"]["uid"] = f"{self.rng.getrandbits(64):016x}"
            return [sl]
        if what in ("local_ready", "clusterip_ready"):
            sl = self._pick(self.headless_slices if what == "local_ready"
                            else self.clusterip_slices)
            if sl is None:
                return None
            c = self.rng.choice(sl["endpoints"])["conditions"]
            c["ready"] = c["serving"] = not c["ready"]
            return [sl]
        if what == "pod_mirror_gone":  # its remote pod went not ready: back later, new IP
            pair = self._pick(self.pod_mirrors)
            if pair is None:
                return None
            self._new_cluster_ip(pair[0])
            return self._away(list(pair))
        if what == "gateway_flip":
            pair = self._pick(self.pod_mirrors)
            if pair is None:
                return None
            c = pair[1]["endpoints"][0]["conditions"]
            c["ready"] = c["serving"] = not c["ready"]
            return [pair[1]]
        if what == "remote_discovery_gone":
            svc = self._pick(self.remote_discovery)
            if svc is None:
                return None
            self._new_cluster_ip(svc)
            return self._away([svc])
        if not self.federated:
            return None
        svc, members = self.rng.choice(self.federated)  # a member joins or leaves
        ann = svc["metadata"]["annotations"]
        now = ann[REMOTE_DISCOVERY].split(",")
        if len(now) > 1 and self.rng.random() < 0.5:
            now.remove(self.rng.choice(now))
        else:
            now = [m for m in members if m in now or self.rng.random() < 0.5] or members[:1]
        ann[REMOTE_DISCOVERY] = ",".join(now)
        return [svc]

    def tmp_cluster(self) -> list[Any]:
        return []  # clusters come and go in the old mix only

    write = Churn.write


# --------------------------------------------------------------------------- the probe

# `--trace` runs dnsside as `python -X tracemalloc=1 bench/churn_memory.py --probe FILE --
# serve ...`: this module's probe() starts a thread writing a sample line every 10 s, then
# hands over to dnsside's CLI. The probe lives here, not in dnsside.


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


_LIBC: list[Any] = []  # loaded once: a CDLL per sample was ~600 blocks of garbage each


def _mallinfo() -> dict[str, int]:
    try:
        if not _LIBC:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallinfo2.restype = _Mallinfo2
            _LIBC.append(libc.mallinfo2)
        m = _LIBC[0]()
    except (OSError, AttributeError):
        return {}
    return {"malloc_arena": m.arena, "malloc_mmap": m.hblkhd, "malloc_used": m.uordblks,
            "malloc_free": m.fordblks}


def _rss_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


_PYMALLOC = {"# arenas allocated current": "py_arenas", "# bytes in allocated blocks": "py_used",
             "# bytes in available blocks": "py_free_blocks", "unused pools": "py_free_pools"}


def _pymalloc() -> dict[str, int]:
    """pymalloc's arenas (1 MiB each, returned to the system only when empty) and how full
    they are, from sys._debugmallocstats() (it writes to fd 2: borrowed for the moment, so
    a log line dnsside writes meanwhile lands in the scratch file)."""
    with tempfile.TemporaryFile("w+") as scratch:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(scratch.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        scratch.seek(0)
        out: dict[str, int] = {}
        for line in scratch:
            for prefix, key in _PYMALLOC.items():
                if prefix in line and key not in out:
                    value = line.rsplit("=", 1)[-1].strip().replace(",", "")
                    if value.isdigit():
                        out[key] = int(value)
        return out


def probe(path: str, argv: list[str]) -> int:
    import tracemalloc

    out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    mine = [tracemalloc.Filter(False, tracemalloc.__file__)]  # the snapshots themselves
    baseline: list[Any] = []

    def sample() -> None:
        n = 0
        while True:
            time.sleep(SAMPLE_S)
            n += 1
            row: dict[str, Any] = {"t": time.time(), "rss_kb": _rss_kb(),
                                   "blocks": sys.getallocatedblocks(), **_mallinfo(),
                                   **_pymalloc(),
                                   "gc_frozen": gc.get_freeze_count(),
                                   "gc_enabled": int(gc.isenabled()),
                                   "gc_full": gc.get_stats()[2]["collections"]}
            # (not len(gc.get_objects()): from another thread it can catch a tuple being
            # built and make its resize fail with SystemError in dnsside's thread)
            if tracemalloc.is_tracing():
                row["traced"] = tracemalloc.get_traced_memory()[0]
                if n == 6:  # past the first sync and the warm-up: the reference snapshot
                    baseline.append(tracemalloc.take_snapshot().filter_traces(mine))
                elif baseline and n % 6 == 0:
                    snap = tracemalloc.take_snapshot().filter_traces(mine)
                    top = snap.compare_to(baseline[0], "lineno")[:15]
                    row["top"] = [str(s) for s in top]
                    del snap
            out.write(json.dumps(row) + "\n")

    threading.Thread(target=sample, name="bench-probe", daemon=True).start()
    _census_on_the_loop(out)
    from dnsside.cli import main

    return main(argv)


def _census_on_the_loop(out: Any) -> None:
    """Once a minute, on dnsside's own thread (the index's apply, wrapped here: a census
    from another thread can catch a tuple being built), the gc's view: tracked objects
    per generation, the commonest types in the oldest one, the frozen count, and the
    collector's thresholds and per-generation collection counts. No collection is
    forced, so the census changes nothing it measures."""
    from dnsside.core.index import Index

    apply = Index.apply
    due = [time.monotonic() + 60.0]

    def census_then_apply(self: Index, events: Any) -> Any:
        if time.monotonic() >= due[0]:
            due[0] += float(os.environ.get("CHURN_CENSUS_EVERY", "60"))
            old = gc.get_objects(generation=2)
            types = collections.Counter(type(o).__name__ for o in old)
            out.write(json.dumps({
                "t": time.time(), "census": {
                    "gen": [len(gc.get_objects(generation=g)) for g in (0, 1)] + [len(old)],
                    "count": gc.get_count(), "threshold": gc.get_threshold(),
                    "frozen": gc.get_freeze_count(),
                    "collections": [g["collections"] for g in gc.get_stats()],
                    "old_types": types.most_common(12)}}) + "\n")
            del old, types
            if os.environ.get("CHURN_COLLECT"):  # diagnosis: is what grows collectable?
                before = sys.getallocatedblocks()
                gc.set_debug(gc.DEBUG_SAVEALL)
                found = [gc.collect(g) for g in (0, 1, 2)]
                garbage = collections.Counter(type(o).__name__ for o in gc.garbage)
                gc.garbage.clear()
                gc.set_debug(0)
                gc.collect()
                out.write(json.dumps({"t": time.time(), "collect": {
                    "found": found, "blocks_before": before,
                    "blocks_after": sys.getallocatedblocks(),
                    "garbage": garbage.most_common(15)}}) + "\n")
            if os.environ.get("CHURN_CONTAINERS"):  # diagnosis: which containers grow
                gc.unfreeze()  # the frozen ones too (frozen again below, nothing collected)
                big = []
                every = gc.get_objects()
                alltypes = collections.Counter(type(o).__name__ for o in every)
                untracked: dict[int, tuple[str, int]] = {}
                for o in every:
                    for r in gc.get_referents(o):
                        if not gc.is_tracked(r) and id(r) not in untracked:
                            untracked[id(r)] = (type(r).__name__, sys.getsizeof(r))
                sizes: collections.Counter[str] = collections.Counter()
                counts: collections.Counter[str] = collections.Counter()
                for name, size in untracked.values():
                    sizes[name] += size
                    counts[name] += 1
                out.write(json.dumps({"t": time.time(), "all_types": alltypes,
                                      "untracked_sizes": sizes, "untracked_counts": counts,
                                      "blocks": sys.getallocatedblocks()}) + "\n")
                del alltypes, untracked
                for o in every:
                    if type(o) in (dict, set, list, collections.deque, collections.Counter,
                                   collections.defaultdict) and len(o) > 200:
                        sample = next(iter(o), None)
                        big.append((id(o), type(o).__name__, len(o), repr(sample)[:80]))
                del every
                gc.freeze()
                out.write(json.dumps({"t": time.time(), "containers": big}) + "\n")
                del big
        return apply(self, events)

    Index.apply = census_then_apply  # type: ignore[method-assign]


# --------------------------------------------------------------------------- the run


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.topology import generate
    from testkit.threadedkube import ThreadedKube

    topo = generate(args.members, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="churn-"))
    kube = ThreadedKube(tmp, bookmark_interval=1.0)
    gateways: dict[str, FakeGateway] = {}
    if args.gateway_probe:
        gateways = {o["metadata"]["name"]: FakeGateway().start() for o in topo.items
                    if o["kind"] == "Link"}
        point_probes(topo.items, gateways, "probe-gateway-")
    churn: Churn | SameNamesChurn
    if args.mix == "new":
        churn = SameNamesChurn(kube.kube, topo.items, seed=3)
        kube.call(kube.kube.load, topo.items)
        objects = len(topo.items)
    else:
        churn = Churn(kube.kube, topo.items, seed=3, pods=args.pods, locals_=args.locals)
        kube.call(kube.kube.load, [*topo.items, *churn.initial])
        objects = len(topo.items) + len(churn.initial)
        churn.initial = []
    del topo
    probe_file = OUT / f"churn_memory-{args.label}.probe.jsonl"
    serve = ["--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
             "--gateway-probe", "on" if gateways else "off", *args.dnsside_args]
    env = dict(kv.split("=", 1) for kv in args.env)
    entry = ["-m", "dnsside"]
    if args.trace or args.probe:
        probe_file.unlink(missing_ok=True)
        entry = [*(["-X", "tracemalloc=1"] if args.trace else []),
                 "-m", "bench.churn_memory", "--probe", str(probe_file), "--"]
    started = time.monotonic()
    server = Dnsside(*serve, env=env, entry=entry, wait_synced=False, timeout=120)
    server.wait_log("initial sync done", 120)
    print(f"dnsside pid {server.proc.pid}: synced {objects} objects in "
          f"{time.monotonic() - started:.1f}s; churning {args.rate}/s for {args.minutes} min",
          flush=True)

    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    next_sample = t0
    next_flap, relink_at, next_tmp = t0 + 30, 0.0, t0 + 5
    next_relist = t0 + args.relist_every if args.relist_every else float("inf")
    relists = 0
    try:
        while True:
            now = time.monotonic()
            if now >= next_sample:
                rss = _rss_kb(server.proc.pid)
                samples.append({"s": round(now - t0, 1), "rss_kb": rss,
                                "changes": churn.changes})
                print(f"  {now - t0:6.0f}s  {churn.changes:7d} changes  VmRSS "
                      f"{rss / 1024:6.1f} MB", flush=True)
                next_sample += SAMPLE_S
            if now >= end:
                break
            writes: list[Any] = []
            if now >= next_flap:
                writes.append(("delete", "Link", "linkerd-multicluster", "north"))
                relink_at, next_flap = now + 3, now + 30
            if relink_at and now >= relink_at:
                writes.append(_link("north"))
                relink_at = 0.0
            if now >= next_tmp:
                writes.extend(churn.tmp_cluster())
                next_tmp = now + 60
            budget = int(args.rate * (now - t0)) - churn.changes - len(writes)
            while budget > 0:
                op = churn.op()
                writes.extend(op)
                budget -= len(op)
            if writes:
                kube.call(churn.write, writes)
            if now >= next_relist:
                kube.call(kube.kube.compact)
                kube.call(kube.kube.drop_streams)
                relists += 1
                next_relist = now + args.relist_every
            if server.proc.poll() is not None:
                raise SystemExit("dnsside exited:\n" + "\n".join(server.lines[-30:]))
            time.sleep(0.05)
    finally:
        server.stop()
        kube.close()
        for gateway in gateways.values():
            gateway.stop()
    errors = [line for line in server.lines if "Traceback" in line or "ERROR" in line]
    half = samples[len(samples) // 2:]
    rss = [s["rss_kb"] / 1024 for s in samples]
    result = {
        "label": args.label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv), "members": args.members, "objects": objects,
        "rate": args.rate, "minutes": args.minutes, "changes": churn.changes,
        "mix": args.mix, "gateway_probe": bool(gateways),
        "kinds": dict(getattr(churn, "counts", {})),
        "relists": relists, "tmp_clusters": getattr(churn, "tmp_n", 0), "env": args.env,
        "start_mb": rss[0], "peak_mb": max(rss), "end_mb": rss[-1],
        "half_start_mb": half[0]["rss_kb"] / 1024,
        "last_half_growth_mb": half[-1]["rss_kb"] / 1024 - half[0]["rss_kb"] / 1024,
        "last_half_mb_per_min": slope([(s["s"] / 60, s["rss_kb"] / 1024) for s in half]),
        "first_half_mb_per_min": slope([(s["s"] / 60, s["rss_kb"] / 1024)
                                        for s in samples[: len(samples) // 2 + 1]]),
        "samples": samples, "errors": errors[:20],
    }
    if (args.trace or args.probe) and probe_file.exists():
        result["probe"] = [json.loads(line) for line in probe_file.read_text().splitlines()]
    return result


def report(r: dict[str, Any]) -> None:
    print(f"\n{r['label']}: {r['changes']} changes in {r['minutes']} min "
          f"({r['changes'] / (r['minutes'] * 60):.0f}/s), mix {r.get('mix', 'old')}, "
          f"gateway probe {'on' if r.get('gateway_probe') else 'off'}, {r['relists']} "
          f"relists, {r['tmp_clusters']} short-lived clusters, env {r['env'] or '-'}")
    if r.get("kinds"):
        print("  changes by kind: " + ", ".join(f"{k} {v}" for k, v in r["kinds"].items()))
    minutes = r["samples"][:: round(60 / SAMPLE_S)]
    print("  VmRSS a minute, MB: " + " ".join(f"{s['rss_kb'] / 1024:.1f}" for s in minutes))
    print(f"VmRSS start {r['start_mb']:.1f} MB, peak {r['peak_mb']:.1f}, end {r['end_mb']:.1f}; "
          f"last half {r['half_start_mb']:.1f} → {r['end_mb']:.1f} MB "
          f"({r['last_half_growth_mb']:+.2f} MB, {r['last_half_mb_per_min']:+.3f} MB/min; "
          f"first half {r['first_half_mb_per_min']:+.3f} MB/min)")
    for p in r.get("probe") or []:
        if "census" in p:
            c = p["census"]
            print(f"  census: gc generations {c['gen']}, frozen {c['frozen']}, "
                  f"collections {c['collections']}; oldest generation: "
                  + ", ".join(f"{t} {n}" for t, n in c["old_types"][:6]))
            continue
        print("  probe: " + ", ".join(
            f"{k} {v / 1048576:.2f}M" if "malloc" in k or k in ("traced", "py_used",
                                                               "py_free_blocks")
            else f"{k} {v}" for k, v in p.items() if k not in ("t", "top", "rss_kb")),
            f"rss {p['rss_kb'] / 1024:.1f}M")
    last_top = [p["top"] for p in r.get("probe") or [] if "top" in p]
    if last_top:
        print("  tracemalloc, growth since the reference snapshot (last one):")
        for line in last_top[-1]:
            print("    " + line)
    if r["errors"]:
        print("  errors:", *r["errors"][:5], sep="\n    ")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--probe":
        rest = sys.argv[3:]
        return probe(sys.argv[2], rest[1:] if rest[:1] == ["--"] else rest)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=8)
    p.add_argument("--rate", type=float, default=100, help="object changes a second")
    p.add_argument("--members", type=int, default=3000, help="bench/topology.py's size")
    p.add_argument("--pods", type=int, default=600, help="churned per-pod mirrors alive")
    p.add_argument("--locals", type=int, default=100, help="churned local services alive")
    p.add_argument("--mix", choices=("old", "new"), default="old",
                   help="old: churn under fresh names; new: changes "
                   "to the topology's own objects (see SameNamesChurn)")
    p.add_argument("--gateway-probe", action="store_true",
                   help="every link's probe Service at a loopback gateway, and dnsside run "
                   "with --gateway-probe on")
    p.add_argument("--relist-every", type=float, default=120,
                   help="seconds between 410 relists (0: none)")
    p.add_argument("--trace", action="store_true",
                   help="run dnsside under tracemalloc with a probe thread (slower)")
    p.add_argument("--probe", action="store_true",
                   help="the probe thread without tracemalloc (RSS stays representative)")
    p.add_argument("--env", action="append", default=[], help="K=V for dnsside's environment")
    p.add_argument("--label", default="run")
    p.add_argument("--report", metavar="JSON", help="print a saved result and exit")
    p.add_argument("dnsside_args", nargs="*", help="more `dnsside serve` arguments (after --)")
    args = p.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text()))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    result = run(args)
    (OUT / f"churn_memory-{args.label}.json").write_text(json.dumps(result, indent=1))
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
