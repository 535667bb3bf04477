"""The index: source events in, pre-encoded answers out.

It keeps the slim records sources deliver and, for every event, works out which
global services the event touches, rebuilds just those with
:func:`dnsside.core.assembly.assemble`, and hands them to the
:class:`~dnsside.core.publishing.Publisher`, which re-encodes them and swaps their
entries into the responder's tables. Nothing else is rebuilt: the cost of an event
is the size of the services it touches, not the size of the cluster.

The index is a small core over named parts: the local objects
(:class:`~dnsside.core.store.LocalStore`), the Links and their phase
(:class:`~dnsside.core.links.Links`), the linked clusters watched directly
(:class:`~dnsside.core.remotes.FlatNetwork`, whose objects are applied by the same
store code as the local ones), the counts behind the gauges
(:class:`~dnsside.core.counts.Counts`). Each event type has one handler
(:data:`HANDLERS`).

Two inputs belong to whole clusters rather than to objects: the set of linked
clusters (from Links: mirrors of any other cluster are orphans) and the gateways
failing dnsside's probe. They make the :class:`~dnsside.core.assembly.ClusterView`
every assembly reads; when it changes, every global service with a mirror of an
affected cluster is rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dnsside.config import default
from dnsside.core import diagnosis, locality
from dnsside.core.assembly import ClusterView, GlobalService, assemble, refusals
from dnsside.core.counts import Counts, Tally, spilled, tally
from dnsside.core.diagnosis import ConfigWarning, Exclusion, Notice, Told
from dnsside.core.gcpause import bulk
from dnsside.core.links import Links
from dnsside.core.members import KEEP_FROM, KeptMembers, Member, Screen, screen_ahead
from dnsside.core.publishing import Publisher
from dnsside.core.remotes import FlatNetwork
from dnsside.core.steps import Steps, finish
from dnsside.core.store import OBJECT_EVENTS, LocalStore, Store
from dnsside.core.tables import Key
from dnsside.core.view import ReportView
from dnsside.dns.responder import Responder
from dnsside.dns.versions import next_serial
from dnsside.dns.zone import ZoneOptions
from dnsside.model.events import (
    Delete,
    Event,
    Gateway,
    GatewayState,
    Kind,
    LinksUnavailable,
    LinkWatch,
    Remote,
    RemoteStatus,
    Replace,
    SourceError,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import LinkRecord, Role, SliceRecord, Via
from dnsside.model.locality import Locality

# Endpoints screened and encoded in one step of Index.prepare: a few milliseconds.
AHEAD_CHUNK = 500
# A bulk load that leaves this many answers or more is frozen out of later collections
# (dnsside.core.gcpause): about 25,000 tracked objects, a few milliseconds a full pass.
# Below, freezing would cost a pass over the whole process for little.
FREEZE_FROM = 5000


class _GlobalServices(Mapping[Key, GlobalService]):
    """The global services the index publishes, assembled from its records when read
    (only explain and check read them; the index keeps just their tallies)."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def __getitem__(self, key: Key) -> GlobalService:
        if key not in self._index.tallies:
            raise KeyError(key)
        gs = self._index.assemble(key)
        assert gs is not None, key  # a tallied key is one assemble returned a service for
        return gs

    def __contains__(self, key: object) -> bool:
        return key in self._index.tallies

    def __iter__(self) -> Iterator[Key]:
        return iter(self._index.tallies)

    def __len__(self) -> int:
        return len(self._index.tallies)


# A clock the caller owns (:mod:`dnsside.core.build` passes the system's): seconds.
Clock = Callable[[], float]


@dataclass(frozen=True)
class IndexOptions:
    cluster_name: str = "local"
    # The zones served (--zone), the KEP-1645 ones (--mcs-zone), the catalog (--catalog-zone):
    # the responder's, made with the index (dnsside.core.build.make_index).
    zones: tuple[str, ...] = ("svc-global.",)
    mcs_zones: tuple[str, ...] = ()
    catalog_zone: str | None = None
    include_local: bool = True
    include_federated: bool = True
    zone: ZoneOptions = field(default_factory=ZoneOptions)
    # --flat-network-namespaces: where linked clusters' own objects count (empty: all); the
    # source leaves the others out, this is for explain to say so.
    flat_namespaces: tuple[str, ...] = ()
    # --namespace: the only namespaces the source reads (empty: all); the others look
    # empty, and explain says why.
    namespaces: tuple[str, ...] = ()
    links_namespace: str = default("--links-namespace")  # only its Links count
    # Zone versions kept for IXFR (--ixfr-history) where zones are transferred; None: no
    # zone is, and the records are not kept a second time for transfers.
    transfer_history: int | None = None
    # --locality: which clusters a global service's own name answers (a local Service's
    # dnsside.io/locality annotation overrides it).
    locality: Locality = Locality.ALL


@dataclass(slots=True)
class IndexReport:
    """What one :meth:`Index.apply` did, for whoever reports it: the serving side turns it
    into log lines and metrics (the index itself neither logs nor measures)."""

    changed: set[Key]  # global services whose answers or counts changed
    seconds: float  # how long applying the batch took
    told: list[Told] = field(default_factory=list)  # what an operator hears about, once
    synced: bool = False  # this batch completed the initial sync


Observer = Callable[[ReportView, IndexReport], None]


@dataclass(slots=True)
class _Batch:
    """What the events of one batch did, before the rebuild."""

    dirty: set[Key] = field(default_factory=set)  # global services to rebuild
    became_synced: bool = False
    resynced: bool = False  # a complete list arrived: check the configuration again


class Index:
    def __init__(self, responder: Responder, options: IndexOptions,
                 observer: Observer | None = None, *, clock: Clock, timer: Clock) -> None:
        """Built by :func:`dnsside.core.build.make_index` only: ``clock`` (wall seconds)
        numbers versions and dates what Links say, ``timer`` times a batch."""
        self.options = options
        self.observer = observer
        self._clock, self._timer = clock, timer
        self.local = LocalStore()
        self.links = Links(options.links_namespace, clock)
        self.flat = FlatNetwork(options.flat_namespaces)  # --flat-network
        self.counts = Counts()
        # Every global service that exists, by the counts it adds to the metrics.
        self.tallies: dict[Key, Tally] = {}
        self.global_services: Mapping[Key, GlobalService] = _GlobalServices(self)
        # The responder's one writer.
        self._publisher = Publisher(responder, options.zone, options.transfer_history)
        self.responder = responder  # the responder the answers are published to, to ask
        self.gateways: dict[str, tuple[Gateway, str]] = {}  # the prober's view, by cluster
        self.cluster_view = ClusterView(options.cluster_name, options.include_local,
                                options.include_federated, flat=self.flat,
                                zone_octets=self._publisher.zone_octets(),
                                locality=options.locality)
        self.warnings: dict[ConfigWarning, str] = {}  # active configuration warnings
        # What was told refused, of the services that refuse anything (none, usually).
        self._refused: dict[Key, dict[tuple[str, str, Exclusion], int]] = {}
        # The unknown dnsside.io/locality values told, by service (told once each).
        self._unknown_locality: dict[Key, str] = {}
        self._told: list[Told] = []
        # The big global services' members, kept between assemblies (KeptMembers).
        self._kept: dict[Key, KeptMembers] = {}
        self._applying = False  # a batch's steps are under way (apply_steps)
        self.synced = False
        # Until the first version is cut, the serial is the second the index was made: a
        # version of this process is never numbered by an earlier second.
        self._publisher.set_serial(int(clock()))

    @property
    def publisher(self) -> Publisher:
        """The responder's one writer, which holds the zones' versions: serving's
        Versioning cuts them through it, explain reads them (a VersionsView)."""
        return self._publisher

    # ----------------------------------------------------------------- events

    def apply(self, events: Iterable[Event]) -> set[Key]:
        """Apply a batch of events; return the global services whose answers changed."""
        return finish(self.apply_steps(events))

    def apply_steps(self, events: Iterable[Event]) -> Steps[set[Key]]:
        """:meth:`apply` in steps (:mod:`dnsside.core.steps`): a big service's rebuild
        yields every few thousand members, and its answers are written in one step, so a
        change of 12,000 endpoints holds the event loop a few milliseconds at a time.
        A full list (a relist, the initial sync) is applied at once, as one bulk load.

        Until the last step is taken, the index takes no other batch (RuntimeError): the
        steps trust that nothing else changed it meanwhile."""
        if self._applying:
            raise RuntimeError("a batch is being applied in steps: apply one at a time")
        batch = list(events)
        self._applying = True
        try:
            if any(isinstance(e, Replace | Synced) or (isinstance(e, Remote)
                   and isinstance(e.event, Replace)) for e in batch):  # a full list: bulk
                with bulk(self._worth_freezing):
                    return finish(self._apply(batch))
            return (yield from self._apply(batch))
        finally:
            self._applying = False

    def _worth_freezing(self) -> bool:
        """Is the index a bulk load left big enough to keep out of collections
        (:func:`dnsside.core.gcpause.bulk`)? From :data:`FREEZE_FROM` answers."""
        return len(self.responder.answers) >= FREEZE_FROM

    def prepare(self, events: Iterable[Event], chunk: int = AHEAD_CHUNK) -> Iterator[None]:
        """Do ahead, in steps of ``chunk`` endpoints, the work :meth:`apply` of ``events``
        will need for the big services they change: screen a slice whole (its endpoints
        found by their text in the kept slice, or screened) and encode its new members.
        The caller lets others run between two steps, so a slice of 12,000 endpoints all
        changed holds the event loop for one step at a time, then :meth:`apply_steps`
        rebuilds the service in steps too and publishes it in one (never half of it).

        It changes no answer and nothing :meth:`apply` trusts: the assembly takes the slice
        screened ahead only if it meets that very record, finds each member's encoding by
        the member object, or does the work itself, so a step never taken, or another
        batch applied between two steps, only costs time."""
        for event in events:
            cluster, via = self.options.cluster_name, Via.LOCAL_ENDPOINT
            store: Store = self.local
            if isinstance(event, Remote):
                remote = self.flat.clusters.get(event.cluster)
                if remote is None:
                    continue
                cluster, via, store, event = event.cluster, Via.FLAT_NETWORK, remote, event.event
            if not isinstance(event, Upsert) or not isinstance(event.record, SliceRecord):
                continue
            s = event.record
            key = store.key_of(store.services.get((s.namespace, s.service_name)))
            if key is None:
                continue
            # A big slice for a service that was not big (new, or emptied and refilled) is
            # screened ahead too: what it makes is kept from now on.
            big = len(s.endpoints) >= KEEP_FROM
            kept = self._kept.get(key)
            if kept is None and big:
                kept = self._kept[key] = KeptMembers()
            endpoints = kept.peek(cluster, via, make=big) if kept is not None else None
            if endpoints is None:
                continue  # not a big service's endpoints: apply does the little there is
            screen = Screen(key[0], key[1], self.cluster_view.zone_octets)
            for made in screen_ahead(s, endpoints, cluster, via, screen, chunk):
                self._publisher.encode_ahead(key, made)
                yield

    def _apply(self, events: list[Event]) -> Steps[set[Key]]:
        started = self._timer()
        batch = _Batch()
        for event in events:
            HANDLERS[type(event)](self, event, batch)
        dirty = batch.dirty
        dirty |= self._cluster_inputs_changed()
        if self.flat:
            self.flat.forget_unlinked(self.links.targets(), dirty)
        became_synced = batch.became_synced
        if became_synced:
            self.synced = True
            dirty = self._all_keys()
        changed = (yield from self._rebuild(dirty, quiet=became_synced)) if self.synced \
            else set()
        if became_synced:  # where zones are transferred, the first version, numbered by
            # this second (the index's own is no version's: one past it, if the sync took
            # less than a second)
            self._publisher.set_ready(next_serial(self._publisher.serial, self._clock()))
        if self.synced and (became_synced or batch.resynced):
            self._check_configuration()
        told, self._told = self._told, []
        if self.observer is not None:
            self.observer(self, IndexReport(changed, self._timer() - started, told,
                                            became_synced))
        return changed

    def _hear(self, told: Told | None) -> None:
        if told is not None:
            self._told.append(told)

    # The local cluster's objects: the store's, and a Link's also the Links' (whose event
    # says the Link watch follows; a Link list is the complete one).

    def _upsert(self, event: Upsert, batch: _Batch) -> None:
        self.local.upsert(event.record, batch.dirty)
        if isinstance(event.record, LinkRecord):
            self._told.extend(self.links.put(event.record))
            self._hear(self.links.watch(""))

    def _delete(self, event: Delete, batch: _Batch) -> None:
        self.local.delete(event.kind, (event.namespace, event.name), batch.dirty)
        if event.kind is Kind.LINK:
            self._told.extend(self.links.pop((event.namespace, event.name)))
            self._hear(self.links.watch(""))

    def _replace(self, event: Replace, batch: _Batch) -> None:
        self.local.replace(event, batch.dirty)
        batch.resynced = True
        if Kind.LINK in event.kinds:
            self._told.extend(self.links.replace(event.records))
            self._hear(self.links.listed())

    def _remote(self, event: Remote, batch: _Batch) -> None:
        """A linked cluster's own objects, applied as the local ones are, to its own store."""
        store = self.flat.cluster(event.cluster, self.links.targets())
        if store is not None:
            OBJECT_EVENTS[type(event.event)](store, event.event, batch.dirty)

    def _remote_status(self, event: RemoteStatus, batch: _Batch) -> None:
        self._hear(self.flat.update(event, self.links.targets()))

    def _links_unavailable(self, event: LinksUnavailable, batch: _Batch) -> None:
        self._hear(self.links.unavailable(event.reason))

    def _link_watch(self, event: LinkWatch, batch: _Batch) -> None:
        self._hear(self.links.watch(event.reason))

    def _gateway(self, event: GatewayState, batch: _Batch) -> None:
        if event.state is None:
            self.gateways.pop(event.cluster, None)
        else:
            self.gateways[event.cluster] = (event.state, event.detail)

    def _synced(self, event: Synced, batch: _Batch) -> None:
        batch.became_synced = not self.synced

    def _ignored(self, event: SourceError, batch: _Batch) -> None:
        """The source logged it; the index keeps serving what it has."""

    # ----------------------------------------------------------------- cluster-wide inputs

    def _cluster_inputs_changed(self) -> set[Key]:
        """Global services to rebuild because the linked clusters or failing gateways moved."""
        linked = self.links.linked()
        failing = frozenset(c for c, (state, _) in self.gateways.items()
                            if state is Gateway.FAILING)
        before = self.cluster_view
        if linked == before.linked_clusters and failing == before.failing_gateways:
            return set()
        self.cluster_view = replace(before, linked_clusters=linked, failing_gateways=failing)
        mirrors_by_key = self.local.mirrors_by_key
        if (linked is None) != (before.linked_clusters is None):
            return set(mirrors_by_key)  # filtering switched on or off: anything may move
        clusters = failing ^ before.failing_gateways
        if linked is not None and before.linked_clusters is not None:
            clusters |= linked ^ before.linked_clusters
        services = self.local.services
        return {
            key for key, names in mirrors_by_key.items()
            if any(services[(key[0], n)].cluster in clusters for n in names)
        }

    def _check_configuration(self) -> None:
        """Tell, after every (re)sync, the mistakes that silently make answers wrong."""
        links = list(self.links.values()) if self.links.readable else None
        health = diagnosis.mirror_health(self.local.services.records(),
                                         self.local.slices_by_service, links)
        self.warnings = diagnosis.configuration_warnings(self.options.cluster_name, health)
        for message in self.warnings.values():
            self._told.append(Told(Notice.CONFIG_WARNING, message))

    def _all_keys(self) -> set[Key]:
        return self.local.keys() | self.flat.keys()

    # ----------------------------------------------------------------- rebuild

    def assemble(self, key: Key) -> GlobalService | None:
        namespace, name = key
        services = self.local.services
        local = services.get(key)
        if local is not None and local.role is not Role.LOCAL:
            local = None
        mirrors = [
            (services[(namespace, m)], self.local.slices_of(namespace, m))
            for m in sorted(self.local.mirrors_by_key.get(key, ()))
        ]
        kept = self._kept.pop(key, None) or KeptMembers()
        gs = assemble(namespace, name, local,
                      self.local.slices_of(namespace, name) if local is not None else [],
                      mirrors, self.cluster_view, kept)
        if gs is not None and len(gs.members) >= KEEP_FROM:
            self._kept[key] = kept  # a big service: what it keeps spares the next change
        return gs

    def _rebuild(self, dirty: Iterable[Key], quiet: bool = False) -> Steps[set[Key]]:
        """Re-assemble and re-encode ``dirty``; return the keys whose answers or counts
        changed (a service that appeared or went counts as both). A big service is
        published in steps (:meth:`Publisher.publish_steps`), a small one at once."""
        changed: set[Key] = set()
        for key in dirty:
            gs = self.assemble(key)
            if (gs is not None and gs.excluded) or key in self._refused:
                self._tell_refused(key, gs)
            if (gs is not None and gs.locality_annotation is not None) \
                    or key in self._unknown_locality:
                self._tell_unknown_locality(key, gs)
            tallied = tally(gs, self.options.zone.publish_not_ready) if gs is not None else None
            old = self.tallies.get(key)
            if (gs is not None and len(gs.members) >= KEEP_FROM) or self._publisher.keeps(key):
                published = yield from self._publisher.publish_steps(key, gs)  # a big one
            else:
                published = self._publisher.publish(key, gs)
            if not published and tallied == old:
                continue
            before, now = spilled(old), spilled(tallied)
            if before is not now and (not quiet or now is locality.Spill.NO_READY_MEMBER):
                self._hear(locality.moved(key, gs, before, now))  # once per move
            changed.add(key)
            self.counts.add(old, -1)
            self.counts.add(tallied, +1)
            if tallied is None:
                del self.tallies[key]
                if not quiet:
                    self._told.append(Told(Notice.SERVICE_GONE,
                                           "global service {}/{} is gone".format(*key)))
            else:
                if old is None and not quiet:
                    self._told.append(Told(Notice.SERVICE_APPEARED,
                                           "global service {}/{} appeared".format(*key)))
                self.tallies[key] = tallied
        if changed:
            self._told.extend(self.counts.news(quiet))
        return changed

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

    def _tell_unknown_locality(self, key: Key, gs: GlobalService | None) -> None:
        """Once per Service and value: its dnsside.io/locality is no value dnsside knows."""
        annotation = gs.locality_annotation if gs is not None else None
        if annotation is None or annotation.value is not None:
            self._unknown_locality.pop(key, None)
            return
        if self._unknown_locality.get(key) != annotation.written:
            self._unknown_locality[key] = annotation.written
            self._told.append(locality.unknown_annotation(key, annotation,
                                                          self.options.locality.value))

    def _object_of(self, namespace: str, m: Member) -> str:
        """The object a refused member comes from, for the notice."""
        if m.via is Via.FLAT_NETWORK:
            kind = self.flat.object_kind(m.cluster, namespace, m.source)
            return f"{kind} {namespace}/{m.source} (its own API, --flat-network)"
        kind = "EndpointSlice" if m.via is Via.LOCAL_ENDPOINT else "Service"
        return f"{kind} {namespace}/{m.source}"


# Each event type's handler: every event a source yields is applied by exactly one.
HANDLERS: dict[type, Callable[[Index, Any, _Batch], None]] = {
    Upsert: Index._upsert,
    Delete: Index._delete,
    Replace: Index._replace,
    Remote: Index._remote,
    RemoteStatus: Index._remote_status,
    LinksUnavailable: Index._links_unavailable,
    LinkWatch: Index._link_watch,
    GatewayState: Index._gateway,
    Synced: Index._synced,
    SourceError: Index._ignored,
}


__all__ = ["AHEAD_CHUNK", "HANDLERS", "Clock", "Index", "IndexOptions", "IndexReport", "Observer"]
