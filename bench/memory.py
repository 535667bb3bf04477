"""Where the index's memory goes, in-process: RSS, a deep-size walk per structure, tracemalloc.

    .venv/bin/python -m bench.memory [--members 100000] [--shape kube|topology]
                                     [--mcs-zone clusterset.local.] [--tracemalloc 25]

Builds the index the server builds from the same records (parsed from the same
objects the kube source lists: ``--shape kube`` is ``bench/kube_scale.py``'s
topology, ``topology`` is ``bench/topology.py``'s), then reports:

* RSS after the load (VmRSS, VmHWM) of this process, the objects dropped first;
* for each structure the index and the responder hold, the bytes of every object
  reachable from it (``sys.getsizeof``, containers walked), each object counted
  once, by the first structure that reaches it in the order printed (so shared
  strings land on the first holder; the "alone" column walks each structure on
  its own, shared objects included);
* with ``--tracemalloc N``, the N source lines that allocated the most of what
  is still alive after the sync (tracemalloc slows the load about 3 times).

Run it before and after a change to the index: the figures are exact and stable
(unlike times on a shared machine).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dnsside.core.build import make_index
from dnsside.core.index import IndexOptions
from dnsside.model.events import Kind, Replace, Synced
from dnsside.model.linkerd import parse_object

ROOT = Path(__file__).resolve().parent.parent

def status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, kB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1])
    return out


_ATOMS = (str, bytes, int, float, bool, type(None), memoryview, array)


def reachable(root: Any, seen: set[int]) -> Iterator[Any]:
    """Every object reachable from ``root`` (containers walked, slots and __dict__
    followed; classes, enum members and methods skipped) not already in ``seen``,
    each once; adds them to ``seen``."""
    stack = [root]
    while stack:
        obj = stack.pop()
        i = id(obj)
        if i in seen:
            continue
        if isinstance(obj, type) or type(obj).__module__ == "enum" or hasattr(obj, "__func__"):
            continue
        seen.add(i)
        yield obj
        if isinstance(obj, _ATOMS):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            stack.extend(getattr(obj, s) for cls in type(obj).__mro__
                         for s in getattr(cls, "__slots__", ()) if hasattr(obj, s))
            if hasattr(obj, "__dict__"):
                stack.append(obj.__dict__)


def walk(root: Any, seen: set[int]) -> tuple[int, int]:
    """(bytes, objects) reachable from ``root`` not already in ``seen``; adds them."""
    total = count = 0
    for obj in reachable(root, seen):
        total += sys.getsizeof(obj)
        count += 1
    return total, count


def objects(shape: str, members: int) -> list[dict[str, Any]]:
    if shape == "kube":
        from bench import kube_scale

        return kube_scale.generate(members)
    from bench.topology import cached

    path, _ = cached(members, ROOT / "bench" / "out")
    return list(json.loads(path.read_text())["items"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--shape", choices=("kube", "topology"), default="topology")
    ap.add_argument("--mcs-zone", action="append", default=[])
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(1)
    items = objects(args.shape, args.members)
    started = time.process_time()
    records = tuple(r for i, o in enumerate(items)
                    if (r := parse_object(o, f"item {i}")) is not None)
    del items
    gc.collect()
    parsed = time.process_time()
    index = make_index(IndexOptions(cluster_name="east", mcs_zones=tuple(args.mcs_zone)))
    responder = index.responder
    # No Link among the objects (kube_scale's fake has no Link CRD): Links unreadable, as
    # the kube source would report them, so no mirror counts as an orphan.
    kinds = {Kind.SERVICE, Kind.SLICE}
    if any(Kind.of(r) is Kind.LINK for r in records):
        kinds.add(Kind.LINK)
    index.apply([Replace(frozenset(kinds), records), Synced()])
    del records
    gc.collect()
    done = time.process_time()
    mem = status()
    snapshot = None
    if args.tracemalloc:
        import tracemalloc

        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
    print(f"{args.shape} {args.members:,} members, mcs {args.mcs_zone or 'off'}: parse "
          f"{parsed - started:.1f} s CPU, index+encode {done - parsed:.1f} s CPU; "
          f"RSS {mem['VmRSS'] / 1024:.0f} MB (peak {mem['VmHWM'] / 1024:.0f} MB); "
          f"{len(responder.answers):,} answers, {len(index.global_services):,} global services")

    parts: list[tuple[str, Any]] = [
        ("responder.answers", responder.answers),
        ("responder.names", responder.names),
        ("index.local.services", index.local.services),
        ("index.local.slices", index.local.slices),
        # The index keeps the global services' tallies, not GlobalService objects.
        ("index.global_services", index.tallies),
        ("index's published keys", index.publisher._published),
        ("index.slices_by_service", index.local.slices_by_service),
        ("index.mirrors_by_key", index.local.mirrors_by_key),
        ("index (the rest)", {k: v for k, v in vars(index).items()
                              if k not in {"local", "global_services", "publisher", "tallies"}}),
    ]
    seen: set[int] = set()
    rows = []
    print(f"\n{'structure':28} {'entries':>9} {'first MB':>9} {'objects':>10} {'alone MB':>9}")
    for name, part in parts:
        first, n = walk(part, seen)
        alone, _ = walk(part, set())
        entries = len(part) if hasattr(part, "__len__") else 0
        rows.append({"structure": name, "entries": entries, "first_mb": first / 1e6,
                     "objects": n, "alone_mb": alone / 1e6})
        print(f"{name:28} {entries:>9,} {first / 1e6:>9.1f} {n:>10,} {alone / 1e6:>9.1f}")
    total = sum(r["first_mb"] for r in rows)
    print(f"{'total (each object once)':28} {'':>9} {total:>9.1f}")
    by_type: dict[str, list[int]] = {}
    for _, part in parts:
        _types(part, by_type)
    print("\nby type (each object once, over all structures):")
    for tname, (size, n) in sorted(by_type.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"  {tname:28} {size / 1e6:8.1f} MB {n:>10,} objects")

    if snapshot is not None:
        import linecache

        print(f"\ntracemalloc: top {args.tracemalloc} lines of what is alive after the sync")
        for stat in snapshot.statistics("lineno")[: args.tracemalloc]:
            frame = stat.traceback[0]
            print(f"  {stat.size / 1e6:8.1f} MB {stat.count:>9,}  "
                  f"{Path(frame.filename).name}:{frame.lineno}  "
                  f"{linecache.getline(frame.filename, frame.lineno).strip()[:70]}")
    if args.json:
        args.json.write_text(json.dumps({"rss_kb": mem, "rows": rows}, indent=1))
    return 0


def _types(root: Any, out: dict[str, list[int]], seen: set[int] | None = None) -> None:
    """Bytes and count by type name of everything reachable, each object once."""
    for obj in reachable(root, _TYPE_SEEN if seen is None else seen):
        entry = out.setdefault(type(obj).__name__, [0, 0])
        entry[0] += sys.getsizeof(obj)
        entry[1] += 1


_TYPE_SEEN: set[int] = set()

if __name__ == "__main__":
    sys.exit(main())
