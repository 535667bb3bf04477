"""Give the heap memory that churn freed back to the system (glibc's ``malloc_trim``).

Every change to the objects frees and allocates Python objects of every size: watch
events' JSON, records, pre-encoded answers. Those over 512 bytes come from the C
allocator, and glibc keeps what is freed inside its heap resident, reused only by a later
request that fits: at 150 changes a second the heap's free part grew by about 0.5 MB a
minute while the memory in use stayed flat (issue 35, bench/MEMORY_CHURN.md). ``malloc_trim(0)``
hands the free pages back (``madvise``), also those in the middle of the heap; it takes
well under a millisecond on dnsside's heap, so it runs at most once per
``--heap-trim-period`` and only after changes: an idle server does nothing.

The subtle point: this is a trick on the C library under the interpreter, so it is
contained as :mod:`dnsside.serving.mmsg` is. ``malloc_trim`` is looked up once through
ctypes; where it is missing (musl, not Linux) or the flag says 0, nothing runs, and
``dnsside_heap_trim_mode`` says which. Nothing is freed here that anything still uses:
the call only returns pages glibc already holds as free.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.server")


def find_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    """After a change, trims the heap once ``period`` seconds later (changes meanwhile
    join that one trim)."""

    def __init__(self, period: float, trim: Callable[[int], int] | None = None) -> None:
        self.period = period
        self.trim = (trim or find_trim()) if period > 0 else None
        self._timer: asyncio.TimerHandle | None = None
        mode = "glibc" if self.trim is not None else "off"
        metrics.HEAP_TRIM_MODE.labels(mode=mode).set(1)
        if self.trim is None and period > 0:
            log.info("heap trim: off (no malloc_trim in this C library)")

    @property
    def due(self) -> bool:
        """A trim is waiting for its time."""
        return self._timer is not None

    def changed(self) -> None:
        """The index applied a batch: trim in ``period`` seconds unless already due."""
        if self.trim is None or self._timer is not None:
            return
        self._timer = asyncio.get_running_loop().call_later(self.period, self.run)

    def run(self) -> None:
        self._timer = None
        if self.trim is not None:
            self.trim(0)
            metrics.HEAP_TRIMS.inc()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
