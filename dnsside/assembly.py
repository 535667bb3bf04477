"""Records in, global services out: how Linkerd's mirrors add up to one service.

One global service ``(namespace, name)`` is assembled from the local original
and from objects with *other* names (``<svc>-<cluster>`` root mirrors,
``<pod>-<cluster>`` per-pod mirrors and the slices of each), which the index
finds through :attr:`~dnsside.linkerd.ServiceRecord.original`.

The one tricky rule: a member that must never be served whatever the flags (an
orphaned link's mirror, the loser of a name clash) is not dropped but kept in
``GlobalService.excluded`` with its :class:`~dnsside.diagnosis.Exclusion`, so
`explain` can say why it is missing, and its readiness stays Linkerd's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from dnsside.config import is_dns_label
from dnsside.diagnosis import GATEWAY_FAILING, NO_REMOTE_ENDPOINTS, Exclusion
from dnsside.linkerd import (
    DEFAULT_PROBE_PATH,
    FEDERATED_CLUSTER,
    PROBE_PORT_NAME,
    LinkRecord,
    Port,
    Role,
    ServiceRecord,
    SliceRecord,
    Via,
)


@dataclass(frozen=True, slots=True)
class Member:
    """One address holder of a global service: a pod, or a whole cluster behind a ClusterIP."""

    cluster: str
    hostname: str | None  # None for a cluster-level member
    addresses: tuple[str, ...]
    ports: tuple[Port, ...]
    ready: bool
    via: Via
    # The Service it comes from or, for a local endpoint, its EndpointSlice: a name the
    # record already holds, so 100k members cost no new strings. `explain` spells it out.
    source: str
    why_not_ready: str = ""
    exclusion: Exclusion | None = None  # set on the members of GlobalService.excluded

    @property
    def local(self) -> bool:
        return self.via.local


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


def dashed_ip(address: str) -> str:
    """The hostname Kubernetes DNS gives an endpoint without one: 10.42.1.10 → 10-42-1-10."""
    return address.replace(".", "-").replace(":", "-")


def _local_members(
    svc: ServiceRecord, slices: Sequence[SliceRecord], cluster_name: str
) -> list[Member]:
    if not svc.headless:
        ready = any(s.has_ready_endpoint for s in slices)
        return [
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
        ]
    return endpoint_members(slices, cluster_name, Via.LOCAL_ENDPOINT)


def endpoint_members(slices: Sequence[SliceRecord], cluster: str, via: Via) -> list[Member]:
    """One member per endpoint hostname of a headless Service's slices: the endpoint's
    hostname, else (local only, as dnsside always did) its Pod's name, else its dashed
    address as Kubernetes DNS names it. A dual-stack pod shows up once per address
    family, in two slices, under the same hostname: merge those."""
    pod_names = via is Via.LOCAL_ENDPOINT
    merged: dict[str, tuple[list[str], list[Port], bool, str]] = {}
    for s in sorted(slices, key=lambda s: s.name):
        for e in s.endpoints:
            if not e.addresses:
                continue
            host = (e.hostname or (e.pod_name if pod_names else None)
                    or dashed_ip(e.addresses[0])).lower()
            if not is_dns_label(host):
                continue
            addrs, ports, ready, first_slice = merged.setdefault(host, ([], [], False, s.name))
            addrs.extend(a for a in e.addresses if a not in addrs)
            ports.extend(p for p in s.ports if p not in ports)
            if e.ready and not ready:
                merged[host] = (addrs, ports, True, first_slice)
    members = []
    for host, (addrs, ports, ready, first_slice) in sorted(merged.items()):
        members.append(
            Member(
                cluster=cluster,
                hostname=host,
                addresses=tuple(addrs),
                ports=tuple(ports),
                ready=ready,
                via=via,
                source=first_slice,
                why_not_ready="" if ready else "endpoint condition ready is false",
            )
        )
    return members


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


def assemble(
    namespace: str,
    name: str,
    local: ServiceRecord | None,
    local_slices: Sequence[SliceRecord],
    mirrors: Iterable[tuple[ServiceRecord, Sequence[SliceRecord]]],
    *,
    cluster_name: str,
    include_local: bool = True,
    include_federated: bool = True,
    linked_clusters: Collection[str] | None = None,
    failing_gateways: Collection[str] = (),
    flat: Sequence[tuple[ServiceRecord, Sequence[SliceRecord]]] = (),
) -> GlobalService | None:
    """Build the global service ``(namespace, name)``, or None when it does not exist.

    It exists when a mirror of a linked cluster (or a federated Service) exists, or the
    local Service is exported. ``linked_clusters`` are the Links' target clusters, None
    when the Links cannot be read (then nothing is an orphan). Mirrors of any other
    cluster are orphans: excluded, and on their own they make a service with no members
    (so ``explain`` can still say why). Root headless mirrors make the service exist but
    contribute no member themselves: their pods arrive as per-pod mirrors.

    ``flat`` are the linked clusters' own headless Services of this name, watched
    directly (``--flat-network``): each makes the service exist and adds its pods by
    their own addresses, and that cluster's mirrors of it are left out (one cluster's
    pods appear once).
    """
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
    headless = headless or bool(flat)
    flat_clusters = {svc.cluster for svc, _ in flat}
    excluded = [
        _excluded(_mirror_member(svc, slices, ()), Exclusion.ORPHANED)
        for svc, slices in sorted(orphans, key=lambda ms: (ms[0].cluster, ms[0].hostname,
                                                           ms[0].name))
        if svc.role is not Role.HEADLESS_ROOT and svc.cluster_ips
    ]
    if not live and not exported and not flat:
        return GlobalService(namespace, name, (), tuple(excluded), headless)
    members: list[Member] = []
    if include_local and local is not None and local.role is Role.LOCAL:
        members.extend(_local_members(local, local_slices, cluster_name))
    candidates: list[Member] = []
    for svc, slices in sorted(flat, key=lambda ms: ms[0].cluster):
        candidates.extend(endpoint_members(slices, svc.cluster, Via.FLAT_NETWORK))
    for svc, slices in sorted(live, key=lambda ms: (ms[0].cluster, ms[0].hostname, ms[0].name)):
        if svc.role not in _MEMBER_ROLES or not svc.cluster_ips:
            continue
        if svc.role is Role.FEDERATED and not include_federated:
            continue
        member = _mirror_member(svc, slices, failing_gateways)
        if svc.cluster in flat_clusters:
            excluded.append(_excluded(member, Exclusion.SERVED_FLAT))
            continue
        candidates.append(member)
    taken = {(m.cluster, m.hostname) for m in members}
    for member in candidates:
        if (member.cluster, member.hostname) in taken:
            # Never two records for one name: the local member (or the first mirror, by
            # name) wins, everywhere at once since every RRset is built from `members`.
            excluded.append(_excluded(member, Exclusion.NAME_CLASH))
            continue
        taken.add((member.cluster, member.hostname))
        members.append(member)
    return GlobalService(namespace, name, tuple(members), tuple(excluded), headless)


def _excluded(member: Member, why: Exclusion) -> Member:
    """``member`` with the reason it is left out. Its readiness stays Linkerd's: an orphan
    is typically still *ready*, which is the whole trouble, and `explain` says so; it is
    kept out of the answers by living in ``GlobalService.excluded``, not ``members``."""
    return Member(member.cluster, member.hostname, member.addresses, member.ports,
                  member.ready, member.via, member.source, why.why(member.cluster), why)


def probe_url(svc: ServiceRecord, link: LinkRecord | None) -> str | None:
    """``http://<ClusterIP>:<mc-probe port><path>`` of a gateway probe Service, as Linkerd's
    probe worker builds it; None when the Service has no ClusterIP or no probe port."""
    if svc.role is not Role.GATEWAY_PROBE or not svc.cluster_ips:
        return None
    port = next((p.port for p in svc.ports if p.name == PROBE_PORT_NAME), None)
    if port is None:
        port = svc.ports[0].port if len(svc.ports) == 1 else None
    if port is None:
        return None
    ip = svc.cluster_ips[0]
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{link.probe_path if link is not None else DEFAULT_PROBE_PATH}"
