"""Bulk loads without the cyclic garbage collector in the way.

A full list or a file load at 100k members builds about a million container
objects (records, members, answers) that then live as long as the index. While
they are being built, every generation-2 collection rescans all of them: a good
part of the sync time. Once built, they still cost: any later full collection
walks the whole index and holds the GIL, a stall the query path feels
(bench/memory-figures.md). So :func:`bulk` pauses the collector for the bulk step and then *freezes*
what survived (``gc.freeze``): later collections skip those objects; freed ones
still go by reference counting. A full collection on the way in clears any
cyclic garbage left since the last bulk step, and nothing in a bulk step
creates reference cycles.

But a freeze takes *everything* alive at that moment, not only the index: the
HTTP client's open watch connections, their readers and buffers, pending tasks.
When those die later in a reference cycle (a dropped connection leaves its
exception, traceback, frames, protocol and transport pointing at each other),
no collection ever looks at them again: every relist left such garbage behind
for good (bench/MEMORY_CHURN.md). So each bulk step *unfreezes* before its full
collection, which then also finds the garbage the previous freeze held, and
freezes again after: what a freeze keeps is gone at the next relist at the
latest. The price: that one collection walks the whole index (the stall above)
once per relist or reload, which itself takes seconds.

A source that *lists* a cluster builds those records over seconds of awaiting
the API server, among short-lived garbage of its HTTP client (which may hold
cycles): :func:`paused` keeps the collector off meanwhile, without freezing
(the index's own bulk step, which receives the list, collects then freezes).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_depth = 0


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic GC for a bulk load; freeze the result. Nests; only the
    outermost level unfreezes, collects, pauses, freezes and resumes."""
    global _depth
    outer = _depth == 0
    enabled = gc.isenabled()
    if outer:
        gc.unfreeze()  # what the last freeze kept is looked at again (see above)
        gc.collect()
        gc.disable()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if outer:
            gc.freeze()
            if enabled:
                gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cyclic GC off for a while, then as it was: no collection, no freeze.
    (A bulk step inside finds it off and leaves it to this one to switch back on.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
