"""A linked cluster watched directly (``--flat-network``): which of its objects count.

On a flat network the pods of a linked cluster can be reached by their own
addresses, and dnsside reads them from that cluster's API with the Link's own
credentials, as Linkerd's destination controller does for remote discovery. A
remote Service is served directly when it is headless, matches the Link's
``remoteDiscoverySelector`` (empty selects nothing, as in Linkerd) and is not
itself one of Linkerd's mirrors in that cluster; its slices (or v1 Endpoints)
then give one member per pod.

The one tricky thing: the remote objects share names with local ones (the same
StatefulSet runs in both clusters), so each linked cluster has a
:class:`RemoteCluster` of its own, never mixed with the local tables, and a
Service that stops being selected is simply forgotten (the source turns it into
a deletion), while its slices stay: it may be selected again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from dnsside.core.tables import Key, Slices, Table
from dnsside.model.events import (
    Delete,
    Kind,
    Replace,
    Upsert,
)
from dnsside.model.linkerd import (
    MIRRORED_SERVICE,
    LabelSelector,
    Record,
    Role,
    ServiceRecord,
    SliceRecord,
    parse_service,
)


def parse_remote_service(obj: Mapping[str, Any], where: str, cluster: str,
                         selector: LabelSelector) -> ServiceRecord | None:
    """The record of a linked cluster's Service served directly, or None when it is not
    one (not headless, not selected, a mirror there): for the source, a deletion.
    Raises ObjectError, like every parser, for a malformed object."""
    record = parse_service(obj, where)
    if not record.headless or record.role is not Role.LOCAL:
        return None
    labels = obj["metadata"].get("labels") or {}  # parse_service checked its shape
    if labels.get(MIRRORED_SERVICE) == "true" or not selector.matches(labels):
        return None
    return replace(record, role=Role.FLAT, cluster=cluster, exported=False)


class RemoteCluster:
    """What one linked cluster's API says: the selected headless Services and every slice.

    ``apply`` takes the cluster's events and returns the global services they touch.
    The slices of a Service that is not selected are kept (they are few next to the
    local ones, and the Service may become selected by a label edit); only a selected
    Service makes them count.
    """

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.services: Table[ServiceRecord] = Table()
        self._slices: Slices[SliceRecord] = Slices()
        self.slices = self._slices.records
        self.synced = False  # a complete list arrived: its members count

    def keys(self) -> Iterator[Key]:
        """The global services this cluster serves directly."""
        return iter(self.services)

    def service(self, key: Key) -> ServiceRecord | None:
        found: ServiceRecord | None = self.services.get(key)
        return found

    def slices_of(self, key: Key) -> list[SliceRecord]:
        return self._slices.of(*key)

    def apply(self, event: Upsert | Delete | Replace) -> set[Key]:
        dirty: set[Key] = set()
        if isinstance(event, Upsert):
            self._upsert(event.record, dirty)
        elif isinstance(event, Delete):
            self._delete(event.kind, (event.namespace, event.name), dirty)
        else:
            self._replace(event.kinds, event.records, dirty)
            self.synced = True
        return dirty

    def _replace(self, kinds: frozenset[Kind], records: Iterable[Record], dirty: set[Key]
                 ) -> None:
        incoming: dict[Kind, dict[Key, Record]] = {Kind.SERVICE: {}, Kind.SLICE: {}}
        for r in records:
            if not isinstance(r, ServiceRecord | SliceRecord):
                continue
            incoming[Kind.of(r)][(r.namespace, r.name)] = r
        for kind, table in ((Kind.SERVICE, self.services), (Kind.SLICE, self.slices)):
            if kind not in kinds:
                continue
            new = incoming[kind]
            for key in [k for k in table if k not in new]:
                self._delete(kind, key, dirty)
            for record in new.values():
                if table.get((record.namespace, record.name)) != record:
                    self._upsert(record, dirty)

    def _upsert(self, record: Record, dirty: set[Key]) -> None:
        key = (record.namespace, record.name)
        if isinstance(record, ServiceRecord):
            if self.services.get(key) != record:
                self.services[key] = record
                dirty.add(key)
        elif isinstance(record, SliceRecord) and self.slices.get(key) != record:
            old = self._slices.put(record)
            for owner in {(r.namespace, r.service_name) for r in (old, record) if r}:
                if owner in self.services:
                    dirty.add(owner)

    def _delete(self, kind: Kind, key: Key, dirty: set[Key]) -> None:
        if kind is Kind.SERVICE:
            if self.services.pop(key, None) is not None:
                dirty.add(key)
            return
        old = self._slices.pop(key)
        if old is not None and (old.namespace, old.service_name) in self.services:
            dirty.add((old.namespace, old.service_name))


__all__ = ["RemoteCluster", "parse_remote_service"]
