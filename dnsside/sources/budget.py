"""What one linked cluster's *rate* of watch events may cost (``--flat-network``).

The caps (:mod:`dnsside.sources.limits`) bound sizes and times; they do not stop an API
server that re-sends a slice as fast as dnsside reads it. Each event costs twice: its
line is decoded and parsed (in proportion to its endpoints), and its batch is applied
to the index, which rebuilds and re-encodes every global service it touches (280 ms for
a 12,000-endpoint slice re-sent, on the test machine). The second cost depends on what
the index holds, so it is not guessed: the index measures it. So a cluster gets an
:class:`EventBudget` with two token buckets:

- *index time*: the seconds the index spent applying the cluster's batches (the
  source is told after each, :meth:`EventBudget.charge`) may be
  ``--flat-network-index-share`` of the time (5 %: 50 ms a second), with a burst of
  :data:`BURST_SECONDS` of it. While the cluster is within it, its batches go to the
  index at once. Past it the cluster is **throttled**: its events are held and
  coalesced, the latest state of each object winning (an upsert after a delete of the
  same object replaces it, and the other way round), and the held ones are applied as
  one batch once the budget allows it, a second apart at least and :data:`MAX_WAIT`
  seconds at most. So however fast it sends and however big the services
  it touches, it takes its share of the event loop (give or take one batch) and no
  more; what it pays is freshness, seconds.
- *reads*: the lines of its watch streams and the endpoints they carry,
  :data:`READ_ENDPOINTS_PER_SECOND` a second (a burst of one second's worth): past
  that, its stream is read later (the reader waits; TCP's flow control holds the server
  back), so decoding its lines costs a bounded share too.

Told once when throttling starts and once when it stops (log lines, and
``dnsside_remote_throttled{cluster}``), every held event counted
(``dnsside_remote_throttled_events_total{cluster}``).

The subtle point: the coalescing must never reorder an object's states. While
throttled, *every* event of the cluster is held (none goes around the queue of held
ones), it leaves throttling only once nothing is held, and a list (``Replace``) that
supersedes held events of its kinds drops them first (:meth:`EventBudget.superseded`).
The pure part, :class:`Bucket` and :func:`coalesce`, reads no clock of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from dnsside.model.events import Delete, Kind, Upsert
from dnsside.model.linkerd import SliceRecord
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.remote")

READ_ENDPOINTS_PER_SECOND = 20_000  # lines and endpoints: about 40 ms of decoding a second
BURST_SECONDS = 4.0  # the index-time bucket holds this many seconds of the share
MAX_WAIT = 20.0  # seconds a throttled cluster's batch waits at most (its debt's floor)
FLUSH_INTERVAL = 1.0  # seconds between two batches of a throttled cluster

Change = Upsert | Delete
ChangeKey = tuple[Kind, str, str]


@dataclass(slots=True)
class Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` held; the clock is the
    caller's (``now``, in seconds)."""

    rate: float
    burst: float
    tokens: float = 0.0
    at: float | None = None  # when it was last refilled

    def refill(self, now: float) -> None:
        if self.at is None:
            self.tokens = self.burst
        else:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self, cost: float, now: float) -> bool:
        """Take ``cost`` tokens if there are that many."""
        self.refill(now)
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True

    def owe(self, cost: float, now: float) -> float:
        """Take ``cost`` tokens, into debt if need be: the seconds until the debt is paid
        (0 when there was enough)."""
        self.refill(now)
        self.tokens -= cost
        return max(0.0, -self.tokens / self.rate)


def key(change: Change) -> ChangeKey:
    if isinstance(change, Delete):
        return change.kind, change.namespace, change.name
    record = change.record
    return Kind.of(record), record.namespace, record.name


def coalesce(held: dict[ChangeKey, Change], changes: Iterable[Change]) -> int:
    """Add ``changes`` to ``held``, the latest of each object winning (an object keeps its
    place); returns how many replaced one already held."""
    replaced = 0
    for change in changes:
        k = key(change)
        replaced += k in held
        held[k] = change
    return replaced


def endpoints(changes: Iterable[Change]) -> int:
    return sum(len(c.record.endpoints) for c in changes
               if isinstance(c, Upsert) and isinstance(c.record, SliceRecord))


class EventBudget:
    """One linked cluster's budget of watch events (see the module's docstring); ``put``
    hands a batch on to the index's queue."""

    def __init__(self, cluster: str, share: float,
                 put: Callable[[list[Change]], Awaitable[None]], *,
                 read_rate: float = READ_ENDPOINTS_PER_SECOND,
                 interval: float = FLUSH_INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 notify: Callable[[bool], Awaitable[None]] | None = None) -> None:
        self.cluster = cluster
        self.share = share
        self.applies = Bucket(share, share * BURST_SECONDS)  # seconds of index time
        self.reads = Bucket(read_rate, read_rate)
        self.put = put
        self.interval = interval
        self.clock = clock
        self.notify = notify  # told when throttling starts (True) and stops (False)
        self.held: dict[ChangeKey, Change] = {}
        self.flusher: asyncio.Task[None] | None = None
        self.throttled_events = 0  # held since throttling started
        self.batches = 0  # batches applied since throttling started

    @property
    def throttled(self) -> bool:
        return self.flusher is not None

    async def admit(self, changes: list[Change], lines: int = 0) -> None:
        """Hand ``changes`` (of ``lines`` watch lines read) on now, or hold them; return once
        the reader may read on."""
        now = self.clock()
        wait = self.reads.owe(lines + endpoints(changes), now)
        self.applies.refill(now)
        if not changes:
            pass  # lines that changed nothing (bookmarks, ignored events): read, paced
        elif not self.throttled and self.applies.tokens > 0:
            await self.put(changes)
        else:
            await self.hold(changes)
        if wait > 0:
            await asyncio.sleep(wait)

    async def hold(self, changes: list[Change]) -> None:
        started = not self.throttled
        if started:
            self.throttled_events = self.batches = 0
            metrics.REMOTE_THROTTLED.labels(cluster=self.cluster).set(1)
            log.warning(
                "cluster %s: flat network: applying its watch events takes more than "
                "--flat-network-index-share (%g%% of the time): throttled: they are coalesced "
                "(the latest state of each object) and applied as its share allows, a second "
                "apart at least, so its answers lag; the other clusters are not affected",
                self.cluster, self.share * 100)
            self.flusher = asyncio.create_task(self._flush(),
                                               name=f"flat-network-{self.cluster}-budget")
        coalesce(self.held, changes)
        self.throttled_events += len(changes)
        metrics.REMOTE_THROTTLED_EVENTS.labels(cluster=self.cluster).inc(len(changes))
        if started and self.notify is not None:
            await self.notify(True)

    def charge(self, seconds: float) -> None:
        """The index spent ``seconds`` applying a batch of this cluster's events. The debt
        stops at :data:`MAX_WAIT` seconds of the share: a throttled cluster's batches are
        that far apart at most, so its lag is bounded, and its share is kept as long as
        one batch costs less than that much (a second at the default 5 %)."""
        self.applies.owe(seconds, self.clock())
        self.applies.tokens = max(self.applies.tokens, -self.share * MAX_WAIT)

    def superseded(self, kinds: Iterable[Kind]) -> None:
        """A complete list of ``kinds`` follows: what is held of them is older, dropped."""
        gone = frozenset(kinds)
        for k in [k for k in self.held if k[0] in gone]:
            del self.held[k]

    async def _flush(self) -> None:
        """While throttled: the held events as one batch when the budget allows, a second
        apart at least; an interval with none, once the debt is paid, ends it (so that the
        next change, applied at once, does not put it straight back)."""
        try:
            while True:
                await asyncio.sleep(self.interval)
                self.applies.refill(self.clock())
                if self.applies.tokens < 0:  # in debt: wait until it is paid
                    await asyncio.sleep(-self.applies.tokens / self.share)
                if not self.held:
                    break
                batch, self.held = list(self.held.values()), {}
                self.batches += 1
                await self.put(batch)
        finally:
            self.flusher = None
        metrics.REMOTE_THROTTLED.labels(cluster=self.cluster).set(0)
        log.info("cluster %s: flat network: no longer throttled (%d events were applied in "
                 "%d batches)", self.cluster, self.throttled_events, self.batches)
        if self.notify is not None:
            await self.notify(False)

    async def close(self) -> None:
        """The cluster's watch ended (its Link changed or went): nothing more is applied."""
        if self.flusher is not None:
            self.flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.flusher
            self.flusher = None  # (a task cancelled before it ran never reached its finally)
        self.held.clear()
        with contextlib.suppress(KeyError):
            metrics.REMOTE_THROTTLED.remove(self.cluster)


__all__ = ["FLUSH_INTERVAL", "MAX_WAIT", "READ_ENDPOINTS_PER_SECOND", "Bucket", "EventBudget",
           "coalesce"]
