"""One cluster's Services and EndpointSlices, and the global services each change touches.

The index keeps one :class:`Store` for the local cluster and, under ``--flat-network``,
one per linked cluster watched directly (:class:`~dnsside.core.remotes.RemoteCluster`):
both apply an Upsert, a Delete or a Replace the same way, here. The index dispatches an
event once, by its type: a local one to its handler (:data:`dnsside.core.index.HANDLERS`),
which calls the store's method for it; a linked cluster's through :data:`OBJECT_EVENTS`.

The subtle part is which global service an object belongs to: a slice belongs to
whatever its Service belongs to, and a Service can change its mind (an annotation
edit, a mirror that becomes a plain Service), so every update works out the key of
the old *and* the new version, and both are rebuilt. :meth:`Store.key_of` says what a
Service belongs to: for the local cluster the global service it is the original or a
mirror of, for a linked cluster its own name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dnsside.core.tables import Key, Names, Slices, Table, add_name, remove_name
from dnsside.model.events import Delete, Kind, Replace, Upsert
from dnsside.model.linkerd import Record, Role, ServiceRecord, SliceRecord


class Store:
    """Services and slices of one cluster's API, by (namespace, name)."""

    def __init__(self) -> None:
        self.services: Table[ServiceRecord] = Table()
        self._slices: Slices[SliceRecord] = Slices()
        self.slices = self._slices.records  # by (namespace, name)
        self.slices_by_service = self._slices.by_service  # a Service's slice names

    def key_of(self, svc: ServiceRecord | None) -> Key | None:
        """The global service ``svc`` belongs to, if any."""
        if svc is None or svc.role is Role.IGNORED or not svc.original:
            return None
        return (svc.namespace, svc.original)

    def slices_of(self, namespace: str, service: str) -> list[SliceRecord]:
        """The slices of Service ``namespace/service``, by name."""
        return self._slices.of(namespace, service)

    def upsert(self, record: Record, dirty: set[Key]) -> None:
        """Hold ``record``, adding to ``dirty`` the global services it touches. Link records
        are not this table's: the caller hands them to the Links."""
        key = (record.namespace, record.name)
        if isinstance(record, ServiceRecord):
            if self.services.get(key) == record:
                return  # a write that changed nothing we read (a status, an annotation)
            self._forget_service(key, dirty)
            self.services[key] = record
            self._remember_service(record, dirty)
        elif isinstance(record, SliceRecord):
            if self.slices.get(key) == record:
                return
            self._put_slice(record, dirty)

    def delete(self, kind: Kind, key: Key, dirty: set[Key]) -> None:
        if kind is Kind.SERVICE:
            self._forget_service(key, dirty)
        elif kind is Kind.SLICE:
            self._forget_slice(key, dirty)

    def replace(self, event: Replace, dirty: set[Key]) -> None:
        """Diff the new complete state against ours and apply only the differences."""
        # Tables, not dicts keyed by tuples: a relist holds a second set of records next
        # to ours, and key tuples would add to that peak (bench/memory-figures.md).
        new_services: Table[ServiceRecord] = Table()
        new_slices: Table[SliceRecord] = Table()
        for r in event.records:
            if isinstance(r, ServiceRecord):
                new_services[(r.namespace, r.name)] = r
            elif isinstance(r, SliceRecord):
                new_slices[(r.namespace, r.name)] = r
        for kind, table, new in ((Kind.SERVICE, self.services, new_services),
                                 (Kind.SLICE, self.slices, new_slices)):
            if kind not in event.kinds:
                continue
            if table:  # a relist or a reload: drop what is gone, upsert what differs
                for key in [k for k in table if k not in new]:
                    self.delete(kind, key, dirty)
                for record in new.records():
                    if table.get((record.namespace, record.name)) != record:
                        self.upsert(record, dirty)
            else:  # the first list: everything is new, nothing to compare or forget
                for record in new.records():
                    self._insert(record, dirty)

    def _insert(self, record: ServiceRecord | SliceRecord, dirty: set[Key]) -> None:
        """:meth:`upsert` of a record whose key the store does not hold."""
        if isinstance(record, ServiceRecord):
            self.services[(record.namespace, record.name)] = record
            self._remember_service(record, dirty)
        else:
            self._put_slice(record, dirty)

    def _remember_service(self, svc: ServiceRecord, dirty: set[Key]) -> None:
        key = self.key_of(svc)
        if key is not None:
            dirty.add(key)

    def _forget_service(self, key: Key, dirty: set[Key]) -> ServiceRecord | None:
        old: ServiceRecord | None = self.services.pop(key, None)
        old_key = self.key_of(old)
        if old_key is not None:
            dirty.add(old_key)
        return old

    def _put_slice(self, record: SliceRecord, dirty: set[Key]) -> None:
        old = self._slices.put(record)
        if old is not None and old.service_name != record.service_name:
            self._touch_service((old.namespace, old.service_name), dirty)
        self._touch_service((record.namespace, record.service_name), dirty)

    def _forget_slice(self, key: Key, dirty: set[Key]) -> None:
        old = self._slices.pop(key)
        if old is not None:
            self._touch_service((old.namespace, old.service_name), dirty)

    def _touch_service(self, svc_key: Key, dirty: set[Key]) -> None:
        key = self.key_of(self.services.get(svc_key))
        if key is not None:
            dirty.add(key)


class LocalStore(Store):
    """The local cluster's objects, with the mirrors of each global service and the
    gateway probe Services (the prober's targets) kept as they come and go."""

    def __init__(self) -> None:
        super().__init__()
        self.mirrors_by_key: dict[Key, Names] = {}
        self.probe_keys: set[Key] = set()

    def _remember_service(self, svc: ServiceRecord, dirty: set[Key]) -> None:
        if svc.role is Role.GATEWAY_PROBE:
            self.probe_keys.add((svc.namespace, svc.name))
        key = self.key_of(svc)
        if key is None:
            return
        if svc.role is not Role.LOCAL:
            add_name(self.mirrors_by_key, key, svc.name)
        dirty.add(key)

    def _forget_service(self, key: Key, dirty: set[Key]) -> ServiceRecord | None:
        self.probe_keys.discard(key)
        old = super()._forget_service(key, dirty)
        old_key = self.key_of(old)
        if old is not None and old_key is not None and old.role is not Role.LOCAL:
            remove_name(self.mirrors_by_key, old_key, old.name)
        return old

    def probe_services(self) -> Iterator[ServiceRecord]:
        """The gateway probe Services, by key: what the prober's targets are made of
        (:func:`dnsside.model.probes.probe_targets`)."""
        return (self.services[key] for key in sorted(self.probe_keys))

    def keys(self) -> set[Key]:
        """Every global service the local objects make: exported Services and mirrors."""
        keys = {(s.namespace, s.name) for s in self.services.records()
                if s.role is Role.LOCAL and s.exported}
        keys.update(self.mirrors_by_key)
        return keys


def _upserted(store: Store, event: Upsert, dirty: set[Key]) -> None:
    store.upsert(event.record, dirty)


def _deleted(store: Store, event: Delete, dirty: set[Key]) -> None:
    store.delete(event.kind, (event.namespace, event.name), dirty)


def _replaced(store: Store, event: Replace, dirty: set[Key]) -> None:
    store.replace(event, dirty)  # a linked cluster's own replace: it is synced then


# A linked cluster's object event, by its type, on that cluster's store (the local events
# have handlers of their own in the index: a Link is also the Links').
OBJECT_EVENTS: dict[type, Callable[[Any, Any, set[Key]], None]] = {
    Upsert: _upserted,
    Delete: _deleted,
    Replace: _replaced,
}


__all__ = ["OBJECT_EVENTS", "LocalStore", "Store"]
