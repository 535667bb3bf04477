"""The index: source events in, pre-encoded answers out.

It keeps the slim records sources deliver and, for every event, works out which
global services the event touches, rebuilds just those with
:func:`dnsside.model.linkerd.assemble`, re-encodes them with
:func:`dnsside.dns.encode_service` and swaps their entries into the
:class:`~dnsside.dns.responder.Responder`'s tables. Nothing else is rebuilt: the cost of
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

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dnsside.core import diagnosis
from dnsside.core.assembly import (
    GlobalService,
    Member,
    assemble,
    probe_url,
    refusals,
)
from dnsside.core.bulk import bulk
from dnsside.core.diagnosis import (
    ConfigWarning,
    Exclusion,
    Notice,
    Told,
)
from dnsside.core.publishing import Publisher
from dnsside.core.remotes import RemoteCluster
from dnsside.core.tables import (
    Key,
    Names,
    Slices,
    Table,
    add_name,
    remove_name,
)
from dnsside.dns.responder import Responder
from dnsside.dns.zone import McsZone, Zone, ZoneOptions
from dnsside.model.addresses import Unsafe, unsafe_address
from dnsside.model.events import (
    Delete,
    Event,
    Gateway,
    GatewayState,
    Kind,
    LinksUnavailable,
    LinkWatch,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import (
    LinkRecord,
    Record,
    Role,
    ServiceRecord,
    SliceRecord,
    Via,
)

# A global service's contribution to the member, orphan and clash counts, flat:
# (tag, cluster, n, tag, cluster, n, ...) with tag one of _TAGS. Kept instead of the
# GlobalService itself (its Member objects would cost as much as the records), rebuilt
# from the records whenever someone asks (explain, check).
Tally = tuple[Any, ...]
_READY, _NOT_READY, _ORPHAN, _CLASH = "ready", "not-ready", "orphan", "clash"
_INVALID = "invalid-name"
_UNSAFE = {reason: "unsafe:" + reason for reason in Unsafe}  # an unsafe address, by reason


def _tally(gs: GlobalService) -> Tally:
    counts: Counter[tuple[str, str]] = Counter()
    for m in gs.members:
        counts[(_READY if m.ready else _NOT_READY, m.cluster)] += 1
    for m in gs.excluded:
        if m.exclusion is Exclusion.ORPHANED:
            counts[(_ORPHAN, m.cluster)] += 1
        elif m.exclusion is Exclusion.NAME_CLASH:
            counts[(_CLASH, m.cluster)] += 1
        elif m.exclusion is Exclusion.UNSAFE_ADDRESS:
            for a in m.addresses:
                counts[(_UNSAFE[unsafe_address(a) or Unsafe.UNSPECIFIED], m.cluster)] += 1
        elif m.exclusion is Exclusion.INVALID_NAME:  # a member, or the ports of one object
            counts[(_INVALID, m.cluster)] += len(m.ports) if not m.addresses else 1
    return tuple(x for (tag, cluster), n in sorted(counts.items()) for x in (tag, cluster, n))


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
    # --flat-network-namespaces: where linked clusters' own objects count (empty: all); the
    # source leaves the others out, this is for explain to say so.
    flat_namespaces: tuple[str, ...] = ()


@dataclass(slots=True)
class IndexReport:
    """What one :meth:`Index.apply` did, for whoever reports it: the serving side turns it
    into log lines and metrics (the index itself neither logs nor measures)."""

    changed: set[Key]  # global services whose answers or counts changed
    seconds: float  # how long applying the batch took
    told: list[Told] = field(default_factory=list)  # what an operator hears about, once
    synced: bool = False  # this batch completed the initial sync


Observer = Callable[["Index", IndexReport], None]


def _key_of(svc: ServiceRecord | None) -> Key | None:
    if svc is None or svc.role is Role.IGNORED or not svc.original:
        return None
    return (svc.namespace, svc.original)


class Index:
    def __init__(self, responder: Responder, options: IndexOptions,
                 observer: Observer | None = None) -> None:
        self.responder = responder
        self.options = options
        self.observer = observer
        self.services: Table[ServiceRecord] = Table()
        self._slices: Slices[SliceRecord] = Slices()
        self.slices = self._slices.records  # by (namespace, name)
        self.links: dict[Key, LinkRecord] = {}
        self.slices_by_service = self._slices.by_service  # a Service's slice names
        self.mirrors_by_key: dict[Key, Names] = {}
        # Every global service that exists, by the counts it adds to the metrics.
        self._tallies: dict[Key, Tally] = {}
        self.global_services: Mapping[Key, GlobalService] = _GlobalServices(self)
        self._publisher = Publisher(responder, options.zone)
        self._members: Counter[tuple[str, bool]] = Counter()
        self._clusters: set[str] = set()  # clusters with members, for "link seen/gone" logs
        self._orphans: Counter[str] = Counter()  # orphaned mirrors (excluded members) by cluster
        self._clashes: Counter[str] = Counter()  # members lost to a name clash, by cluster
        self._unsafe: Counter[tuple[str, str]] = Counter()  # unsafe addresses: cluster, reason
        self._invalid: Counter[str] = Counter()  # members and ports with bad names, by cluster
        # What was told refused, of the services that refuse anything (none, usually).
        self._refused: dict[Key, dict[tuple[str, str, Exclusion], int]] = {}
        # Every name must fit in 255 octets under the longest served zone.
        self._zone_octets = max((len(z.services_wire) for z in responder.zones), default=0)
        self._orphaned_clusters: set[str] = set()  # told already
        self._clashed_clusters: set[str] = set()
        self._told: list[Told] = []
        self._probe_keys: set[Key] = set()  # gateway probe Services
        # Links: None until the source says, then whether they were ever listed.
        self.links_readable: bool | None = None
        self.links_reason = ""
        self.links_watch_down = ""  # why the Link watch is down ("" while it follows)
        self.links_complete_at = 0.0  # when the Link list was last known complete
        self.gateways: dict[str, tuple[Gateway, str]] = {}  # the prober's view, by cluster
        self._linked: frozenset[str] | None = None  # what the global services were built with
        self._failing: frozenset[str] = frozenset()
        self.warnings: dict[ConfigWarning, str] = {}  # active configuration warnings
        # --flat-network: each linked cluster watched directly, and how that watch fares.
        self.remotes: dict[str, RemoteCluster] = {}
        self.remote_status: dict[str, RemoteStatus] = {}
        self.synced = False
        self.serial = int(time.time())
        for z in responder.zones:
            z.set_serial(self.serial)
        responder.refresh_apex()

    # ----------------------------------------------------------------- events

    def apply(self, events: Iterable[Event]) -> set[Key]:
        """Apply a batch of events; return the global services whose answers changed."""
        batch = list(events)
        if any(isinstance(e, Replace | Synced) or (isinstance(e, Remote)
               and isinstance(e.event, Replace)) for e in batch):  # a full list: bulk work
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
            elif isinstance(event, Remote):
                self._remote(event, dirty)
            elif isinstance(event, RemoteStatus):
                self._remote_status(event)
            elif isinstance(event, Synced):
                became_synced = not self.synced
        dirty |= self._cluster_inputs_changed()
        if self.remotes or self.remote_status:
            self._forget_unlinked_remotes(dirty)
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
        if became_synced:
            self._tell(Notice.SYNCED, (
                f"initial sync done: {len(self.global_services)} global services, "
                f"{sum(self._members.values())} members, clusters "
                f"{', '.join(sorted(self._clusters)) or 'none'}; links {self.describe_links()}"))
        if self.synced and (became_synced or resynced):
            self._check_configuration()
        told, self._told = self._told, []
        if self.observer is not None:
            self.observer(self, IndexReport(changed, time.perf_counter() - started, told,
                                            became_synced))
        return changed

    def _tell(self, notice: Notice, text: str) -> None:
        self._told.append(Told(notice, text))

    def member_counts(self) -> Mapping[tuple[str, bool], int]:
        """Published members by (cluster, ready)."""
        return self._members

    def exclusion_counts(self, why: Exclusion) -> Mapping[str, int]:
        """Members left out for ``why``, by cluster (orphans, clashes, invalid names)."""
        if why is Exclusion.INVALID_NAME:
            return self._invalid
        return self._orphans if why is Exclusion.ORPHANED else self._clashes

    def unsafe_counts(self) -> Mapping[tuple[str, str], int]:
        """Addresses left out because no pod or Service can own them, by (cluster, reason)."""
        return self._unsafe

    # ----------------------------------------------------------------- cluster-wide inputs

    def linked_clusters(self) -> frozenset[str] | None:
        """Target clusters of the Links, or None when Links cannot be read (no filtering)."""
        if not self.links_readable:
            return None
        return frozenset(link.target_cluster for link in self.links.values())

    def describe_links(self, now: float | None = None) -> str:
        age = max(0.0, (time.time() if now is None else now) - self.links_complete_at)
        return diagnosis.describe_links(self.links_readable, self.links_reason, len(self.links),
                                        self.linked_clusters() or (), self.links_watch_down, age)

    def _links_listed(self) -> None:
        """A complete Link list: it replaced the previous one, and the watch follows it."""
        if self.links_readable is False:
            self._tell(Notice.LINKS_READABLE,
                       "Links can be read again: mirrors of unlinked clusters are left out")
        elif self.links_watch_down:
            self._tell(Notice.LINKS_RELISTED, f"Links listed again ({len(self.links)}): the "
                       "Link watch follows changes again")
        self.links_readable, self.links_reason, self.links_watch_down = True, "", ""
        self.links_complete_at = time.time()

    def _links_unavailable(self, reason: str) -> None:
        """Links cannot be read. Never listed: nothing is filtered (an unreadable list must
        not empty the answers). Listed before: that list stands (a fault must not bring an
        unlinked cluster back), and the watch counts as down."""
        if self.links_readable:
            self._link_watch(reason)
            return
        if self.links_readable is None or reason != self.links_reason:
            self._told.append(diagnosis.links_unreadable(reason))
        self.links_readable, self.links_reason = False, reason

    def _link_watch(self, reason: str) -> None:
        """The Link watch went down (``reason``) or follows again (""); only once Links
        were listed does it mean anything, and it changes no Link either way."""
        if not self.links_readable:
            return
        was_down, self.links_watch_down = self.links_watch_down, reason
        if bool(was_down) == bool(reason):
            return  # no change (while down, the latest reason is kept)
        now = time.time()
        if reason:
            self._told.append(diagnosis.link_watch_down(reason, len(self.links),
                                                        self.linked_clusters() or ()))
        else:
            self._tell(Notice.LINK_WATCH_UP, "Link watch follows changes again after "
                       f"{now - self.links_complete_at:.0f} s down")
        self.links_complete_at = now

    def _gateway(self, event: GatewayState) -> None:
        if event.state is None:
            self.gateways.pop(event.cluster, None)
        else:
            self.gateways[event.cluster] = (event.state, event.detail)

    # ----------------------------------------------------------------- --flat-network

    def _link_targets(self) -> set[str]:
        return {link.target_cluster for link in self.links.values()}

    def _remote(self, event: Remote, dirty: set[Key]) -> None:
        """A linked cluster's own objects. Those of a cluster no Link targets (any more)
        are late: its Link was deleted, and with it everything learnt from it."""
        if event.cluster not in self._link_targets():
            return
        remote = self.remotes.get(event.cluster)
        if remote is None:
            remote = self.remotes[event.cluster] = RemoteCluster(event.cluster)
        dirty |= remote.apply(event.event)

    def _remote_status(self, event: RemoteStatus) -> None:
        if event.cluster not in self._link_targets():
            return
        before = self.remote_status.get(event.cluster)
        self.remote_status[event.cluster] = event
        # Told once per state; a credentials problem again when it is another one (the
        # fix differs), a cap when another one is hit, an API away not for every failing
        # request while it is away.
        if before is not None and before.state is event.state and (
                event.state is not RemoteState.CREDENTIALS or before.detail == event.detail
                ) and before.cap == event.cap:
            return
        if before is None and event.state is RemoteState.CONNECTING:
            return
        remote = self.remotes.get(event.cluster)
        services = len(remote.services) if remote is not None else 0
        self._told.append(diagnosis.remote_state(event.cluster, event.state, event.detail,
                                                 event.secret, services,
                                                 before.state if before else None, event.cap))

    def _forget_unlinked_remotes(self, dirty: set[Key]) -> None:
        """A deleted Link takes its cluster's directly watched members with it, at once."""
        targets = self._link_targets()
        for cluster in [c for c in self.remotes if c not in targets]:
            dirty.update(self.remotes.pop(cluster).keys())
        for cluster in [c for c in self.remote_status if c not in targets]:
            del self.remote_status[cluster]

    def _flat_services(self, key: Key) -> list[tuple[ServiceRecord, list[SliceRecord]]]:
        found = []
        for remote in self.remotes.values():
            svc = remote.service(key) if remote.synced else None
            if svc is not None:
                found.append((svc, remote.slices_of(key)))
        return found

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
        """Tell, after every (re)sync, the mistakes that silently make answers wrong."""
        links = list(self.links.values()) if self.links_readable else None
        health = diagnosis.mirror_health(self.services.records(), self.slices_by_service, links)
        self.warnings = diagnosis.configuration_warnings(self.options.cluster_name, health)
        for message in self.warnings.values():
            self._tell(Notice.CONFIG_WARNING, message)

    def _all_keys(self) -> set[Key]:
        keys = {(s.namespace, s.name) for s in self.services.records()
                if s.role is Role.LOCAL and s.exported}
        keys.update(self.mirrors_by_key)
        for remote in self.remotes.values():
            keys.update(remote.keys())
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
            if self.slices.get((record.namespace, record.name)) == record:
                return
            self._put_slice(record, dirty)

    def _insert(self, record: Record, dirty: set[Key]) -> None:
        """:meth:`_upsert` of a record whose key the index does not hold."""
        if isinstance(record, ServiceRecord):
            self.services[(record.namespace, record.name)] = record
            self._remember_service(record, dirty)
        elif isinstance(record, SliceRecord):
            self._put_slice(record, dirty)
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
        # Tables, not dicts keyed by tuples: a relist holds a second set of records next
        # to ours, and key tuples would add to that peak (bench/memory-figures.md).
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
            add_name(self.mirrors_by_key, key, svc.name)
        dirty.add(key)

    def _forget_service(self, key: Key, dirty: set[Key]) -> None:
        old = self.services.pop(key, None)
        self._probe_keys.discard(key)
        old_key = _key_of(old)
        if old is None or old_key is None:
            return
        if old.role is not Role.LOCAL:
            remove_name(self.mirrors_by_key, old_key, old.name)
        dirty.add(old_key)

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
        key = _key_of(self.services.get(svc_key))
        if key is not None:
            dirty.add(key)

    # ----------------------------------------------------------------- rebuild

    def slices_of(self, namespace: str, service: str) -> list[SliceRecord]:
        return self._slices.of(namespace, service)

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
            flat=self._flat_services(key) if self.remotes else (),
            zone_octets=self._zone_octets,
        )

    def _rebuild(self, dirty: Iterable[Key], quiet: bool = False) -> set[Key]:
        """Re-assemble and re-encode ``dirty``; return the keys whose answers or counts
        changed (a service that appeared or went counts as both)."""
        changed: set[Key] = set()
        for key in dirty:
            gs = self.assemble(key)
            if (gs is not None and gs.excluded) or key in self._refused:
                self._tell_refused(key, gs)
            tally = _tally(gs) if gs is not None else None
            old = self._tallies.get(key)
            if not self._publisher.publish(key, gs) and tally == old:
                continue
            changed.add(key)
            self._count_members(old, -1)
            self._count_members(tally, +1)
            if tally is None:
                del self._tallies[key]
                if not quiet:
                    self._tell(Notice.SERVICE_GONE, "global service {}/{} is gone".format(*key))
            else:
                if old is None and not quiet:
                    self._tell(Notice.SERVICE_APPEARED,
                               "global service {}/{} appeared".format(*key))
                self._tallies[key] = tally
        if changed:
            self._tell_links(quiet)
            self._tell_exclusions()
            self._forget_gone_clusters()
        return changed

    def _forget_gone_clusters(self) -> None:
        """Drop the counts of clusters with no member and nothing left out any more, so
        that clusters come and go without leaving keys (or metric series) behind."""
        present = ({c for (c, _), n in self._members.items() if n}
                   | {c for c, n in self._orphans.items() if n}
                   | {c for c, n in self._clashes.items() if n}
                   | {c for (c, _), n in self._unsafe.items() if n}
                   | {c for c, n in self._invalid.items() if n})
        for pairs in (self._members, self._unsafe):
            for key in [k for k in pairs if k[0] not in present]:
                del pairs[key]
        for counter in (self._orphans, self._clashes, self._invalid):
            for c in [c for c in counter if c not in present]:
                del counter[c]

    def _tell_refused(self, key: Key, gs: GlobalService | None) -> None:
        """Once per object, what of it is refused (an unsafe address, an invalid name); again
        only when that changes, never for a rebuild that changed nothing of it. What was told
        is kept as a hash: a hostile slice may hold thousands of refusals."""
        now = refusals(gs, lambda m: self._object_of(key[0], m))
        before = self._refused.pop(key, {})
        seen = {k: hash(tuple(items)) for k, items in now.items()}
        for (cluster, source, why), items in sorted(now.items(), key=lambda kv: kv[0][:2]):
            if before.get((cluster, source, why)) != seen[(cluster, source, why)]:
                self._told.append(diagnosis.refused(cluster, source, why, items))
        if seen:
            self._refused[key] = seen

    def _object_of(self, namespace: str, m: Member) -> str:
        """The object a refused member comes from, for the notice."""
        if m.via is Via.FLAT_NETWORK:
            remote = self.remotes.get(m.cluster)
            found = remote.slices.get((namespace, m.source)) if remote is not None else None
            kind = "Endpoints" if found is not None and found.service_name == found.name \
                else "EndpointSlice"
            return f"{kind} {namespace}/{m.source} (its own API, --flat-network)"
        kind = "EndpointSlice" if m.via is Via.LOCAL_ENDPOINT else "Service"
        return f"{kind} {namespace}/{m.source}"

    def _tell_exclusions(self) -> None:
        """Once per cluster, when its mirrors become orphans or lose a name clash."""
        for counter, seen, told in (
            (self._orphans, self._orphaned_clusters, diagnosis.orphaned),
            (self._clashes, self._clashed_clusters, diagnosis.name_clash),
        ):
            now = {c for c, n in counter.items() if n > 0}
            for c in sorted(now - seen):
                self._told.append(told(c, counter[c]))
            seen.clear()
            seen.update(now)

    def _tell_links(self, quiet: bool) -> None:
        """When a linked cluster first contributes members, and when it stops."""
        per_cluster: Counter[str] = Counter()
        for (cluster, _ready), n in self._members.items():
            per_cluster[cluster] += n
        clusters = {c for c, n in per_cluster.items() if n > 0}
        if not quiet:
            for c in sorted(clusters - self._clusters):
                self._tell(Notice.LINK_SEEN, f"link {c} seen: {per_cluster[c]} members")
            for c in sorted(self._clusters - clusters):
                self._tell(Notice.LINK_GONE, f"link {c} gone: no members left")
        self._clusters = clusters

    def _count_members(self, tally: Tally | None, sign: int) -> None:
        if tally is None:
            return
        for i in range(0, len(tally), 3):
            tag, cluster, n = tally[i : i + 3]
            if tag is _READY or tag is _NOT_READY:
                self._members[(cluster, tag is _READY)] += sign * n
            elif tag is _ORPHAN:
                self._orphans[cluster] += sign * n
            elif tag is _CLASH:
                self._clashes[cluster] += sign * n
            elif tag is _INVALID:
                self._invalid[cluster] += sign * n
            else:  # "unsafe:<reason>"
                self._unsafe[(cluster, tag.partition(":")[2])] += sign * n


def make_responder(
    zones: Sequence[str], options: ZoneOptions, mcs_zones: Sequence[str] = ()
) -> Responder:
    """The ``--zone`` zones, then the ``--mcs-zone`` ones (KEP-1645 names)."""
    return Responder([*(Zone(z, options) for z in zones),
                      *(McsZone(z, options) for z in mcs_zones)])
