"""A linked cluster's event budget (dnsside/sources/budget.py), with a clock of its own:
what passes at once, what is held and coalesced, what a list supersedes, and the
pacing of a watch that closes at once (dnsside/sources/pacing.py)."""

from __future__ import annotations

import asyncio
import random

import pytest

from dnsside.model.events import Delete, Kind, Upsert
from dnsside.model.linkerd import parse_slice
from dnsside.model.printable import printable
from dnsside.sources.budget import Bucket, Change, EventBudget, coalesce
from dnsside.sources.pacing import WATCH_LIVED, Backoff, Pacing
from testkit.flatnet import endpoint, endpoint_slice

pytestmark = pytest.mark.quick


def upsert(name: str, *ips: str) -> Upsert:
    return Upsert(parse_slice(endpoint_slice(name, "db", [endpoint(ip) for ip in ips]), "t"))


def test_a_bucket_refills_at_its_rate_up_to_its_burst_and_counts_debt() -> None:
    bucket = Bucket(rate=2.0, burst=4.0)
    assert bucket.take(4.0, now=0.0) and not bucket.take(1.0, now=0.0)
    assert bucket.take(1.0, now=0.5)  # half a second: one token back
    assert bucket.owe(3.0, now=0.5) == pytest.approx(1.5)  # 3 in debt: 1.5 s to pay
    bucket.refill(100.0)
    assert bucket.tokens == 4.0  # never past the burst


def test_coalescing_keeps_the_latest_state_of_each_object_in_its_place() -> None:
    held: dict[tuple[Kind, str, str], Change] = {}
    a1, b1, a2 = upsert("a", "10.0.0.1"), upsert("b", "10.0.0.2"), upsert("a", "10.0.0.3")
    gone = Delete(Kind.SLICE, "data", "b")
    assert coalesce(held, [a1, b1]) == 0
    assert coalesce(held, [a2, gone]) == 2
    assert list(held.values()) == [a2, gone]
    assert coalesce(held, [b1]) == 1 and list(held.values()) == [a2, b1]  # re-added


async def test_a_cluster_within_its_share_goes_at_once_and_past_it_is_held() -> None:
    now = [0.0]
    batches: list[list[Change]] = []

    async def put(batch: list[Change]) -> None:
        batches.append(batch)

    budget = EventBudget("north", 0.05, put, interval=0.01, clock=lambda: now[0])
    await budget.admit([upsert("a", "10.0.0.1")], 1)
    assert len(batches) == 1 and not budget.throttled
    budget.charge(0.5)  # that apply took half a second: far past 5 %
    for i in range(50):
        await budget.admit([upsert("a", f"10.0.1.{i}")], 1)
    assert len(batches) == 1 and budget.throttled and len(budget.held) == 1
    budget.superseded([Kind.SERVICE])  # a list of Services: slices stay held
    assert len(budget.held) == 1
    now[0] = 100.0  # the debt is paid: the held slice goes as one batch, its latest state
    await asyncio.wait_for(_until(lambda: len(batches) == 2), 5)
    assert batches[1] == [upsert("a", "10.0.1.49")]
    await asyncio.wait_for(_until(lambda: not budget.throttled), 5)  # nothing more: calm
    await budget.admit([upsert("a", "10.0.2.1")], 1)
    assert len(batches) == 3  # at once again
    budget.charge(1.0)
    await budget.admit([upsert("b", "10.0.3.1")], 1)
    budget.superseded([Kind.SLICE])  # a relist of slices: what was held is older
    assert not budget.held
    await budget.close()
    assert not budget.throttled


async def _until(check: object) -> None:
    assert callable(check)
    while not check():
        await asyncio.sleep(0.005)


def test_a_watch_that_neither_lived_nor_changed_anything_is_reopened_after_a_backoff() -> None:
    pacing = Pacing(backoff_base=0.5, backoff_cap=30.0, watch_timeout=300.0)
    backoff = Backoff(0.5, 30.0, random.Random(7))
    delays = [pacing.reopen_delay(backoff, False, 0.01) for _ in range(10)]
    assert all(0 < d <= 30.0 for d in delays[3:]) and max(delays) > 4, delays
    assert pacing.reopen_delay(backoff, True, 0.01) == 0.0  # a change: at once
    assert backoff.attempt == 0
    assert pacing.reopen_delay(backoff, False, 0.01) > 0
    assert pacing.reopen_delay(backoff, False, WATCH_LIVED) == 0.0  # it lived
    # A watch asked to end after one second that does so has lived its life.
    short = Pacing(watch_timeout=1.0)
    assert short.reopen_delay(backoff, False, 1.0) == 0.0


@pytest.mark.parametrize("text, shown", [
    ("plain words", "plain words"),
    ("a\nb", "a\\nb"),
    ("a\r\n2026-01-01 WARNING x", "a\\r\\n2026-01-01 WARNING x"),
    ("\x1b[2Kcleared", "\\x1b[2Kcleared"),
    ("line\u2028separator", "line\\u2028separator"),
    ("right\u202eleft", "right\\u202eleft"),
    ("ünïcödé 名前", "ünïcödé 名前"),
])
def test_printable_escapes_what_would_break_a_line_and_keeps_the_rest(text: str,
                                                                      shown: str) -> None:
    assert printable(text) == shown
    assert printable(printable(text)) == shown  # escaping twice changes nothing


def test_printable_cuts_a_long_text_and_says_so() -> None:
    assert printable("x" * 600, 512) == "x" * 512 + "…(88 more characters)"
