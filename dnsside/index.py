"""The index: source events in, pre-encoded answers out.

It keeps the slim records sources deliver and, for every event, works out which
global services the event touches, rebuilds just those with
:func:`dnsside.linkerd.assemble`, re-encodes them with
:func:`dnsside.dns.encode_service` and swaps their entries into the
:class:`~dnsside.dns.Responder`'s tables. Nothing else is rebuilt: the cost of
an event is the size of the services it touches, not the size of the cluster.

The one subtle part is the bookkeeping of *which* global service an object
belongs to: a slice belongs to whatever its Service belongs to, and a Service
can change its mind (an annotation edit, a mirror that becomes a plain
Service), so every update recomputes the key of the old *and* the new version.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dnsside import metrics
from dnsside.bulk import bulk
from dnsside.dns import Responder, ServiceAnswers, Zone, ZoneOptions, encode_service, to_wire
from dnsside.events import Delete, Event, Kind, Replace, SourceError, Synced, Upsert
from dnsside.linkerd import (
    GlobalService,
    LinkRecord,
    Record,
    Role,
    ServiceRecord,
    SliceRecord,
    assemble,
)

log = logging.getLogger("dnsside.index")

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class IndexOptions:
    cluster_name: str = "local"
    include_local: bool = True
    zone: ZoneOptions = field(default_factory=ZoneOptions)


def _key_of(svc: ServiceRecord | None) -> Key | None:
    if svc is None or svc.role is Role.IGNORED or not svc.original:
        return None
    return (svc.namespace, svc.original)


class Index:
    def __init__(self, responder: Responder, options: IndexOptions) -> None:
        self.responder = responder
        self.options = options
        self.zone_wires = [z.wire for z in responder.zones]
        self.services: dict[Key, ServiceRecord] = {}
        self.slices: dict[Key, SliceRecord] = {}
        self.links: dict[Key, LinkRecord] = {}
        # Usually one slice per service: a tuple costs a third of a one-element set.
        self.slices_by_service: dict[Key, tuple[str, ...]] = {}
        self.mirrors_by_key: dict[Key, set[str]] = {}
        self.global_services: dict[Key, GlobalService] = {}
        # What each service put into the responder's tables, to take it out again.
        # Tuples of the keys, not the dicts: the responder already holds the answers.
        self._published: dict[Key, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {}
        self._namespace_refs: Counter[bytes] = Counter()
        self._members: Counter[tuple[str, bool]] = Counter()
        self._clusters: set[str] = set()  # clusters with members, for "link seen/gone" logs
        self.synced = False
        self.serial = int(time.time())
        self.last_error = ""
        for z in responder.zones:
            z.set_serial(self.serial)
        responder.refresh_apex()

    # ----------------------------------------------------------------- events

    def apply(self, events: Iterable[Event]) -> set[Key]:
        """Apply a batch of events; return the global services whose answers changed."""
        batch = list(events)
        if any(isinstance(e, Replace | Synced) for e in batch):  # a full list: bulk work
            with bulk():
                return self._apply(batch)
        return self._apply(batch)

    def _apply(self, events: list[Event]) -> set[Key]:
        started = time.perf_counter()
        dirty: set[Key] = set()
        became_synced = False
        for event in events:
            if isinstance(event, Upsert):
                self._upsert(event.record, dirty)
            elif isinstance(event, Delete):
                self._delete(event.kind, (event.namespace, event.name), dirty)
            elif isinstance(event, Replace):
                self._replace(event, dirty)
            elif isinstance(event, Synced):
                became_synced = not self.synced
            elif isinstance(event, SourceError):
                self.last_error = event.message
        if became_synced:
            self.synced = True
            dirty = self._all_keys()
        changed = self._rebuild(dirty, quiet=became_synced) if self.synced else set()
        if changed or became_synced:
            self.serial = (self.serial + 1) & 0xFFFFFFFF
            for z in self.responder.zones:
                z.set_serial(self.serial)
            if became_synced:
                self.responder.set_ready()  # the apex answers first, then ready
            else:
                self.responder.refresh_apex()
            metrics.ZONE_SERIAL.set(self.serial)
        if became_synced:
            log.info(
                "initial sync done: %d global services, %d members, clusters %s",
                len(self.global_services), sum(self._members.values()),
                ", ".join(sorted(self._clusters)) or "none",
            )
        metrics.INDEX_UPDATE_SECONDS.observe(time.perf_counter() - started)
        return changed

    def _all_keys(self) -> set[Key]:
        keys = {k for k, s in self.services.items() if s.role is Role.LOCAL and s.exported}
        keys.update(self.mirrors_by_key)
        return keys

    def _upsert(self, record: Record, dirty: set[Key]) -> None:
        if isinstance(record, LinkRecord):
            self.links[(record.namespace, record.name)] = record
        elif isinstance(record, ServiceRecord):
            key = (record.namespace, record.name)
            self._forget_service(key, dirty)
            self.services[key] = record
            self._remember_service(record, dirty)
        else:
            key = (record.namespace, record.name)
            self._forget_slice(key, dirty)
            self.slices[key] = record
            svc_key = (record.namespace, record.service_name)
            names = self.slices_by_service.get(svc_key, ())
            self.slices_by_service[svc_key] = (*names, record.name)
            self._touch_service((record.namespace, record.service_name), dirty)

    def _delete(self, kind: Kind, key: Key, dirty: set[Key]) -> None:
        if kind is Kind.SERVICE:
            self._forget_service(key, dirty)
        elif kind is Kind.LINK:
            self.links.pop(key, None)
        else:
            self._forget_slice(key, dirty)

    def _replace(self, event: Replace, dirty: set[Key]) -> None:
        """Diff the new complete state against ours and apply only the differences."""
        incoming: dict[tuple[Kind, Key], Record] = {
            (Kind.of(r), (r.namespace, r.name)): r for r in event.records
        }
        if Kind.SERVICE in event.kinds:
            for key in [k for k in self.services if (Kind.SERVICE, k) not in incoming]:
                self._forget_service(key, dirty)
        if Kind.SLICE in event.kinds:
            for key in [k for k in self.slices if (Kind.SLICE, k) not in incoming]:
                self._forget_slice(key, dirty)
        if Kind.LINK in event.kinds:
            for key in [k for k in self.links if (Kind.LINK, k) not in incoming]:
                self._delete(Kind.LINK, key, dirty)
        tables: dict[Kind, dict[Key, Any]] = {
            Kind.SERVICE: self.services, Kind.SLICE: self.slices, Kind.LINK: self.links}
        for (kind, key), record in incoming.items():
            if kind not in event.kinds:
                continue
            current = tables[kind].get(key)
            if current != record:
                self._upsert(record, dirty)

    def _remember_service(self, svc: ServiceRecord, dirty: set[Key]) -> None:
        key = _key_of(svc)
        if key is None:
            return
        if svc.role is not Role.LOCAL:
            self.mirrors_by_key.setdefault(key, set()).add(svc.name)
        dirty.add(key)

    def _forget_service(self, key: Key, dirty: set[Key]) -> None:
        old = self.services.pop(key, None)
        old_key = _key_of(old)
        if old is None or old_key is None:
            return
        if old.role is not Role.LOCAL:
            names = self.mirrors_by_key.get(old_key)
            if names is not None:
                names.discard(old.name)
                if not names:
                    del self.mirrors_by_key[old_key]
        dirty.add(old_key)

    def _forget_slice(self, key: Key, dirty: set[Key]) -> None:
        old = self.slices.pop(key, None)
        if old is None:
            return
        svc_key = (old.namespace, old.service_name)
        rest = tuple(n for n in self.slices_by_service.get(svc_key, ()) if n != old.name)
        if rest:
            self.slices_by_service[svc_key] = rest
        else:
            self.slices_by_service.pop(svc_key, None)
        self._touch_service(svc_key, dirty)

    def _touch_service(self, svc_key: Key, dirty: set[Key]) -> None:
        key = _key_of(self.services.get(svc_key))
        if key is not None:
            dirty.add(key)

    # ----------------------------------------------------------------- rebuild

    def slices_of(self, namespace: str, service: str) -> list[SliceRecord]:
        names = self.slices_by_service.get((namespace, service), ())
        return [self.slices[(namespace, n)] for n in sorted(names)]

    def assemble(self, key: Key) -> GlobalService | None:
        namespace, name = key
        local = self.services.get(key)
        if local is not None and local.role is not Role.LOCAL:
            local = None
        mirrors = [
            (self.services[(namespace, m)], self.slices_of(namespace, m))
            for m in sorted(self.mirrors_by_key.get(key, ()))
        ]
        return assemble(
            namespace,
            name,
            local,
            self.slices_of(namespace, name) if local is not None else [],
            mirrors,
            cluster_name=self.options.cluster_name,
            include_local=self.options.include_local,
        )

    def _rebuild(self, dirty: Iterable[Key], quiet: bool = False) -> set[Key]:
        changed: set[Key] = set()
        for key in dirty:
            gs = self.assemble(key)
            old = self.global_services.get(key)
            if gs == old:
                continue
            changed.add(key)
            self._count_members(old, -1)
            self._count_members(gs, +1)
            if gs is None:
                del self.global_services[key]
                if old is not None and not quiet:
                    log.info("global service %s/%s is gone", *key)
            else:
                if old is None and not quiet:
                    log.info("global service %s/%s appeared", *key)
                self.global_services[key] = gs
            self._publish(key, gs)
        if changed:
            metrics.GLOBAL_SERVICES.set(len(self.global_services))
            for (cluster, ready), n in self._members.items():
                metrics.MEMBERS.labels(cluster=cluster, ready=str(ready).lower()).set(n)
            self._log_links(quiet)
        return changed

    def _log_links(self, quiet: bool) -> None:
        """One line when a linked cluster first contributes members, and when it stops."""
        per_cluster: Counter[str] = Counter()
        for (cluster, _ready), n in self._members.items():
            per_cluster[cluster] += n
        clusters = {c for c, n in per_cluster.items() if n > 0}
        if not quiet:
            for c in sorted(clusters - self._clusters):
                log.info("link %s seen: %d members", c, per_cluster[c])
            for c in sorted(self._clusters - clusters):
                log.info("link %s gone: no members left", c)
        self._clusters = clusters

    def _count_members(self, gs: GlobalService | None, sign: int) -> None:
        if gs is None:
            return
        for m in gs.members:
            self._members[(m.cluster, m.ready)] += sign

    def _publish(self, key: Key, gs: GlobalService | None) -> None:
        r = self.responder
        new = (
            encode_service(gs, self.zone_wires, self.options.zone)
            if gs is not None
            else ServiceAnswers()
        )
        old = self._published.pop(key, None)
        # Insert first, then remove what is no longer there: a concurrent reader
        # sees either the old or the new answer for a name, never a gap.
        r.answers.update(new.answers)
        for name in new.names:
            r.names[name] = r.zone_by_wire[self._zone_suffix(name)]
        if old is not None:
            old_answers, old_names = old
            for k in old_answers:
                if k not in new.answers:
                    r.answers.pop(k, None)
            for name in old_names:
                if name not in new.names:
                    r.names.pop(name, None)
        if new.names:
            self._published[key] = (tuple(new.answers), tuple(new.names))
        delta = (1 if new.names else 0) - (1 if old is not None else 0)
        if delta:
            self._count_namespace(key[0], delta)

    def _count_namespace(self, namespace: str, delta: int) -> None:
        """`<ns>.Z` is an empty non-terminal while any service of the namespace is published."""
        for zone in self.zone_wires:
            name = to_wire(namespace)[:-1] + zone
            self._namespace_refs[name] += delta
            if self._namespace_refs[name] > 0:
                self.responder.names[name] = self.responder.zone_by_wire[zone]
            else:
                del self._namespace_refs[name]
                self.responder.names.pop(name, None)

    def _zone_suffix(self, name: bytes) -> bytes:
        """The longest served zone that ``name`` (one of our own, well-formed) ends with."""
        return max((z for z in self.zone_wires if name.endswith(z)), key=len)


def make_responder(zones: Sequence[str], options: ZoneOptions) -> Responder:
    return Responder([Zone(z, options) for z in zones])
