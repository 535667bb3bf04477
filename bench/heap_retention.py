"""The two mechanisms behind issue 35, reproduced without dnsside (bench/MEMORY_CHURN.md).

    python bench/heap_retention.py cycle    # objects that refer to themselves, after gc.freeze
    python bench/heap_retention.py heap     # glibc keeps freed heap memory resident

``cycle``: 60,000 long-lived objects are collected and frozen (what dnsside's index does
after a list); then a churn replaces, again and again, one of 200 live "answers" each
holding ~700 bytes. With ``self.me = self`` (what ``dns.wire.Ring`` did) every replaced
one is garbage that only a full collection frees, and the full collection waits until the
objects promoted since the last one pass a quarter of the 60,000 counted at the freeze:
RSS climbs with every change. Without the self-reference, refcounting frees each at once.

``heap``: variable-sized buffers (600-5,000 bytes: above pymalloc's 512, so glibc's
malloc) are allocated and freed in a churn, a few kept for a while, as parsed watch events
and encoded answers are. glibc's heap in use stays flat while its free part, still
resident, grows; ``malloc_trim(0)`` hands it back. Prints mallinfo2 and VmRSS.
"""

from __future__ import annotations

import ctypes
import gc
import random
import sys
from collections import deque
from pathlib import Path


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Answer:
    __slots__ = ("body", "me")

    def __init__(self, body: bytes, cyclic: bool) -> None:
        self.body = body
        self.me = self if cyclic else None


def cycle(cyclic: bool, changes: int = 200_000) -> None:
    keep = [{"k": i} for i in range(60_000)]  # the index's records
    gc.collect()
    gc.freeze()
    live = [Answer(bytes(700), cyclic) for _ in range(200)]
    rng = random.Random(1)
    start = rss_kb()
    for n in range(1, changes + 1):
        live[rng.randrange(200)] = Answer(bytes(600 + n % 200), cyclic)
        if n % 40_000 == 0:
            print(f"  {'self-referencing' if cyclic else 'plain':16s} {n:7d} changes: RSS "
                  f"+{rss_kb() - start:6d} KB, full collections {gc.get_stats()[2]['collections']}")
    del keep


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap(rounds: int = 8) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    rng = random.Random(2)
    held: deque[bytes] = deque()
    kept: deque[bytes] = deque(maxlen=2_000)  # the few that live on for a while

    def report(what: str) -> None:
        m = libc.mallinfo2()
        print(f"  {what:24s} heap {m.arena / 1e6:6.2f} MB, in use {m.uordblks / 1e6:6.2f} MB, "
              f"free {m.fordblks / 1e6:6.2f} MB, VmRSS {rss_kb() / 1024:6.1f} MB")

    report("start")
    for r in range(rounds):
        for _ in range(50_000):
            b = bytes(rng.randrange(600, 5_000))
            held.append(b)
            if len(held) > 300:
                held.popleft()
            if rng.random() < 0.04:
                kept.append(b)
        report(f"after churn round {r + 1}")
    libc.malloc_trim(0)
    report("after malloc_trim(0)")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cycle"
    if what == "cycle":
        cycle(cyclic=False)
        cycle(cyclic=True)
    else:
        heap()
