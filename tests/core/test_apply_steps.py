"""A big service's change applied in steps (issue 33, item 12): each step small, whatever
the service's size, and no step shows a query half of the change.

The server runs :meth:`Index.prepare` and :meth:`Index.apply_steps` with the event loop
free between two steps, so the longest step is the longest a query waits behind one
linked cluster's event. How long a step takes depends on the machine; how much Python
it runs does not: the steps are measured here in lines executed (``sys.settrace``), and
the longest must not grow with the service (it did: the whole change was one step).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from dnsside.core.build import make_index
from dnsside.core.index import Index, IndexOptions
from dnsside.dns.wire import Answer
from dnsside.model.events import (
    Event,
    Kind,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import parse_object, parse_remote_service, parse_slice
from dnsside.model.selectors import LabelSelector
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    local_objects,
    service,
)

SOA_IN = b"\x00\x06\x00\x01"  # the SOA holds the serial: a clock, not the answers
SELECTOR = LabelSelector(tuple(REMOTE_DISCOVERY_LABELS.items()))


def north_slice(pods: int, shift: int = 0) -> dict[str, Any]:
    """North's one slice of ``pods`` endpoints; ``shift`` moves every address."""
    eps = [endpoint(f"10.{100 + (n + shift) // 62500}.{(n + shift) // 250 % 250}."
                    f"{(n + shift) % 250 + 1}", f"big-{n}") for n in range(pods)]
    return endpoint_slice("big-1", "big", eps)


def flat_index(pods: int, mcs: bool = False) -> Index:
    """East, linked to north, whose own headless `big` (--flat-network) has ``pods`` pods
    in one slice, as bench/hostile_remote.py's flood sends it."""
    index = make_index(IndexOptions(cluster_name="east",
                                    mcs_zones=("clusterset.local.",) if mcs else ()))
    records = [r for r in map(parse_object, [*local_objects(), link("north")]) if r]
    index.apply([Replace(frozenset(Kind), tuple(records)), Synced()])
    big = parse_remote_service(service("big", labels=dict(REMOTE_DISCOVERY_LABELS)),
                               "test", "north", SELECTOR)
    assert big is not None
    index.apply([Remote("north", Replace(frozenset({Kind.SERVICE, Kind.SLICE}),
                                         (big, parse_slice(north_slice(pods))))),
                 RemoteStatus("north", RemoteState.SYNCED, "", "test")])
    assert len(index.global_services[("data", "big")].members) == pods
    return index


def moved(pods: int, shift: int) -> Event:
    return Remote("north", Upsert(parse_slice(north_slice(pods, shift))))


class Lines:
    """Lines of Python executed, counted while :meth:`step` runs one step."""

    def __init__(self) -> None:
        self.count = 0

    def trace(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self.count += 1
        return self.trace

    def step(self, steps: Iterator[object]) -> tuple[bool, int]:
        """Take one step: (whether there was one, lines it ran)."""
        self.count = 0
        sys.settrace(self.trace)
        try:
            next(steps)
            more = True
        except StopIteration:
            more = False
        finally:
            sys.settrace(None)
        return more, self.count


def step_lines(index: Index, event: Event) -> list[int]:
    """``event`` applied as the server applies it (Index.prepare's steps, then
    Index.apply_steps'): the lines of Python each apply step ran."""
    for _ in index.prepare([event]):
        pass
    lines, steps = Lines(), apply_steps(index, [event])
    counts: list[int] = []
    while True:
        more, count = lines.step(steps)
        counts.append(count)
        if not more:
            return counts


def longest_step(pods: int) -> tuple[int, int, int]:
    """Every address of a ``pods``-endpoint slice moved, applied as the server applies
    it (Index.prepare's steps, then Index.apply_steps'): (the lines of the longest apply
    step, of all apply steps together, the apply steps taken)."""
    index = flat_index(pods)
    counts = step_lines(index, moved(pods, 100_000))
    assert index.responder.answers[_pod_a(pods - 1)].body.endswith(
        bytes([10, 101, (pods - 1 + 100_000) // 250 % 250, (pods - 1 + 100_000) % 250 + 1]))
    return max(counts), sum(counts), len(counts)


def apply_steps(index: Index, events: list[Event]) -> Iterator[object]:
    """Index.apply_steps; on code before it, the one step Index.apply was (so that this
    test tells what it measures there too)."""
    stepped = getattr(index, "apply_steps", None)
    if stepped is not None:
        return iter(stepped(events))

    def at_once() -> Iterator[None]:
        index.apply(events)
        yield
    return at_once()


def _pod_a(n: int) -> bytes:
    """The question key of pod ``n``'s own name, A."""
    labels = [f"big-{n}", "north", "big", "data", "svc-global"]
    return b"".join(bytes([len(x)]) + x.encode() for x in labels) + b"\x00\x00\x01\x00\x01"


@pytest.mark.quick
def test_the_longest_step_of_a_big_change_does_not_grow_with_the_service() -> None:
    """12,000 endpoints all moved: no step runs more Python than with 6,000 (the aggregate
    answers are full at both sizes; every pass over the members is cut in steps of
    dnsside.core.steps.STEP), and the change takes more steps, each a small part of it.
    Before, the apply was one step, longer at 12,000 than at 6,000."""
    small, _, small_steps = longest_step(6_000)
    big, big_total, steps = longest_step(12_000)
    assert big <= 1.1 * small, (small, big)  # the longest step does not grow
    assert steps > small_steps  # the number of steps does
    assert big * 4 < big_total and steps >= 20, (big, big_total, steps)


def table(index: Index) -> dict[bytes, Answer]:
    return dict(index.responder.answers)


@pytest.mark.quick
@pytest.mark.parametrize("mcs", [False, True], ids=["svc-global", "and clusterset.local"])
def test_no_step_shows_half_a_change(mcs: bool) -> None:
    """Between any two steps of a 6,000-endpoint change (every address moved), the
    responder holds the service's answers as they were or as they end, never a mix; and
    they end as the same change applied at once makes them (byte for byte)."""
    pods = 6_000
    stepped, at_once = flat_index(pods, mcs), flat_index(pods, mcs)
    event = moved(pods, 50_000)
    before = table(stepped)
    seen = [table(stepped) for _ in stepped.prepare([event])]
    seen += [table(stepped) for _ in stepped.apply_steps([event])]
    after = table(stepped)
    assert len(seen) > 20 and after != before
    assert all(s in (before, after) for s in seen)  # the very answer objects
    at_once.apply([event])

    def wire(t: dict[bytes, Answer]) -> dict[bytes, tuple[bytes, bytes]]:
        return {k: (a.body, a.counts) for k, a in t.items() if not k.endswith(SOA_IN)}
    assert wire(after) == wire(table(at_once))
    assert stepped.responder.names.keys() == at_once.responder.names.keys()


@pytest.mark.quick
def test_a_batch_while_another_is_in_steps_is_refused() -> None:
    """The steps trust that nothing changes the index between two of them: a second batch
    meanwhile is a caller's mistake, told as one; once the first is through, it goes in."""
    index = flat_index(200)
    steps = index.apply_steps([moved(200, 1000)])
    next(steps)
    with pytest.raises(RuntimeError, match="one at a time"):
        index.apply([moved(200, 2000)])
    for _ in steps:
        pass
    assert index.apply([moved(200, 2000)]) == {("data", "big")}


@pytest.mark.quick
def test_a_big_slice_for_a_service_that_had_none_is_applied_in_small_steps() -> None:
    """North empties its 6,000-endpoint slice, then sends it again (or sends a new big
    Service's first slice): the service was not big meanwhile, so nothing was kept of it,
    yet the slice is screened ahead and applied in steps no longer than a change's."""
    pods = 6_000
    index = flat_index(pods)
    index.apply([moved(0, 0)])
    assert ("data", "big") not in index.tallies or not index.global_services[
        ("data", "big")].members
    counts = step_lines(index, moved(pods, 70_000))
    assert len(index.global_services[("data", "big")].members) == pods
    longest, _, _ = longest_step(pods)  # every address of a kept slice moved
    assert max(counts) <= 1.1 * longest, (max(counts), longest)


def tracked_after_change(pods: int) -> int:
    """The objects the cyclic collector tracks once a ``pods``-endpoint slice had every
    address moved (what the collector's full pass after the change scans), beyond what
    there was before the index."""
    gc.unfreeze()  # a freeze (a bulk load's) hides objects from the count
    gc.collect()
    before = len(gc.get_objects())
    index = flat_index(pods)
    index.apply([moved(pods, 100_000)])
    gc.unfreeze()
    gc.collect()
    count = len(gc.get_objects()) - before
    del index
    return count


@pytest.mark.quick
def test_a_changed_pod_leaves_three_objects_for_the_collector() -> None:
    """Each 12,000-endpoint change brings a full pass of the cyclic collector, which stalls
    every query for as long as it scans (issue 33 item 12): a pod's member, its wire form
    and its answer, and nothing more a pod (its answers were a tuple of pairs beside the
    wire: five objects a pod). Past 3,000 pods the SRV answers are full: what grows is
    what each pod costs."""
    tracked_after_change(100)  # whatever a first index imports or caches, counted apart
    per_pod = (tracked_after_change(5000) - tracked_after_change(3000)) / 2000
    assert per_pod <= 3.0, per_pod
