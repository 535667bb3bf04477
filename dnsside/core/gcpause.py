"""Bulk loads with the cyclic garbage collector paused, and their result frozen.

A full list at 100k members builds about a million objects that live as long as the
index; collections that rescan them slow the load and, later, stall queries
(bench/memory-figures.md). So :func:`bulk` pauses the collector for the load and then
freezes what survived: later collections skip it. It unfreezes and collects first,
because a freeze also keeps whatever else was alive then (a dropped connection's
reference cycle, say) out of every later collection (bench/MEMORY_CHURN.md).
The sources keep the collector off while they read a list
(:func:`dnsside.sources.gcoff.paused`); the index's bulk step inside finds it off and
leaves it off.
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

