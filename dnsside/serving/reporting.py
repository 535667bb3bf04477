"""What the index learnt, as log lines and metrics: the index's observer in a server.

The index is pure: it hands an :class:`~dnsside.core.index.IndexReport` to its observer
after every batch and knows nothing of logging or Prometheus. This is that
observer for ``dnsside serve`` and ``dnsside explain`` (``check --dns`` builds an
index without one, so its own output is all a user sees). It reads the index
through its :class:`~dnsside.core.view.ReportView` only.

Metric label sets must follow the clusters. A cluster
that is gone (no member, nothing left out) has its series removed, or a
cluster-churning installation would export every cluster it ever saw; a
cluster still present keeps its zeros (``dnsside_orphaned_mirrors{cluster}``
back to 0 after a relink is the signal that the orphans are gone).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from dnsside.core.diagnosis import ConfigWarning, Exclusion
from dnsside.core.index import IndexReport
from dnsside.core.locality import Spill
from dnsside.core.view import ReportView
from dnsside.model.printable import printable
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.index")  # where operators have always found these lines
_TOLD_CHARACTERS = 64 * 1024  # a notice listing many members is long, never this long


class IndexReporter:
    """Logs every notice once and keeps the index's gauges in step with it."""

    def __init__(self) -> None:
        self._member_series: set[tuple[str, str]] = set()
        self._excluded_series: dict[Exclusion, set[str]] = {e: set() for e in Exclusion}
        self._unsafe_series: set[tuple[str, str]] = set()
        # What the Link and warning gauges last showed: most batches change neither.
        self._links_shown: tuple[object, ...] | None = None
        self._warnings_shown: object = None
        # cluster: (synced, credentials valid, TLS weakened, capped)
        self._remotes_shown: Mapping[str, tuple[int, int, int, int]] = {}

    def __call__(self, index: ReportView, report: IndexReport) -> None:
        if report.synced:  # the line tests, scripts and operators wait for
            log.info("%s", printable(synced_line(index), _TOLD_CHARACTERS))
        for told in report.told:
            # A notice names objects, and a linked cluster (or the mirrors Linkerd copies
            # from it) chose their names: one line each, whatever they hold.
            (log.warning if told.notice.warning else log.info)(
                "%s", printable(told.text, _TOLD_CHARACTERS))
        metrics.INDEX_UPDATE_SECONDS.observe(report.seconds)
        self._links(index)
        if index.flat.status or self._remotes_shown:
            self._remotes(index)
        if report.changed:
            metrics.GLOBAL_SERVICES.set(len(index.global_services))
            self._members(index)
            self._exclusions(index)
            self._locality(index)
        if index.synced and index.warnings is not self._warnings_shown:
            self._warnings_shown = index.warnings  # a new dict after every (re)sync
            for warning in ConfigWarning:
                metrics.CONFIG_WARNINGS.labels(warning=warning.value).set(
                    1 if warning in index.warnings else 0)

    def _links(self, index: ReportView) -> None:
        links = index.links
        refused = links.refused_counts()
        state = (links.readable, links.watch_down, links.complete_at, tuple(refused.values()))
        if links.readable is None or state == self._links_shown:
            return
        self._links_shown = state
        for why, n in refused.items():
            metrics.LINKS_REFUSED.labels(reason=why.value).set(n)
        metrics.LINKS_READABLE.set(1 if links.readable else 0)
        metrics.LINKS_WATCH_UP.set(1 if links.readable and not links.watch_down else 0)
        if links.readable:
            metrics.LINKS_LISTED.set(links.complete_at)

    def _remotes(self, index: ReportView) -> None:
        """--flat-network: a synced, a credentials, a TLS-weakened and a capped gauge per
        linked cluster watched directly; a deleted Link takes its series with it."""
        shown = index.flat.gauges()
        for cluster in shown:
            if self._remotes_shown.get(cluster) != shown[cluster]:
                metrics.REMOTE_SYNCED.labels(cluster=cluster).set(shown[cluster][0])
                metrics.REMOTE_CREDENTIALS_VALID.labels(cluster=cluster).set(shown[cluster][1])
                metrics.REMOTE_TLS_WEAKENED.labels(cluster=cluster).set(shown[cluster][2])
                metrics.REMOTE_CAPPED.labels(cluster=cluster).set(shown[cluster][3])
        for cluster in self._remotes_shown.keys() - shown.keys():
            for gauge in (metrics.REMOTE_SYNCED, metrics.REMOTE_CREDENTIALS_VALID,
                          metrics.REMOTE_TLS_WEAKENED, metrics.REMOTE_CAPPED):
                with contextlib.suppress(KeyError):
                    gauge.remove(cluster)
        self._remotes_shown = shown

    def _members(self, index: ReportView) -> None:
        now: set[tuple[str, str]] = set()
        for (cluster, ready), n in index.counts.member_counts().items():
            labels = (cluster, str(ready).lower())
            metrics.MEMBERS.labels(*labels).set(n)
            now.add(labels)
        for labels in self._member_series - now:
            with contextlib.suppress(KeyError):
                metrics.MEMBERS.remove(*labels)
        self._member_series = now

    def _locality(self, index: ReportView) -> None:
        """Both reasons always shown, 0 included: an alert needs the series to exist."""
        spilled = index.counts.spilled_counts()
        for reason in Spill:
            metrics.LOCALITY_SPILLED.labels(reason=reason.value).set(spilled.get(reason, 0))
        metrics.LOCALITY_UNKNOWN.set(index.counts.unknown_localities())

    def _exclusions(self, index: ReportView) -> None:
        for why, gauge in ((Exclusion.ORPHANED, metrics.ORPHANED_MIRRORS),
                           (Exclusion.NAME_CLASH, metrics.NAME_CLASHES),
                           (Exclusion.INVALID_NAME, metrics.INVALID_NAMES)):
            counts = index.counts.exclusion_counts(why)
            for cluster, n in counts.items():
                gauge.labels(cluster=cluster).set(n)
            for cluster in self._excluded_series[why] - counts.keys():
                with contextlib.suppress(KeyError):
                    gauge.remove(cluster)
            self._excluded_series[why] = set(counts)
        unsafe = index.counts.unsafe_counts()
        for (cluster, reason), n in unsafe.items():
            metrics.UNSAFE_ADDRESSES.labels(cluster=cluster, reason=reason).set(n)
        for labels in self._unsafe_series - unsafe.keys():
            with contextlib.suppress(KeyError):
                metrics.UNSAFE_ADDRESSES.remove(*labels)
        self._unsafe_series = set(unsafe)


def synced_line(index: ReportView) -> str:
    """The initial sync, said once: what the index serves and how far its Links go."""
    clusters = ", ".join(sorted(index.counts.clusters())) or "none"
    return (f"initial sync done: {len(index.global_services)} global services, "
            f"{index.counts.members()} members, clusters {clusters}; "
            f"links {index.links.describe()}")


__all__ = ["IndexReporter", "synced_line"]
