"""What one linked cluster's API server may cost dnsside (``--flat-network``): the caps.

A linked cluster's API server is someone else's, and dnsside reads it the way it
reads its own: pages of lists, lines of watches. Whatever it sends is read with
a bound, so a hostile or broken one costs its own cluster and nothing more:
:class:`Limits` holds the caps the flags set (bytes of one object or watch
line, bytes of one list page, seconds of one list or of one watch event,
endpoints and objects kept, and which namespaces count), and a :class:`Gate`
applies them to one cluster's objects as they are read, before any is kept.
A cap that is hit ends the request with :class:`CapExceeded`: the cluster's
last complete state stands, and it is said once (``RemoteState.CAPPED``).

The gate is the cluster's :class:`~dnsside.sources.trust.Trust`: everything the
reflector does differently for a linked cluster's API is said here (its caps, its
namespaces, its :class:`~dnsside.sources.budget.EventBudget`, its events wrapped as
that cluster's, its retries at debug: its state has a notice of its own).

A gate counts what the cluster *would* hold, by object,
so a MODIFIED event of an object already counted replaces its count instead
of adding to it, and a list is counted afresh (a relist replaces what the
previous one held) against what the other resource holds (Services and
slices share the caps). The local cluster's API has no gate: it is trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dnsside.kubeapi.caps import (  # re-exported: the caps the sources apply
    BYTES as BYTES,
)
from dnsside.kubeapi.caps import (
    CAPS as CAPS,
)
from dnsside.kubeapi.caps import (
    ENDPOINTS as ENDPOINTS,
)
from dnsside.kubeapi.caps import (
    OBJECTS as OBJECTS,
)
from dnsside.kubeapi.caps import (
    TIME as TIME,
)
from dnsside.kubeapi.caps import (
    CapExceeded as CapExceeded,
)
from dnsside.kubeapi.caps import (
    Limits as Limits,
)
from dnsside.kubeapi.client import Forbidden, Unauthorized
from dnsside.model.events import Delete, Event, Kind, Remote, Replace, Upsert
from dnsside.model.linkerd import Record, SliceRecord
from dnsside.model.printable import printable
from dnsside.sources.budget import EventBudget
from dnsside.sources.trust import NO_NAME, NOT_OBJECT, UNKNOWN_TYPE, Change, Listing, Put
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.remote")

@dataclass(slots=True)
class EndpointsByObject:
    """Objects of one kind, by (namespace, name), with their endpoints, and the sum."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    endpoints: int = 0

    def put(self, key: tuple[str, str], endpoints: int) -> None:
        self.endpoints += endpoints - self.counts.get(key, 0)
        self.counts[key] = endpoints

    def pop(self, key: tuple[str, str]) -> None:
        self.endpoints -= self.counts.pop(key, 0)


def _endpoints(record: Record) -> int:
    return len(record.endpoints) if isinstance(record, SliceRecord) else 0


_TOLD_MAX = 1000  # distinct refusals a linked cluster gets a warning line for

# Why a watch event or list item of a linked cluster is ignored: the fixed values of
# dnsside_remote_ignored_objects_total's reason label.
IGNORED_REASONS = ("invalid", "namespace", UNKNOWN_TYPE, NO_NAME, NOT_OBJECT)


class _Listing:
    """One list of one resource of the cluster, counted afresh (it replaces what the
    previous list of it held) against what the other resource holds."""

    def __init__(self, gate: Gate, kind: Kind) -> None:
        self.gate = gate
        self.kind = kind
        self.tally = EndpointsByObject()

    def keep(self, record: Record, where: str) -> bool:
        return self.gate.keep(self.kind, self.tally, record, where)

    def forget(self, records: Sequence[Record]) -> None:
        for record in records:
            self.tally.pop((record.namespace, record.name))

    def complete(self) -> None:
        self.gate.listed(self.kind, self.tally)


class Gate:
    """What one linked cluster brings in, and how: its objects in the namespaces served,
    within its caps and its event budget (the reflector's
    :class:`~dnsside.sources.trust.Trust`). One per connection to the cluster: its lists
    count afresh; the budget is the cluster's, across connections."""

    retry_level = logging.DEBUG  # its state is told once (RemoteStatus), not each retry

    def __init__(self, cluster: str, limits: Limits, budget: EventBudget) -> None:
        self.cluster = cluster
        self.limits = limits
        self.budget = budget
        self.label = f"cluster {cluster}: "
        self.held: dict[Kind, EndpointsByObject] = {}
        self._ignored: set[str] = set()  # namespaces told about once
        self._refused: set[str] = set()  # objects refused as malformed, told about once
        self._ignored_events: set[str] = set()  # reasons of ignored events, told about once

    @property
    def time_cap(self) -> float:
        return self.limits.timeout

    @property
    def page_bytes(self) -> int:
        return self.limits.page_bytes

    @property
    def line_bytes(self) -> int:
        return self.limits.max_object_bytes

    def gives_up(self, exc: Exception) -> bool:
        """A list is not retried on its credentials rejected, a cap or a body that is not
        what the API sends: the cluster's state says it (dnsside.sources.linked)."""
        return isinstance(exc, Unauthorized | Forbidden | ValueError)  # (CapExceeded too)

    def overdue(self, what: str) -> Exception:
        return CapExceeded(TIME, f"{what} after {self.limits.timeout:g} s "
                           "(--flat-network-timeout)")

    def wrap(self, batch: Sequence[Event]) -> list[Event]:
        """Its objects' events as the cluster's (``Remote``): the index keeps them apart."""
        return [Remote(self.cluster, e) if isinstance(e, Upsert | Delete | Replace) else e
                for e in batch]

    async def deliver(self, changes: list[Change], lines: int, put: Put) -> None:
        await self.budget.admit(changes, lines)  # (the budget puts them as the cluster's)

    def superseded(self, kinds: Iterable[Kind]) -> None:
        self.budget.superseded(kinds)

    def refused(self, where: str, message: str, note: str = "") -> None:
        """An object the cluster sent that cannot be served (a name that is no DNS label, a
        malformed field): counted every time, told once per object and reason, not at
        every list and watch event that repeats it (bounded: a hostile API may send
        endless distinct ones, and the count still says so). The same line whether a list
        or a watch event brought it, so no ``note``."""
        metrics.REMOTE_IGNORED.labels(cluster=self.cluster, reason="invalid").inc()
        message = printable(message)  # its names are the cluster's: no newline reaches the log
        what = message.removeprefix(where + ": ")  # the same object by list or by watch
        if what in self._refused or len(self._refused) >= _TOLD_MAX:
            log.debug("skipping %s", message)
            return
        self._refused.add(what)
        log.warning("skipping %s (told once; counted in dnsside_remote_ignored_objects_total)",
                    message)

    def ignored(self, where: str, reason: str, what: str) -> None:
        """A watch event or list item the cluster sent that means nothing (``reason``, one of
        :data:`IGNORED_REASONS`): counted every time, told once per reason, however many
        come (one line each was 50 MB of log a second)."""
        metrics.REMOTE_IGNORED.labels(cluster=self.cluster, reason=reason).inc()
        if reason in self._ignored_events:
            return
        self._ignored_events.add(reason)
        log.warning("%s: skipping %s (told once per cluster and reason; counted in "
                    "dnsside_remote_ignored_objects_total{reason=%r})", where, printable(what),
                    reason)

    def listing(self, kind: Kind) -> Listing:
        """A fresh count for a list of ``kind`` (complete, it is what the cluster holds)."""
        return _Listing(self, kind)

    def listed(self, kind: Kind, tally: EndpointsByObject) -> None:
        """A list is complete: it is what the cluster holds of ``kind`` now."""
        self.held[kind] = tally

    def keep(self, kind: Kind, tally: EndpointsByObject, record: Record, where: str) -> bool:
        """Whether a listed object counts (False: not in a namespace served); raises
        CapExceeded when it would take the cluster past a cap."""
        if not self.served(record.namespace, where):
            return False
        tally.put((record.namespace, record.name), _endpoints(record))
        self.check(kind, tally, where)
        return True

    def admits(self, kind: Kind, event: Change, where: str) -> bool:
        """Whether a watch event counts, as :meth:`keep` for a list."""
        if not self.served(event.namespace if isinstance(event, Delete)
                           else event.record.namespace, where):
            return False
        tally = self.held.setdefault(kind, EndpointsByObject())
        if isinstance(event, Delete):
            tally.pop((event.namespace, event.name))
            return True
        record = event.record
        tally.put((record.namespace, record.name), _endpoints(record))
        self.check(kind, tally, where)
        return True

    def check(self, kind: Kind, tally: EndpointsByObject, where: str) -> None:
        others = [t for k, t in self.held.items() if k is not kind]
        objects = len(tally.counts) + sum(len(t.counts) for t in others)
        endpoints = tally.endpoints + sum(t.endpoints for t in others)
        limits = self.limits
        if objects > limits.max_objects:
            raise CapExceeded(OBJECTS, (
                f"{where}: more than {limits.max_objects} objects (Services and "
                "EndpointSlices) in the cluster (--flat-network-max-objects)"))
        if endpoints > limits.max_endpoints:
            raise CapExceeded(ENDPOINTS, (
                f"{where}: more than {limits.max_endpoints} endpoints in the cluster "
                "(--flat-network-max-endpoints)"))

    def served(self, namespace: str, where: str) -> bool:
        """Whether objects of ``namespace`` are served from this cluster; the first one
        of a namespace that is not is logged once and each one counted."""
        allowed = self.limits.namespaces
        if not allowed or namespace in allowed:
            return True
        metrics.REMOTE_IGNORED.labels(cluster=self.cluster, reason="namespace").inc()
        if namespace not in self._ignored and len(self._ignored) < 100:
            self._ignored.add(namespace)
            log.warning("%s: ignoring its objects in namespace %r: not one of "
                        "--flat-network-namespaces (%s)", where, namespace[:63],
                        ", ".join(sorted(allowed)))
        return False


__all__ = ["BYTES", "CAPS", "ENDPOINTS", "IGNORED_REASONS", "NOT_OBJECT", "NO_NAME", "OBJECTS",
           "TIME", "UNKNOWN_TYPE", "CapExceeded", "EndpointsByObject", "Gate", "Limits"]
