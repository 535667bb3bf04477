"""The cyclic garbage collector kept off while a source reads a list.

A list at 100k members makes about a million records that live as long as the index:
a collection while they are made rescans them, again and again, for nothing. So every
list a source reads (the local API's, a linked cluster's, a file) is read inside
:func:`paused`. It only switches the collector off and back: the index, which keeps the
records, collects once and freezes them when it takes the list
(:func:`dnsside.core.gcpause.bulk`, which finds the collector off here and leaves it to
this one to switch back on). The switch is the whole process's: a worker thread decoding
a long watch line takes it too (:func:`dnsside.sources.watchline.load_long_event`), and
however two uses overlap, the one that found the collector on puts it back on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cyclic GC off for a while, then as it was: no collection, no freeze."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
