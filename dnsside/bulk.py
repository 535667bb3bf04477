"""Bulk loads without the cyclic garbage collector in the way.

A full list or a file load at 100k members builds about a million container
objects (records, members, answers) that then live as long as the index. While
they are being built, every generation-2 collection rescans all of them: a third
of the sync time. Once built, they still cost: any later full collection walks
the whole index and holds the GIL for about 0.3 s, a stall the query path
feels. So :func:`bulk` pauses the collector for the bulk step and then *freezes*
what survived (``gc.freeze``): later collections skip those objects; freed ones
still go by reference counting. A full collection on the way in clears any
cyclic garbage left since the last bulk step (cheap: frozen objects are not
scanned), and nothing in a bulk step creates reference cycles, so freezing
keeps no garbage alive.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_depth = 0


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic GC for a bulk load; freeze the result. Nests; only the
    outermost level collects, pauses, freezes and resumes."""
    global _depth
    outer = _depth == 0
    enabled = gc.isenabled()
    if outer:
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
