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
Two inputs belong to whole clusters rather than to objects: the set of linked
clusters (from Links: mirrors of any other cluster are orphans) and the
gateways failing dnsside's probe. When either changes, every global service
with a mirror of an affected cluster is rebuilt. Both only ever change on
knowledge, never on its absence: once Links have been listed, that list stands
through every fault until a newer complete list or a watch event replaces it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dnsside import metrics
from dnsside.bulk import bulk
from dnsside.dns import (
    Answer,
    McsZone,
    Responder,
    ServiceAnswers,
    Zone,
    ZoneOptions,
    encode_service,
    to_wire,
)
from dnsside.events import (
    Delete,
    Event,
    Gateway,
    GatewayState,
    Kind,
    LinksUnavailable,
    LinkWatch,
    Replace,
    Synced,
    Upsert,
)
from dnsside.linkerd import (
    GlobalService,
    LinkRecord,
    Record,
    Role,
    ServiceRecord,
    SliceRecord,
    assemble,
    is_clash,
    is_orphan,
    probe_url,
)

log = logging.getLogger("dnsside.index")

Key = tuple[str, str]  # (namespace, name)
V = TypeVar("V")
_MISSING: Any = object()


class Table(MutableMapping[Key, V]):
    """A dict keyed by (namespace, name), held as one dict per namespace.

    At 100k members the index keeps three tables of about 92k entries each; a flat
    dict would hold a (namespace, name) tuple per entry, 56 bytes, 15 MB in all.
    Here an entry is keyed by the name string its record already holds.
    """

    __slots__ = ("_by_namespace", "_len")

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, V]] = {}
        self._len = 0

    def __getitem__(self, key: Key) -> V:
        return self._by_namespace[key[0]][key[1]]

    def get(self, key: Key, default: Any = None) -> Any:
        names = self._by_namespace.get(key[0])
        return default if names is None else names.get(key[1], default)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        names = self._by_namespace.get(key[0])
        return names is not None and key[1] in names

    def __setitem__(self, key: Key, value: V) -> None:
        namespace, name = key
        names = self._by_namespace.get(namespace)
        if names is None:
            names = self._by_namespace[namespace] = {}
        if name not in names:
            self._len += 1
        names[name] = value

    def __delitem__(self, key: Key) -> None:
        namespace, name = key
        names = self._by_namespace[namespace]
        del names[name]
        self._len -= 1
        if not names:
            del self._by_namespace[namespace]

    def pop(self, key: Key, default: Any = _MISSING) -> Any:
        names = self._by_namespace.get(key[0])
        if names is None or key[1] not in names:
            if default is _MISSING:
                raise KeyError(key)
            return default
        value = names[key[1]]
        self.__delitem__(key)
        return value

    def __iter__(self) -> Iterator[Key]:
        for namespace, names in self._by_namespace.items():
            for name in names:
                yield (namespace, name)

    def __len__(self) -> int:
        return self._len

    def records(self) -> Iterator[V]:
        """The values, without building a key for each."""
        for names in self._by_namespace.values():
            yield from names.values()


# A global service's contribution to the member, orphan and clash counts, flat:
# (tag, cluster, n, tag, cluster, n, ...) with tag one of _TAGS. Kept instead of the
# GlobalService itself (its Member objects: 14 MB at 100k members), which is rebuilt
# from the records whenever someone asks (explain, check).
Tally = tuple[Any, ...]
_READY, _NOT_READY, _ORPHAN, _CLASH = "ready", "not-ready", "orphan", "clash"


def _tally(gs: GlobalService) -> Tally:
    counts: Counter[tuple[str, str]] = Counter()
    for m in gs.members:
        counts[(_READY if m.ready else _NOT_READY, m.cluster)] += 1
    for m in gs.excluded:
        if is_orphan(m):
            counts[(_ORPHAN, m.cluster)] += 1
        elif is_clash(m):
            counts[(_CLASH, m.cluster)] += 1
    return tuple(x for (tag, cluster), n in sorted(counts.items()) for x in (tag, cluster, n))


def _same_answer(a: Answer | None, b: Answer) -> bool:
    return a is b or (a is not None and a.body == b.body and a.counts == b.counts
                      and a.stat == b.stat)


# The names under one key (mirrors of a global service, slices of a Service): usually
# a few, so a tuple (a set costs four times as much); a set past this many, so that
# adding the 1000th mirror of one service is not a copy of the other 999.
_SMALL = 32
Names = tuple[str, ...] | set[str]


def _added(names: Names | None, name: str) -> Names:
    if names is None:
        return (name,)
    if isinstance(names, set):
        names.add(name)
        return names
    if name in names:
        return names
    return {*names, name} if len(names) >= _SMALL else (*names, name)


def _removed(names: Names, name: str) -> Names | None:
    if isinstance(names, set):
        names.discard(name)
        return names or None
    return tuple(n for n in names if n != name) or None


class _GlobalServices(Mapping[Key, GlobalService]):
    """The global services the index publishes, assembled from its records when read
    (only explain and check read them; the index keeps just their tallies)."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def __getitem__(self, key: Key) -> GlobalService:
        if key not in self._index._tallies:
            raise KeyError(key)
        gs = self._index.assemble(key)
        assert gs is not None, key  # a tallied key is one assemble returned a service for
        return gs

    def __contains__(self, key: object) -> bool:
        return key in self._index._tallies

    def __iter__(self) -> Iterator[Key]:
        return iter(self._index._tallies)

    def __len__(self) -> int:
        return len(self._index._tallies)


@dataclass(frozen=True)
class IndexOptions:
    cluster_name: str = "local"
    include_local: bool = True
    include_federated: bool = True
    zone: ZoneOptions = field(default_factory=ZoneOptions)


_MIRROR_ROLES = (Role.HEADLESS_ROOT, Role.POD_MIRROR, Role.CLUSTER_MIRROR)

# Configuration mistakes worth a warning after every sync: (metric label, message).
WARNINGS = {
    "default-cluster-name": (
        "--cluster-name is still the default 'local' while mirrors of linked clusters exist: "
        "set it to the name the other clusters linked this one as "
        "(linkerd multicluster link --cluster-name)"),
    "cluster-name-clash": (
        "--cluster-name {cluster} is also the cluster name of mirrors here: local members win "
        "every name clash and that cluster's clashing members are left out"),
    "no-mirror-slices": (
        "{n} mirrors routed through gateways exist but none has an EndpointSlice: is the "
        "EndpointSliceMirroring controller off? (they all count as not ready)"),
}


def _key_of(svc: ServiceRecord | None) -> Key | None:
    if svc is None or svc.role is Role.IGNORED or not svc.original:
        return None
    return (svc.namespace, svc.original)


class Index:
    def __init__(self, responder: Responder, options: IndexOptions) -> None:
        self.responder = responder
        self.options = options
        self.zone_wires = [z.wire for z in responder.zones]
        self.services: Table[ServiceRecord] = Table()
        self.slices: Table[SliceRecord] = Table()
        self.links: dict[Key, LinkRecord] = {}
        self.slices_by_service: Table[Names] = Table()
        self.mirrors_by_key: dict[Key, Names] = {}
        # Every global service that exists, by the counts it adds to the metrics.
        self._tallies: dict[Key, Tally] = {}
        self.global_services: Mapping[Key, GlobalService] = _GlobalServices(self)
        # What each service put into the responder's tables, to take it out again.
        # Tuples of the keys, not the dicts: the responder already holds the answers.
        self._published: dict[Key, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {}
        self._namespace_refs: Counter[bytes] = Counter()
        self._members: Counter[tuple[str, bool]] = Counter()
        self._clusters: set[str] = set()  # clusters with members, for "link seen/gone" logs
        self._orphans: Counter[str] = Counter()  # orphaned mirrors (excluded members) by cluster
        self._clashes: Counter[str] = Counter()  # members lost to a name clash, by cluster
        self._orphaned_clusters: set[str] = set()  # logged already
        self._clashed_clusters: set[str] = set()
        self._probe_keys: set[Key] = set()  # gateway probe Services
        # Links: None until the source says, then whether they were ever listed.
        self.links_readable: bool | None = None
        self.links_reason = ""
        self.links_watch_down = ""  # why the Link watch is down ("" while it follows)
        self.links_complete_at = 0.0  # when the Link list was last known complete
        self.gateways: dict[str, tuple[Gateway, str]] = {}  # the prober's view, by cluster
        self._linked: frozenset[str] | None = None  # what the global services were built with
        self._failing: frozenset[str] = frozenset()
        self.warnings: dict[str, str] = {}  # active configuration warnings
        self.synced = False
        self.serial = int(time.time())
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
        became_synced = resynced = False
        for event in events:
            if isinstance(event, Upsert):
                self._upsert(event.record, dirty)
                if isinstance(event.record, LinkRecord):
                    self._link_watch("")  # a Link watch event: the watch follows
            elif isinstance(event, Delete):
                self._delete(event.kind, (event.namespace, event.name), dirty)
                if event.kind is Kind.LINK:
                    self._link_watch("")  # a Link watch event: the watch follows
            elif isinstance(event, Replace):
                self._replace(event, dirty)
                resynced = True
                if Kind.LINK in event.kinds:
                    self._links_listed()
            elif isinstance(event, LinksUnavailable):
                self._links_unavailable(event.reason)
            elif isinstance(event, LinkWatch):
                self._link_watch(event.reason)
            elif isinstance(event, GatewayState):
                self._gateway(event)
            elif isinstance(event, Synced):
                became_synced = not self.synced
        dirty |= self._cluster_inputs_changed()
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
                "initial sync done: %d global services, %d members, clusters %s; links %s",
                len(self.global_services), sum(self._members.values()),
                ", ".join(sorted(self._clusters)) or "none", self.describe_links(),
            )
        if self.synced and (became_synced or resynced):
            self._check_configuration()
        metrics.INDEX_UPDATE_SECONDS.observe(time.perf_counter() - started)
        return changed

    # ----------------------------------------------------------------- cluster-wide inputs

    def linked_clusters(self) -> frozenset[str] | None:
        """Target clusters of the Links, or None when Links cannot be read (no filtering)."""
        if not self.links_readable:
            return None
        return frozenset(link.target_cluster for link in self.links.values())

    def describe_links(self, now: float | None = None) -> str:
        if self.links_readable:
            listed = f"{len(self.links)} read ({', '.join(sorted(self.linked_clusters() or ()))})"
            if not self.links_watch_down:
                return listed
            age = max(0.0, (time.time() if now is None else now) - self.links_complete_at)
            return (f"{listed}; the Link watch is down ({self.links_watch_down}): the list "
                    f"last known complete {age:.0f} s ago stands")
        if self.links_readable is False:
            return f"cannot be read ({self.links_reason}): orphaned mirrors are not filtered"
        return "not known yet"

    def _links_listed(self) -> None:
        """A complete Link list: it replaced the previous one, and the watch follows it."""
        if self.links_readable is False:
            log.info("Links can be read again: mirrors of unlinked clusters are left out")
        elif self.links_watch_down:
            log.info("Links listed again (%d): the Link watch follows changes again",
                     len(self.links))
        self.links_readable, self.links_reason, self.links_watch_down = True, "", ""
        self.links_complete_at = time.time()
        metrics.LINKS_READABLE.set(1)
        metrics.LINKS_WATCH_UP.set(1)
        metrics.LINKS_LISTED.set(self.links_complete_at)

    def _links_unavailable(self, reason: str) -> None:
        """Links cannot be read. Never listed: nothing is filtered (an unreadable list must
        not empty the answers). Listed before: that list stands (a fault must not bring an
        unlinked cluster back), and the watch counts as down."""
        if self.links_readable:
            self._link_watch(reason)
            return
        if self.links_readable is None or reason != self.links_reason:
            log.warning("Links cannot be read: %s; serving every mirror, orphaned or not, until "
                        "they can", reason)
        self.links_readable, self.links_reason = False, reason
        metrics.LINKS_READABLE.set(0)
        metrics.LINKS_WATCH_UP.set(0)

    def _link_watch(self, reason: str) -> None:
        """The Link watch went down (``reason``) or follows again (""); only once Links
        were listed does it mean anything, and it changes no Link either way."""
        if not self.links_readable or bool(reason) == bool(self.links_watch_down):
            if self.links_readable and reason:
                self.links_watch_down = reason  # still down: keep the latest reason
            return
        now = time.time()
        if reason:
            log.warning("Link watch down (%s): the last complete list of %d Links (%s) stands "
                        "until a newer list or watch event replaces it", reason, len(self.links),
                        ", ".join(sorted(self.linked_clusters() or ())) or "none")
            self.links_complete_at = now
        else:
            log.info("Link watch follows changes again after %.0f s down",
                     now - self.links_complete_at)
            self.links_complete_at = now
        self.links_watch_down = reason
        metrics.LINKS_WATCH_UP.set(0 if reason else 1)
        metrics.LINKS_LISTED.set(self.links_complete_at)

    def _gateway(self, event: GatewayState) -> None:
        if event.state is None:
            self.gateways.pop(event.cluster, None)
        else:
            self.gateways[event.cluster] = (event.state, event.detail)

    def _cluster_inputs_changed(self) -> set[Key]:
        """Global services to rebuild because the linked clusters or failing gateways moved."""
        linked = self.linked_clusters()
        failing = frozenset(c for c, (state, _) in self.gateways.items()
                            if state is Gateway.FAILING)
        before, self._linked, self._failing = (self._linked, self._failing), linked, failing
        if (linked is None) != (before[0] is None):
            return set(self.mirrors_by_key)  # filtering switched on or off: anything may move
        clusters = failing ^ before[1]
        if linked is not None and before[0] is not None:
            clusters |= linked ^ before[0]
        if not clusters:
            return set()
        return {
            key for key, names in self.mirrors_by_key.items()
            if any(self.services[(key[0], n)].cluster in clusters for n in names)
        }

    def probe_targets(self) -> dict[str, str]:
        """cluster → probe URL, for every linked cluster with a gateway probe Service (all of
        them while Links cannot be read). One Service per cluster: the first by name."""
        linked = self.linked_clusters()
        links = {link.target_cluster: link for link in sorted(self.links.values(),
                                                               key=lambda lk: lk.name)}
        targets: dict[str, str] = {}
        for key in sorted(self._probe_keys):
            svc = self.services[key]
            if svc.cluster in targets or (linked is not None and svc.cluster not in linked):
                continue
            url = probe_url(svc, links.get(svc.cluster))
            if url is not None:
                targets[svc.cluster] = url
        return targets

    def _check_configuration(self) -> None:
        """Warn, after every (re)sync, about the mistakes that silently make answers wrong."""
        name = self.options.cluster_name
        mirror_clusters: set[str] = set()
        gateway_mirrors = with_slices = 0
        for svc in self.services.records():
            if svc.role not in _MIRROR_ROLES:
                continue
            mirror_clusters.add(svc.cluster)
            if svc.role is not Role.HEADLESS_ROOT and not svc.remote_discovery:
                gateway_mirrors += 1
                with_slices += (svc.namespace, svc.name) in self.slices_by_service
        active: dict[str, str] = {}
        if mirror_clusters and name == "local":
            active["default-cluster-name"] = WARNINGS["default-cluster-name"]
        if name in mirror_clusters:
            active["cluster-name-clash"] = WARNINGS["cluster-name-clash"].format(cluster=name)
        if gateway_mirrors and not with_slices:
            active["no-mirror-slices"] = WARNINGS["no-mirror-slices"].format(n=gateway_mirrors)
        for message in active.values():
            log.warning("%s", message)
        for label in WARNINGS:
            metrics.CONFIG_WARNINGS.labels(warning=label).set(1 if label in active else 0)
        self.warnings = active

    def _all_keys(self) -> set[Key]:
        keys = {(s.namespace, s.name) for s in self.services.records()
                if s.role is Role.LOCAL and s.exported}
        keys.update(self.mirrors_by_key)
        return keys

    def _upsert(self, record: Record, dirty: set[Key]) -> None:
        if isinstance(record, LinkRecord):
            self.links[(record.namespace, record.name)] = record
        elif isinstance(record, ServiceRecord):
            key = (record.namespace, record.name)
            if self.services.get(key) == record:
                return  # a write that changed nothing we read (a status, an annotation)
            self._forget_service(key, dirty)
            self.services[key] = record
            self._remember_service(record, dirty)
        else:
            key = (record.namespace, record.name)
            if self.slices.get(key) == record:
                return
            self._forget_slice(key, dirty)
            self.slices[key] = record
            svc_key = (record.namespace, record.service_name)
            self.slices_by_service[svc_key] = _added(self.slices_by_service.get(svc_key),
                                                     record.name)
            self._touch_service(svc_key, dirty)

    def _insert(self, record: Record, dirty: set[Key]) -> None:
        """:meth:`_upsert` of a record whose key the index does not hold."""
        if isinstance(record, ServiceRecord):
            self.services[(record.namespace, record.name)] = record
            self._remember_service(record, dirty)
        elif isinstance(record, SliceRecord):
            self.slices[(record.namespace, record.name)] = record
            svc_key = (record.namespace, record.service_name)
            self.slices_by_service[svc_key] = _added(self.slices_by_service.get(svc_key),
                                                     record.name)
            self._touch_service(svc_key, dirty)
        else:
            self._upsert(record, dirty)

    def _delete(self, kind: Kind, key: Key, dirty: set[Key]) -> None:
        if kind is Kind.SERVICE:
            self._forget_service(key, dirty)
        elif kind is Kind.LINK:
            self.links.pop(key, None)
        else:
            self._forget_slice(key, dirty)

    def _replace(self, event: Replace, dirty: set[Key]) -> None:
        """Diff the new complete state against ours and apply only the differences."""
        # Tables, not dicts keyed by tuples: a relist at 100k members holds a second set of
        # records next to ours, and this would add 10 MB of key tuples to that peak.
        incoming: dict[type, Table[Record]] = {ServiceRecord: Table(), SliceRecord: Table(),
                                               LinkRecord: Table()}
        for r in event.records:
            incoming[type(r)][(r.namespace, r.name)] = r
        for kind, record_type, table in ((Kind.SERVICE, ServiceRecord, self.services),
                                         (Kind.SLICE, SliceRecord, self.slices),
                                         (Kind.LINK, LinkRecord, self.links)):
            if kind not in event.kinds:
                continue
            new = incoming[record_type]
            if table:  # a relist or a reload: drop what is gone, upsert what differs
                for key in [k for k in table if k not in new]:
                    self._delete(kind, key, dirty)
                for record in new.records():
                    if table.get((record.namespace, record.name)) != record:
                        self._upsert(record, dirty)
            else:  # the first list: everything is new, nothing to compare or forget
                for record in new.records():
                    self._insert(record, dirty)

    def _remember_service(self, svc: ServiceRecord, dirty: set[Key]) -> None:
        if svc.role is Role.GATEWAY_PROBE:
            self._probe_keys.add((svc.namespace, svc.name))
        key = _key_of(svc)
        if key is None:
            return
        if svc.role is not Role.LOCAL:
            self.mirrors_by_key[key] = _added(self.mirrors_by_key.get(key), svc.name)
        dirty.add(key)

    def _forget_service(self, key: Key, dirty: set[Key]) -> None:
        old = self.services.pop(key, None)
        self._probe_keys.discard(key)
        old_key = _key_of(old)
        if old is None or old_key is None:
            return
        if old.role is not Role.LOCAL:
            names = self.mirrors_by_key.get(old_key)
            if names is not None:
                rest = _removed(names, old.name)
                if rest is None:
                    del self.mirrors_by_key[old_key]
                else:
                    self.mirrors_by_key[old_key] = rest
        dirty.add(old_key)

    def _forget_slice(self, key: Key, dirty: set[Key]) -> None:
        old = self.slices.pop(key, None)
        if old is None:
            return
        svc_key = (old.namespace, old.service_name)
        names = self.slices_by_service.get(svc_key)
        rest = _removed(names, old.name) if names is not None else None
        if rest is not None:
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
            include_federated=self.options.include_federated,
            linked_clusters=self._linked,
            failing_gateways=self._failing,
        )

    def _rebuild(self, dirty: Iterable[Key], quiet: bool = False) -> set[Key]:
        """Re-assemble and re-encode ``dirty``; return the keys whose answers or counts
        changed (a service that appeared or went counts as both)."""
        changed: set[Key] = set()
        for key in dirty:
            gs = self.assemble(key)
            tally = _tally(gs) if gs is not None else None
            old = self._tallies.get(key)
            if not self._publish(key, gs) and tally == old:
                continue
            changed.add(key)
            self._count_members(old, -1)
            self._count_members(tally, +1)
            if tally is None:
                del self._tallies[key]
                if not quiet:
                    log.info("global service %s/%s is gone", *key)
            else:
                if old is None and not quiet:
                    log.info("global service %s/%s appeared", *key)
                self._tallies[key] = tally
        if changed:
            metrics.GLOBAL_SERVICES.set(len(self._tallies))
            for (cluster, ready), n in self._members.items():
                metrics.MEMBERS.labels(cluster=cluster, ready=str(ready).lower()).set(n)
            self._log_links(quiet)
            self._log_exclusions()
        return changed

    def _log_exclusions(self) -> None:
        """Once per cluster, when its mirrors become orphans or lose a name clash."""
        for counter, seen, gauge, message in (
            (self._orphans, self._orphaned_clusters, metrics.ORPHANED_MIRRORS,
             "cluster %s: %d mirrors are orphans (no Link targets it): left out of every "
             "answer; remove them with `linkerd multicluster unlink --cluster-name %s | "
             "kubectl delete -f -`"),
            (self._clashes, self._clashed_clusters, metrics.NAME_CLASHES,
             "cluster %s: %d members have the name of a local member (--cluster-name equals "
             "this linked cluster's name): the local members win; set --cluster-name to this "
             "cluster's own name (%s is a linked one)"),
        ):
            now = {c for c, n in counter.items() if n > 0}
            for c in sorted(now - seen):
                log.warning(message, c, counter[c], c)
            for c, n in counter.items():
                gauge.labels(cluster=c).set(n)
            seen.clear()
            seen.update(now)

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

    def _count_members(self, tally: Tally | None, sign: int) -> None:
        if tally is None:
            return
        for i in range(0, len(tally), 3):
            tag, cluster, n = tally[i : i + 3]
            if tag is _ORPHAN:
                self._orphans[cluster] += sign * n
            elif tag is _CLASH:
                self._clashes[cluster] += sign * n
            else:
                self._members[(cluster, tag is _READY)] += sign * n

    def _publish(self, key: Key, gs: GlobalService | None) -> bool:
        """Put ``gs``'s answers in the responder's tables in place of its previous ones;
        False (and nothing touched) when they are the same bytes."""
        r = self.responder
        new = (
            encode_service(gs, self.responder.zones, self.options.zone)
            if gs is not None
            else ServiceAnswers()
        )
        old = self._published.get(key)
        if old is None and not new.answers:
            return False
        if old is not None and self._unchanged(old, new):
            return False
        self._published.pop(key, None)
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
        if new.answers:
            self._published[key] = (tuple(new.answers), tuple(new.names))
        delta = (1 if new.answers else 0) - (1 if old is not None else 0)
        if delta:
            self._count_namespace(key[0], delta)
        return True

    def _unchanged(self, old: tuple[tuple[bytes, ...], tuple[bytes, ...]],
                   new: ServiceAnswers) -> bool:
        """``new`` holds exactly the questions, answer bytes and names published before."""
        old_answers, old_names = old
        if len(old_answers) != len(new.answers) or len(old_names) != len(new.names):
            return False
        answers = self.responder.answers
        return (all(name in new.names for name in old_names)
                and all(k in new.answers and _same_answer(answers.get(k), new.answers[k])
                        for k in old_answers))

    def _count_namespace(self, namespace: str, delta: int) -> None:
        """`<ns>.Z` (`<ns>.svc.M`) is an empty non-terminal while any service of the
        namespace is published."""
        for zone in self.responder.zones:
            name = to_wire(namespace)[:-1] + zone.services_wire
            self._namespace_refs[name] += delta
            if self._namespace_refs[name] > 0:
                self.responder.names[name] = zone
            else:
                del self._namespace_refs[name]
                self.responder.names.pop(name, None)

    def _zone_suffix(self, name: bytes) -> bytes:
        """The longest served zone that ``name`` (one of our own, well-formed) ends with."""
        return max((z for z in self.zone_wires if name.endswith(z)), key=len)


def make_responder(
    zones: Sequence[str], options: ZoneOptions, mcs_zones: Sequence[str] = ()
) -> Responder:
    """The ``--zone`` zones, then the ``--mcs-zone`` ones (KEP-1645 names)."""
    return Responder([*(Zone(z, options) for z in zones),
                      *(McsZone(z, options) for z in mcs_zones)])
