"""Bulk loads with the cyclic garbage collector paused, and a big result frozen.

A full list at 100k members builds about a million objects that live as long as the
index; collections that rescan them slow the load and, later, stall queries
(bench/memory-figures.md). So :func:`bulk` pauses the collector for the load and then,
if the index it leaves is big, collects once and freezes what survived: later
collections skip it.

Two subtle points. The collection comes first, and over everything: a freeze also keeps
whatever else is alive then (a dropped connection's reference cycle, say) out of every
later collection, so each bulk load unfreezes what the last one froze and collects it
before freezing again (bench/MEMORY_CHURN.md). And that collection is a pass over the
whole process, so it is taken only where the freeze pays for it: after a load that
leaves a small index (a demo, a relist of a few services) the collector simply resumes,
as after any change, and nothing is frozen (what an earlier big load froze is let go
and collected once). The sources keep the collector off while they read a list
(:func:`dnsside.sources.gcoff.paused`); the index's bulk step inside finds it off and
leaves it off.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

_depth = 0


@contextlib.contextmanager
def bulk(big: Callable[[], bool]) -> Iterator[None]:
    """Pause the cyclic GC for a bulk load; then, if ``big()`` says the result is worth
    keeping out of collections, collect once and freeze it. Nests; only the outermost
    level pauses, collects, freezes and resumes."""
    global _depth
    outer = _depth == 0
    enabled = gc.isenabled()
    if outer:
        gc.disable()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if outer:
            freeze = big()
            if freeze or gc.get_freeze_count():
                gc.unfreeze()  # what the last freeze kept is looked at again (see above)
                gc.collect()
                if freeze:
                    gc.freeze()
            if enabled:
                gc.enable()
