"""Records in, global services out: how Linkerd's mirrors add up to one service.

One global service ``(namespace, name)`` is assembled from the local original
and from objects with *other* names (``<svc>-<cluster>`` root mirrors,
``<pod>-<cluster>`` per-pod mirrors and the slices of each), which the index
finds through :attr:`~dnsside.model.linkerd.ServiceRecord.original`.

A member that must never be served whatever the flags (an
orphaned link's mirror, the loser of a name clash) is not dropped but kept in
``GlobalService.excluded`` with its :class:`~dnsside.core.diagnosis.Exclusion`, so
`explain` can say why it is missing, and its readiness stays Linkerd's. The same
holds for what no source may put into an answer, whoever sends it (a linked
cluster's API validates nothing): an address no pod or Service can own
(:mod:`dnsside.model.addresses`) and a name DNS cannot carry (a hostname that is no
label, a port name or protocol an SRV name cannot hold, an owner name over 255
octets with the longest served zone). :class:`Screen` checks them here, once per
assembly, never per query; an endpoint keeps its good addresses (a dual-stack pod
with a bad IPv6 one still answers A) and the bad ones are excluded beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from dnsside.core.diagnosis import GATEWAY_FAILING, NO_REMOTE_ENDPOINTS, Exclusion
from dnsside.core.members import (
    KeptMembers,
    Member,
    Screen,
    endpoint_members,
    excluded_as,
)
from dnsside.dns.names import DEFAULT_ZONE_OCTETS
from dnsside.model.addresses import Unsafe, describe, unsafe_address
from dnsside.model.linkerd import (
    FEDERATED_CLUSTER,
    Role,
    ServiceRecord,
    SliceRecord,
    Via,
)
from dnsside.model.locality import Locality, LocalityAnnotation


@dataclass(frozen=True, slots=True)
class GlobalService:
    """``members`` are what DNS may serve (ready or not); ``excluded`` are members that must
    never be served whatever the flags (an orphaned link's mirrors, the loser of a name
    clash), kept so ``explain`` can say why."""

    namespace: str
    name: str
    members: tuple[Member, ...]
    excluded: tuple[Member, ...] = ()
    headless: bool = False  # the original is headless: members are pods (KEP-1645 names)
    # The local Service carries mirror.linkerd.io/exported: only then do its members belong
    # to the clusterset service of an --mcs-zone (the svc-global zone always has them).
    local_exported: bool = False
    # Which clusters the service's own name answers (dnsside.core.locality says what that
    # makes of the members), and where that came from: "flag" (--locality), "annotation"
    # (the local Service's dnsside.io/locality) or "--no-local" (nothing local to prefer).
    locality: Locality = Locality.ALL
    locality_from: str = "flag"
    locality_annotation: LocalityAnnotation | None = None  # as the local Service has it
    has_local: bool = False  # the local Service exists (with or without endpoints)


def _local_members(
    svc: ServiceRecord, slices: Sequence[SliceRecord], cluster_name: str, screen: Screen,
    kept: KeptMembers,
) -> list[Member]:
    if not svc.headless:
        ready = any(s.has_ready_endpoint for s in slices)
        member = screen.member(
            Member(
                cluster=cluster_name,
                hostname=None,
                addresses=svc.cluster_ips,
                ports=svc.ports,
                ready=ready,
                via=Via.LOCAL_SERVICE,
                source=svc.name,
                why_not_ready="" if ready else "its EndpointSlices have no ready endpoint",
            )
        )
        return [member] if member is not None else []
    return endpoint_members(slices, cluster_name, Via.LOCAL_ENDPOINT, screen,
                            kept.endpoints(cluster_name, Via.LOCAL_ENDPOINT))


def _mirror_member(
    svc: ServiceRecord, slices: Sequence[SliceRecord], failing_gateways: Collection[str]
) -> Member:
    if svc.role is Role.FEDERATED:
        via, cluster = Via.FEDERATED, FEDERATED_CLUSTER
    elif svc.role is Role.POD_MIRROR:
        via, cluster = Via.POD_MIRROR, svc.cluster
    elif svc.remote_discovery:
        via, cluster = Via.REMOTE_DISCOVERY, svc.cluster
    else:
        via, cluster = Via.GATEWAY_MIRROR, svc.cluster
    # Remote-discovery and federated Services have no endpoints at all: meshed clients
    # resolve them through Linkerd's destination controller, so they are always ready.
    ready, why = True, ""
    if via.through_gateway:
        ready = any(s.has_ready_endpoint for s in slices)
        if ready:
            if cluster in failing_gateways:
                ready, why = False, GATEWAY_FAILING.format(cluster=cluster)
        elif slices:
            why = "gateway endpoint not ready (Linkerd's probe of the gateway failing)"
        elif via is Via.GATEWAY_MIRROR:
            # The service mirror writes Endpoints with no subsets for an empty remote
            # service, and Kubernetes then deletes the mirrored EndpointSlices.
            why = NO_REMOTE_ENDPOINTS
        else:
            why = "no EndpointSlice yet"
    return Member(
        cluster=cluster,
        hostname=svc.hostname if svc.role is Role.POD_MIRROR else None,
        addresses=svc.cluster_ips,
        ports=svc.ports,
        ready=ready,
        via=via,
        source=svc.name,
        why_not_ready=why,
    )


_MEMBER_ROLES = (Role.POD_MIRROR, Role.CLUSTER_MIRROR, Role.FEDERATED)
_LINKED_ROLES = (Role.HEADLESS_ROOT, Role.POD_MIRROR, Role.CLUSTER_MIRROR)


class FlatServices(Protocol):
    """The linked clusters' own Services watched directly (``--flat-network``)."""

    def services_of(self, key: tuple[str, str]
                    ) -> Sequence[tuple[ServiceRecord, Sequence[SliceRecord]]]: ...


class _NoFlatNetwork:
    def services_of(self, key: tuple[str, str]
                    ) -> Sequence[tuple[ServiceRecord, Sequence[SliceRecord]]]:
        return ()


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What assembly needs to know of clusters rather than of one service's objects: who
    we are, which clusters are linked, whose gateways fail, which are served directly.
    The index builds a new one whenever the Links or the failing gateways change."""

    cluster_name: str
    include_local: bool = True
    include_federated: bool = True
    # The Links' target clusters, None when the Links cannot be read (no orphans then).
    linked_clusters: frozenset[str] | None = None
    failing_gateways: frozenset[str] = frozenset()
    flat: FlatServices = field(default_factory=_NoFlatNetwork)
    zone_octets: int = DEFAULT_ZONE_OCTETS  # what the longest served zone adds to a name
    locality: Locality = Locality.ALL  # --locality: a local Service's annotation overrides it


def assemble(
    namespace: str,
    name: str,
    local: ServiceRecord | None,
    local_slices: Sequence[SliceRecord],
    mirrors: Iterable[tuple[ServiceRecord, Sequence[SliceRecord]]],
    view: ClusterView,
    kept: KeptMembers | None = None,
) -> GlobalService | None:
    """Build the global service ``(namespace, name)``, or None when it does not exist.

    It exists when a mirror of a linked cluster (or a federated Service) exists, or the
    local Service is exported. Mirrors of a cluster ``view`` does not count as linked
    cluster are orphans: excluded, and on their own they make a service with no members
    (so ``explain`` can still say why). Root headless mirrors make the service exist but
    contribute no member themselves: their pods arrive as per-pod mirrors.

    ``view.flat`` gives the linked clusters' own headless Services of this name, watched
    directly (``--flat-network``): each makes the service exist and adds its pods by
    their own addresses, and that cluster's mirrors of it are left out (one cluster's
    pods appear once).

    Every member passes a :class:`Screen` (``view.zone_octets``: what the longest served
    zone adds to a name): what it refuses is excluded, with its reason.

    ``kept``: what the last assembly of this service kept of its endpoints (updated here):
    an endpoint that did not change is not screened again and is the same member object.
    """
    kept = KeptMembers() if kept is None else kept
    try:
        return _assemble(namespace, name, local, local_slices, mirrors, view, kept)
    finally:
        kept.done()


def _assemble(
    namespace: str,
    name: str,
    local: ServiceRecord | None,
    local_slices: Sequence[SliceRecord],
    mirrors: Iterable[tuple[ServiceRecord, Sequence[SliceRecord]]],
    view: ClusterView,
    kept: KeptMembers,
) -> GlobalService | None:
    linked_clusters = view.linked_clusters
    flat = view.flat.services_of((namespace, name))
    live: list[tuple[ServiceRecord, Sequence[SliceRecord]]] = []
    orphans: list[tuple[ServiceRecord, Sequence[SliceRecord]]] = []
    headless = local is not None and local.role is Role.LOCAL and local.headless
    for svc, slices in mirrors:
        if svc.role in _LINKED_ROLES:
            headless = headless or svc.role is not Role.CLUSTER_MIRROR
            if linked_clusters is not None and svc.cluster not in linked_clusters:
                orphans.append((svc, slices))
                continue
        elif svc.role is not Role.FEDERATED:
            continue
        live.append((svc, slices))
    exported = local is not None and local.exported
    if not live and not exported and not orphans and not flat:
        return None
    locality, locality_from, annotation, has_local = _locality(local, view)
    headless = headless or bool(flat)
    flat_clusters = {svc.cluster for svc, _ in flat}
    excluded = [
        excluded_as(_mirror_member(svc, slices, ()), Exclusion.ORPHANED)
        for svc, slices in sorted(orphans, key=lambda ms: (ms[0].cluster, ms[0].hostname,
                                                           ms[0].name))
        if svc.role is not Role.HEADLESS_ROOT and svc.cluster_ips
    ]
    if not live and not exported and not flat:
        return GlobalService(namespace, name, (), tuple(excluded), headless, False, locality,
                             locality_from, annotation, has_local)
    screen = Screen(namespace, name, view.zone_octets)
    # Blocks of members, each with no name twice (one Service's endpoints, one mirror).
    blocks: list[list[Member]] = []
    if view.include_local and local is not None and local.role is Role.LOCAL:
        blocks.append(_local_members(local, local_slices, view.cluster_name, screen, kept))
    for svc, slices in sorted(flat, key=lambda ms: ms[0].cluster):
        blocks.append(endpoint_members(slices, svc.cluster, Via.FLAT_NETWORK, screen,
                                       kept.endpoints(svc.cluster, Via.FLAT_NETWORK)))
    for svc, slices in sorted(live, key=lambda ms: (ms[0].cluster, ms[0].hostname, ms[0].name)):
        if svc.role not in _MEMBER_ROLES or not svc.cluster_ips:
            continue
        if svc.role is Role.FEDERATED and not view.include_federated:
            continue
        if svc.cluster in flat_clusters:
            excluded.append(excluded_as(_mirror_member(svc, slices, view.failing_gateways),
                                        Exclusion.SERVED_FLAT))
            continue
        screened = kept.mirror(svc, slices, view.failing_gateways, partial(
            _mirror_member, svc, slices, view.failing_gateways), screen)
        if screened is not None:
            blocks.append([screened])
    members = _without_clashes(blocks, excluded)
    excluded.extend(screen.excluded)
    return GlobalService(namespace, name, tuple(members), tuple(excluded), headless, exported,
                         locality, locality_from, annotation, has_local)


def _without_clashes(blocks: list[list[Member]], excluded: list[Member]) -> list[Member]:
    """The blocks' members in order, never two records for one name: the local member (or
    the first mirror, by name) wins, everywhere at once since every RRset is built from
    the members; the others go to ``excluded``. A name is its cluster and hostname, so
    only a block of a cluster met before is checked member by member (a big Service's
    12,000 pods are one block of their own cluster: taken whole)."""
    members: list[Member] = []
    whole: dict[str, list[list[Member]]] = {}  # blocks taken unchecked, by cluster
    taken: dict[str, set[str | None]] = {}  # hostnames by cluster, once checked
    for block in blocks:
        if not block:
            continue
        cluster = block[0].cluster
        if cluster not in whole and cluster not in taken:
            whole[cluster] = [block]
            members.extend(block)
            continue
        hosts = taken.get(cluster)
        if hosts is None:
            hosts = taken[cluster] = {m.hostname for b in whole.pop(cluster) for m in b}
        for member in block:
            if member.hostname in hosts:
                excluded.append(excluded_as(member, Exclusion.NAME_CLASH))
                continue
            hosts.add(member.hostname)
            members.append(member)
    return members


def _locality(local: ServiceRecord | None, view: ClusterView
              ) -> tuple[Locality, str, LocalityAnnotation | None, bool]:
    """The locality in force for a service and where it comes from: the local Service's
    annotation when it holds a known value, else the flag; with --no-local there is nothing
    local to prefer, so every cluster answers whatever either says."""
    if local is None or local.role is not Role.LOCAL:
        return view.locality, "flag", None, False
    annotation = local.locality
    if not view.include_local:
        return Locality.ALL, "--no-local", annotation, True
    if annotation is not None and annotation.value is not None:
        return annotation.value, "annotation", annotation, True
    return view.locality, "flag", annotation, True


_REFUSED = (Exclusion.UNSAFE_ADDRESS, Exclusion.INVALID_NAME)


def refusals(gs: GlobalService | None, objects: Callable[[Member], str]
              ) -> dict[tuple[str, str, Exclusion], list[str]]:
    """What is refused of each object (by cluster, object and kind): the notice's items,
    an unsafe address with its hostname and class, or a name with what is wrong with it."""
    found: dict[tuple[str, str, Exclusion], list[str]] = {}
    for m in gs.excluded if gs is not None else ():
        if m.exclusion not in _REFUSED:
            continue
        items = found.setdefault((m.cluster, objects(m), m.exclusion), [])
        host = f"{m.hostname} " if m.hostname else ""
        if m.exclusion is Exclusion.UNSAFE_ADDRESS:
            items.extend(host + describe(a, unsafe_address(a) or Unsafe.UNSPECIFIED)
                         for a in m.addresses)
        else:
            items.append(f"{host.rstrip()}: {m.why_not_ready}" if host else m.why_not_ready)
    return found
