"""Propagation at scale, in-process: source event → new answer from the responder.

    python -m bench.propagation bench/out/topo-100000.json --events 300 --reloads 3
    python -m bench.propagation ... --mcs-zone clusterset.local.   # both naming schemes

Builds the index the server builds (same file source, same index), then:

* **event**: for ``--events`` per-pod mirror EndpointSlices, each of a different
  global service, apply ``Upsert`` of the slice with its gateway endpoint's
  ``ready`` flipped, and time until ``Responder.respond`` for that pod's name
  returns the new answer (NXDOMAIN once not ready, its address once ready
  again). Both directions are measured. This is the path a watch event takes to
  the wire, minus the socket. With ``--mcs-zone``, the pod's KEP-1645 name must
  have flipped too before the clock stops.
* **reload**: the file rewritten with one slice flipped, then the file
  source's reload (read, parse, diff against the index) and the index update.

Prints JSON on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

from dnsside.core.build import make_index
from dnsside.core.index import IndexOptions
from dnsside.dns.wire import to_wire
from dnsside.model.events import Synced, Upsert
from dnsside.model.linkerd import Role, SliceRecord
from dnsside.sources.file import FileSource


def percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"n": len(xs), "p50_ms": xs[len(xs) // 2] * 1e3,
            "p99_ms": xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3, "max_ms": xs[-1] * 1e3}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("topology", type=Path)
    p.add_argument("--events", type=int, default=300)
    p.add_argument("--reloads", type=int, default=3)
    p.add_argument("--cluster-name", default="east")
    p.add_argument("--mcs-zone", action="append", default=[],
                   help="also serve the KEP-1645 names under this zone")
    args = p.parse_args()

    index = make_index(IndexOptions(cluster_name=args.cluster_name,
                                    mcs_zones=tuple(args.mcs_zone)))
    responder = index.responder
    source = FileSource(args.topology)
    t0 = time.perf_counter()
    events = [*source._load(), Synced()]
    t1, cpu = time.perf_counter(), time.process_time()
    index.apply(events)
    load_seconds = time.perf_counter() - t0
    apply_seconds = time.perf_counter() - t1  # index + encode, without reading the file
    apply_cpu_seconds = time.process_time() - cpu  # the same in CPU: less noisy when shared
    del events
    members = sum(index.counts.member_counts().values())

    # One per-pod mirror slice per global service, with a ready gateway endpoint.
    rng = random.Random(7)
    by_service: dict[tuple[str, str], SliceRecord] = {}
    for (ns, _), sl in index.local.slices.items():
        svc = index.local.services.get((ns, sl.service_name))
        if svc is None or svc.role is not Role.POD_MIRROR or not sl.endpoints:
            continue
        if not all(e.ready for e in sl.endpoints):
            continue
        by_service.setdefault((ns, svc.original), sl)
    picks = rng.sample(sorted(by_service.values(), key=lambda s: (s.namespace, s.name)),
                       min(args.events // 2, len(by_service)))

    def query(name: str) -> bytes:
        return struct.pack("!6H", 0x1234, 0, 1, 0, 0, 0) + to_wire(name) + b"\x00\x01\x00\x01"

    timings: list[float] = []
    for sl in picks:
        svc = index.local.services[(sl.namespace, sl.service_name)]
        pod = f"{svc.hostname}.{svc.cluster}.{svc.original}.{sl.namespace}"
        q = query(f"{pod}.svc-global.")
        mcs = [query(f"{pod}.svc.{zone}") for zone in args.mcs_zone]
        before = responder.respond(q)
        assert before is not None and before[3] & 0xF == 0, "expected NOERROR first"
        for ready in (False, True):
            endpoints = tuple(dataclasses.replace(e, ready=ready) for e in sl.endpoints)
            event = Upsert(dataclasses.replace(sl, endpoints=endpoints))
            want = 3 if not ready else 0  # NXDOMAIN while the pod is not ready
            start = time.perf_counter()
            index.apply([event])
            reply = responder.respond(q)
            replies = [responder.respond(m) for m in mcs]
            elapsed = time.perf_counter() - start
            assert reply is not None and reply[3] & 0xF == want, (sl.name, ready)
            assert all(r is not None and r[3] & 0xF == want for r in replies), (sl.name, ready)
            timings.append(elapsed)

    # Full reload: rewrite the file with one slice flipped, reload it.
    doc = json.loads(args.topology.read_text())
    flipped = args.topology.with_name(args.topology.stem + "-flipped.json")
    reloads: list[float] = []
    target = picks[0] if picks else None
    for i in range(args.reloads):
        if target is not None:
            for item in doc["items"]:
                if item["kind"] == "EndpointSlice" and item["metadata"]["name"] == target.name:
                    for e in item["endpoints"]:
                        e["conditions"]["ready"] = i % 2 == 1
                    break
        flipped.write_text(json.dumps(doc, separators=(",", ":")))
        source.path = flipped
        start = time.perf_counter()
        changed = index.apply(source._load())
        reloads.append(time.perf_counter() - start)
        assert changed, "the reload changed nothing"
    flipped.unlink()
    del doc

    result: dict[str, Any] = {
        "members": members,
        "answers": len(responder.answers),
        "names": len(responder.names),
        "load_seconds": load_seconds,
        "apply_seconds": apply_seconds,
        "apply_cpu_seconds": apply_cpu_seconds,
        "event": percentiles(timings),
        "reload": percentiles(reloads),
    }
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
