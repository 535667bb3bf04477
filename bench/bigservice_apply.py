"""What one change to a huge headless Service costs the index (issue 33, item 12).

    .venv/bin/python -m bench.bigservice_apply                    # 12,000 endpoints
    .venv/bin/python -m bench.bigservice_apply --endpoints 2000 --repeats 3
    .venv/bin/python -m bench.bigservice_apply --flag=--mcs-zone=clusterset.local.

In process, no sockets: an :class:`~dnsside.core.index.Index` holds one headless
Service of ``--endpoints`` pods, in two shapes:

- ``flat``: a linked cluster's own Service read directly (``--flat-network``), its pods
  in ONE EndpointSlice, as a hostile API server would send it (bench/hostile_remote.py's
  ``flood``);
- ``local``: the local cluster's exported Service, its pods in slices of 1,000.

Then one slice is applied again, as an ``Upsert``, in four ways: re-sent identical, one
endpoint's readiness toggled, one endpoint's address changed, every address changed
(and back, so each repeat changes the same). Each ``Index.apply`` is timed (median and
max of ``--repeats``), and printed with its ratio to decoding the same slice's JSON
(``json.loads`` + ``parse_slice``: what the source pays for the event anyway, and a
figure that moves with the machine's load as the apply does). Times are the thread's
CPU time (``time.thread_time``: on a shared machine, far steadier than the wall clock,
which is printed too). The index's own counter ``Index.publisher.encoded_members`` (members
whose names were encoded) says how much was redone.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from dnsside.core.build import make_index
from dnsside.core.index import Index, IndexOptions
from dnsside.dns.zone import ZoneOptions
from dnsside.model.events import (
    Event,
    Kind,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import Record, parse_object, parse_remote_service, parse_slice
from dnsside.model.selectors import LabelSelector
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    local_objects,
    service,
)

SLICE_SIZE = 1000  # the local shape's slices (the API's maximum per slice)


def address(n: int, shift: int = 0) -> str:
    n += shift
    return f"10.{240 + n // 62500}.{n // 250 % 250}.{n % 250 + 1}"


def slice_object(name: str, first: int, count: int, toggled: int | None = None,
                 moved: int | None = None, shift: int = 0) -> dict[str, Any]:
    """``count`` pods from pod ``first``; ``toggled``: that pod not ready; ``moved``: that
    pod at another address; ``shift``: every address moved by that much."""
    eps = []
    for n in range(first, first + count):
        ip = address(n, shift + (70_000 if n == moved else 0))
        eps.append(endpoint(ip, f"big-{n}", ready=n != toggled))
    return endpoint_slice(name, "big", eps)


def records(objects: list[dict[str, Any]]) -> tuple[Record, ...]:
    out = []
    for obj in objects:
        record = parse_object(obj)
        assert record is not None, obj
        out.append(record)
    return tuple(out)


def big_service(shape: str, endpoints: int, mcs: tuple[str, ...], zone: ZoneOptions
                ) -> tuple[Index, Callable[[dict[str, Any]], Event], list[dict[str, Any]]]:
    """The index, how a slice of the big Service becomes an event, and its slices."""
    index = make_index(IndexOptions(cluster_name="east", zone=zone, mcs_zones=mcs))
    if shape == "flat":
        slices = [slice_object("big-1", 0, endpoints)]
        index.apply([Replace(frozenset(Kind), records([*local_objects(), link("north")])),
                     Synced()])
        selector = LabelSelector(tuple(REMOTE_DISCOVERY_LABELS.items()))
        big = parse_remote_service(service("big", labels=dict(REMOTE_DISCOVERY_LABELS)),
                                   "bench", "north", selector)
        assert big is not None
        index.apply([Remote("north", Replace(frozenset({Kind.SERVICE, Kind.SLICE}),
                                             (big, *map(parse_slice, slices)))),
                     RemoteStatus("north", RemoteState.SYNCED, "", "bench")])

        def event(obj: dict[str, Any]) -> Event:
            return Remote("north", Upsert(parse_slice(obj)))
    else:
        slices = [slice_object(f"big-{i // SLICE_SIZE}", i, min(SLICE_SIZE, endpoints - i))
                  for i in range(0, endpoints, SLICE_SIZE)]
        exported = service("big", labels={"mirror.linkerd.io/exported": "true"})
        index.apply([Replace(frozenset(Kind), records([*local_objects(), exported, *slices])),
                     Synced()])

        def event(obj: dict[str, Any]) -> Event:
            return Upsert(parse_slice(obj))
    return index, event, slices


def encoded_members(index: Index) -> int:
    """The publisher's count of members encoded (the index's own before issue 38; -1 for code
    before it had the counter, so this runs against older checkouts too)."""
    counted = getattr(getattr(index, "publisher", index), "encoded_members", -1)
    return int(counted)


def digest(index: Index) -> str:
    """Every answer's bytes (the SOA's serial aside, a clock), in question order."""
    h = hashlib.sha256()
    for key in sorted(index.responder.answers):
        if key.endswith(b"\x00\x06\x00\x01"):
            continue
        a = index.responder.answers[key]
        h.update(key + a.counts + a.body)
    return h.hexdigest()[:16]


def run(shape: str, endpoints: int, repeats: int, mcs: tuple[str, ...], zone: ZoneOptions,
        digests: bool = False) -> None:
    index, event, slices = big_service(shape, endpoints, mcs, zone)
    if digests:
        print(f"initial answers {digest(index)}")
    first = slices[0]
    count = len(first["endpoints"])
    name = first["metadata"]["name"]
    last = count - 1
    variants: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "identical": (first, first),
        "one toggled": (slice_object(name, 0, count, toggled=last), first),
        "one moved": (slice_object(name, 0, count, moved=last), first),
        "all moved": (slice_object(name, 0, count, shift=100_000), first),
    }
    text = json.dumps(first)
    decode: list[float] = []
    for _ in range(repeats):
        t0 = time.thread_time()
        parse_slice(json.loads(text))
        decode.append(time.thread_time() - t0)
    base = statistics.median(decode)
    print(f"== {shape}: one headless Service of {endpoints} endpoints"
          f"{f' (slices of {SLICE_SIZE})' if shape == 'local' else ' (one slice)'}"
          f"{', --mcs-zone ' + ','.join(mcs) if mcs else ''}; {repeats} repeats")
    print(f"decoding the changed slice ({count} endpoints: json.loads + parse_slice): "
          f"median {base * 1000:.1f} ms CPU")
    print(f"{'change':<12} {'apply CPU median':>17} {'max':>9} {'/ decode':>9} "
          f"{'wall median':>12} {'members encoded':>16}")
    for label, (changed, back) in variants.items():
        events = (event(changed), event(back))
        times: list[float] = []
        walls: list[float] = []
        encoded = 0
        for _ in range(repeats):
            for e in events:
                before = encoded_members(index)
                gc.collect()
                t0, w0 = time.thread_time(), time.perf_counter()
                index.apply([e])
                times.append(time.thread_time() - t0)
                walls.append(time.perf_counter() - w0)
                encoded = max(encoded, encoded_members(index) - before)
        median = statistics.median(times)
        shown = str(encoded) if encoded_members(index) >= 0 else "(no counter)"
        if digests:  # the answers with the change applied, to compare with other code
            index.apply([events[0]])
            shown += f" answers {digest(index)}"
            index.apply([events[1]])
        print(f"{label:<12} {median * 1000:>14.1f} ms {max(times) * 1000:>6.1f} ms "
              f"{median / base:>8.2f}x {statistics.median(walls) * 1000:>9.1f} ms "
              f"{shown:>16}")
        if hasattr(index, "prepare"):
            ahead(index, label, events, repeats, base)


def ahead(index: Index, label: str, events: tuple[Event, Event], repeats: int,
          base: float) -> None:
    """The same change as the server applies it: Index.prepare's steps, then
    Index.apply_steps' (on code before it, Index.apply as one step), the event loop free
    between two; the longest step is the longest the loop is held. Each step's thread CPU
    time; the cyclic collector's passes are timed apart (a pass runs inside whichever step
    allocates when it is due: no collection is forced here, as none is in the server)."""
    steps: list[float] = []
    applies: list[float] = []
    totals: list[float] = []
    passes: list[float] = []
    began: list[float] = []
    in_gc = [0.0]  # the collector's time so far
    net: list[float] = []  # each step's time without the collector's passes in it

    def timed_pass(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[:] = [time.thread_time()]
        elif began:
            passes.append(time.thread_time() - began[0])
            in_gc[0] += passes[-1]

    def take(work: Iterator[object], into: list[float]) -> float:
        spent = 0.0
        while True:
            t0, g0 = time.thread_time(), in_gc[0]
            more = next(work, _DONE) is not _DONE
            into.append(time.thread_time() - t0)
            net.append(into[-1] - (in_gc[0] - g0))
            spent += into[-1]
            if not more:
                return spent

    gc.callbacks.append(timed_pass)
    try:
        for _ in range(repeats):
            for e in events:
                take(index.prepare([e]), steps)
                totals.append(take(apply_steps(index, e), applies))
    finally:
        gc.callbacks.remove(timed_pass)
    longest = max(max(steps), max(applies))
    n = len(applies) // (2 * repeats)
    print(f"{'  in steps':<12} {statistics.median(totals) * 1000:>14.1f} ms "
          f"{longest * 1000:>6.1f} ms {longest / base:>8.2f}x  (apply: {n} steps of at most "
          f"{max(applies) * 1000:.1f} ms, after {len(steps) // (2 * repeats)} steps ahead of "
          f"at most {max(steps) * 1000:.1f} ms; longest GC pass meanwhile "
          f"{max(passes, default=0) * 1000:.1f} ms; longest step without it "
          f"{max(net) * 1000:.1f} ms)")


_DONE = object()


def apply_steps(index: Index, event: Event) -> Iterator[object]:
    """Index.apply_steps; before it existed, Index.apply as one step."""
    stepped = getattr(index, "apply_steps", None)
    if stepped is not None:
        return iter(stepped([event]))

    def at_once() -> Iterator[None]:
        index.apply([event])
        yield
    return at_once()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoints", type=int, default=12_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shape", choices=("flat", "local", "both"), default="both")
    parser.add_argument("--flag", action="append", default=[],
                        help="--mcs-zone=ZONE, --round-robin=off, --srv-priority=local-first, "
                             "--publish-not-ready (the index flags this takes)")
    parser.add_argument("--digests", action="store_true",
                        help="print a digest of every answer after each change (compare "
                             "two checkouts: the same bytes, the same digests)")
    args = parser.parse_args()
    mcs = tuple(f.split("=", 1)[1] for f in args.flag if f.startswith("--mcs-zone="))
    zone = ZoneOptions(round_robin="--round-robin=off" not in args.flag,
                       srv_priority="local-first" if "--srv-priority=local-first" in args.flag
                       else "equal", publish_not_ready="--publish-not-ready" in args.flag)
    for shape in (("flat", "local") if args.shape == "both" else (args.shape,)):
        run(shape, args.endpoints, args.repeats, mcs, zone, args.digests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
