"""The heap trim after changes (dnsside/serving/heap.py): once per period whatever the
number of changes, never without one, never with the flag at 0; the real malloc_trim is
found on this (glibc) machine and gives memory back. The process-level effect is
tests/soak/test_rss_churn.py's."""

from __future__ import annotations

import asyncio
import ctypes

import pytest

from dnsside.serving.heap import HeapTrimmer, find_trim
from dnsside.telemetry import metrics

pytestmark = pytest.mark.quick


def _mode(mode: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("dnsside_heap_trim_mode", {"mode": mode})


def test_changes_in_a_period_make_one_trim() -> None:
    async def run() -> list[int]:
        calls: list[int] = []
        done = asyncio.Event()

        def trim(pad: int) -> int:
            calls.append(pad)
            done.set()
            return 1

        trimmer = HeapTrimmer(0.05, trim)
        for _ in range(100):  # a burst of batches
            trimmer.changed()
        await asyncio.wait_for(done.wait(), 10)
        done.clear()
        trimmer.changed()  # a change after the trim: one more
        await asyncio.wait_for(done.wait(), 10)
        trimmer.stop()
        return calls

    assert asyncio.run(run()) == [0, 0]


def test_no_change_no_trim_and_zero_is_off() -> None:
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    async def run() -> tuple[bool, bool]:
        idle, off = HeapTrimmer(0.01, trim), HeapTrimmer(0, trim)
        off.changed()
        return idle.due, off.due

    assert asyncio.run(run()) == (False, False)
    assert calls == []
    assert _mode("off") == 1


def test_glibc_trim_is_found_and_runs() -> None:
    trim = find_trim()
    assert trim is not None, "this suite runs on glibc: malloc_trim must be found"
    blobs = [ctypes.create_string_buffer(4096) for _ in range(2000)]  # some heap to free
    del blobs[::2]
    assert trim(0) in (0, 1)  # 1: memory was released, 0: none could be
    HeapTrimmer(10.0)
    assert _mode("glibc") == 1
