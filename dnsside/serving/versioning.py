"""The clock of the zones' versions: when the answers changed, cut a new version, number
it by the second, and tell the secondaries.

A burst of changes (a rollout, a relist) becomes one version: the cut waits a tenth of
a second after the first change, and never comes twice in one second, because the
serial is the second of the cut (:func:`dnsside.dns.versions.next_serial`). A gateway
that dies is thus in a new version a tenth of a second after the index dropped it, unless
a version was already cut in that second; then at the start of the next.
"""

from __future__ import annotations

import asyncio
import logging
import time

from dnsside.core.publishing import Publisher
from dnsside.dns.versions import cut_not_before, next_serial
from dnsside.serving.notify import Notifier
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.transfer")

COALESCE = 0.1  # seconds a cut waits after the first change, for the rest of a burst


class Versioning:
    """Cuts the zones' versions through the index's publisher, and notifies."""

    def __init__(self, publisher: Publisher, notifier: Notifier | None = None) -> None:
        self.publisher = publisher
        self.notifier = notifier
        # The second the index was made: no version is numbered by it.
        self.last = publisher.serial
        self.first_cut = False  # a version exists: transfers and NOTIFYs can start
        self._timer: asyncio.TimerHandle | None = None
        self._clock_behind = False
        metrics.ZONE_SERIAL.set(self.last)

    def changed(self) -> None:
        """The index applied a batch: cut a version soon if the answers changed. The
        first version is the index's own, cut at the initial sync before the first answer
        (:meth:`Index.apply`): it is told here, once."""
        if not self.first_cut and self.publisher.cut_serial is not None:
            self._told(self.publisher.cut_serial)
        if self._timer is not None or not self.publisher.pending:
            return
        now = time.time()
        delay = max(COALESCE, cut_not_before(self.last, now) - now)
        self._timer = asyncio.get_running_loop().call_later(delay, self.cut)

    def cut(self) -> None:
        self._timer = None
        if not self.publisher.pending:
            return
        now = time.time()
        if cut_not_before(self.last, now) > now:  # the clock's second has not moved on yet
            self._timer = asyncio.get_running_loop().call_later(
                cut_not_before(self.last, now) - now, self.cut)
            return
        serial = next_serial(self.last, now)
        behind = serial != int(now)
        if behind != self._clock_behind:
            self._clock_behind = behind
            if behind:
                log.warning("zone serial: the clock (%d) is behind the last serial (%d): "
                            "counting on by one until it catches up", int(now), self.last)
            else:
                log.info("zone serial: the clock caught up; serials are seconds again")
        self.publisher.cut(serial)
        self._told(serial)

    def _told(self, serial: int) -> None:
        """Version ``serial`` was cut: the gauges, the log, the NOTIFYs."""
        self.last = serial
        metrics.ZONE_SERIAL.set(serial)
        versions = self.publisher.versions.values()
        metrics.ZONE_HISTORY_VERSIONS.set(sum(v.history_versions for v in versions))
        metrics.ZONE_HISTORY_RECORDS.set(sum(v.history_records for v in versions))
        if self.first_cut:
            log.debug("zone version %d cut", serial)
        else:
            self.first_cut = True
            log.info("zone version %d cut at the initial sync, before the first answer: the "
                     "first of this process; the serial is the second of each new version",
                     serial)
        if self.notifier is not None:
            self.notifier.notify(serial)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
