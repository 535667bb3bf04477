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
from dataclasses import dataclass, field, replace
from typing import Protocol

from dnsside.config import is_dns_label
from dnsside.core import diagnosis
from dnsside.core.diagnosis import GATEWAY_FAILING, NO_REMOTE_ENDPOINTS, Exclusion
from dnsside.model.addresses import Unsafe, describe, unsafe_address
from dnsside.model.linkerd import (
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
from dnsside.model.locality import Locality, LocalityAnnotation


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


def dashed_ip(address: str) -> str:
    """The hostname Kubernetes DNS gives an endpoint without one: 10.42.1.10 → 10-42-1-10."""
    return address.replace(".", "-").replace(":", "-")


# The longest DNS name, in wire octets; what the default zone `svc-global.` adds to every
# name (its labels and the root); the protocols an SRV name has a label for.
MAX_NAME_OCTETS = 255
DEFAULT_ZONE_OCTETS = 12
PROTOCOLS = frozenset({"TCP", "UDP", "SCTP"})


def split_addresses(addresses: tuple[str, ...]
                    ) -> tuple[tuple[str, ...], list[tuple[str, Unsafe]]]:
    """(the addresses a pod or Service can own, the others with why not)."""
    bad: list[tuple[str, Unsafe]] = []
    if len(addresses) == 1:  # most members: one pod, one ClusterIP
        reason = unsafe_address(addresses[0])
        if reason is None:
            return addresses, bad
        return (), [(addresses[0], reason)]
    bad = [(a, reason) for a in addresses if (reason := unsafe_address(a)) is not None]
    if not bad:
        return addresses, bad
    refused = {a for a, _ in bad}
    return tuple(a for a in addresses if a not in refused), bad


class Screen:
    """What of one global service's members may be published, checked as it is assembled.

    ``zone_octets`` is what the longest served zone adds to a name below it (``<ns>.Z``
    or ``<ns>.svc.M``, in wire octets with the root): every name of the service must fit
    in 255 octets in every zone. What is refused is collected in ``excluded``.
    """

    def __init__(self, namespace: str, name: str, zone_octets: int) -> None:
        self.base = 2 + len(name) + len(namespace) + zone_octets  # <svc>.<ns>.<zone>
        self.svc = f"{name}.{namespace}.<zone>"
        # Could a member's name (<host>.<cluster>.<svc>...), a port's SRV name
        # (_<port>._<proto>.<svc>...) be too long? Rarely: only then are they measured.
        self.long_names = self.base + 2 * 64 > MAX_NAME_OCTETS
        self.long_ports = self.base + 4 + 63 + 4 > MAX_NAME_OCTETS
        self.excluded: list[Member] = []
        self._good_ports: set[int] = set()  # ids of port tuples checked (alive meanwhile)

    def name_problem(self, cluster: str, hostname: str | None) -> str:
        """Why a member's own name cannot be published ("" when it can)."""
        if not self.long_names:
            return ""
        octets = self.base + 1 + len(cluster) + (1 + len(hostname) if hostname else 0)
        if octets <= MAX_NAME_OCTETS:
            return ""
        name = f"{hostname}.{cluster}.{self.svc}" if hostname else f"{cluster}.{self.svc}"
        return diagnosis.name_too_long(name, octets)

    def ports(self, ports: tuple[Port, ...], left_out: Member) -> tuple[Port, ...]:
        """The ports an SRV name can carry; the others are left out as ``left_out`` with
        them (one per object that holds them)."""
        if id(ports) in self._good_ports:  # port tuples are shared: most were seen already
            return ports
        bad: list[tuple[Port, str]] = []
        for p in ports:
            if p.protocol not in PROTOCOLS:
                bad.append((p, diagnosis.invalid_protocol(p.protocol)))
            elif p.name and not is_dns_label(p.name):
                bad.append((p, diagnosis.invalid_label("name", p.name)))
            elif p.name and self.long_ports and (
                    octets := self.base + 4 + len(p.name) + len(p.protocol)) > MAX_NAME_OCTETS:
                bad.append((p, diagnosis.name_too_long(
                    f"_{p.name}._{p.protocol.lower()}.{self.svc}", octets)))
        if not bad:
            self._good_ports.add(id(ports))
            return ports
        why = diagnosis.bad_ports([f"{p.name or '-'}/{p.protocol}:{p.port}: {w}"
                                   for p, w in bad])
        self.left_out(replace(left_out, addresses=(), ports=tuple(p for p, _ in bad)),
                      Exclusion.INVALID_NAME, why)
        return tuple(p for p in ports if all(p is not b for b, _ in bad))

    def member(self, m: Member) -> Member | None:
        """A member with one name (a ClusterIP, a per-pod mirror): its name, its
        addresses and its ports checked; None when nothing of it may be published."""
        problem = self.name_problem(m.cluster, m.hostname)
        if problem:
            self.left_out(m, Exclusion.INVALID_NAME, problem)
            return None
        good, bad = split_addresses(m.addresses)
        if bad:
            self.left_out(replace(m, addresses=tuple(a for a, _ in bad)),
                          Exclusion.UNSAFE_ADDRESS, diagnosis.unsafe_addresses(bad))
            if not good:
                return None
        ports = self.ports(m.ports, m)
        if good is m.addresses and ports is m.ports:
            return m
        return replace(m, addresses=good, ports=ports)

    def left_out(self, m: Member, why: Exclusion, text: str) -> None:
        self.excluded.append(_excluded(m, why, text))


def _local_members(
    svc: ServiceRecord, slices: Sequence[SliceRecord], cluster_name: str, screen: Screen
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
    return endpoint_members(slices, cluster_name, Via.LOCAL_ENDPOINT, screen)


def endpoint_members(slices: Sequence[SliceRecord], cluster: str, via: Via, screen: Screen
                     ) -> list[Member]:
    """One member per endpoint hostname of a headless Service's slices, or, for an
    endpoint without one (a Deployment's pods), one per address named by the address with
    dashes, as Kubernetes DNS names it (10-42-1-10, fd00-42--20-5), in every zone and
    from every source. A dual-stack pod with a hostname shows up once per address family,
    in two slices, under the same hostname: merge those. What ``screen`` refuses (an
    endpoint's unsafe addresses, a bad hostname, a slice's bad ports) it keeps, per
    slice."""
    merged: dict[str, tuple[list[str], list[Port], bool, str]] = {}
    for s in sorted(slices, key=lambda s: s.name):
        slice_ports = screen.ports(s.ports, Member(cluster, None, (), (), True, via, s.name))
        for e in s.endpoints:
            if not e.addresses:
                continue
            named = ((e.hostname.lower(), e.addresses),) if e.hostname else \
                tuple((dashed_ip(a), (a,)) for a in e.addresses)
            for host, addresses in named:
                _add_endpoint(merged, screen, Member(cluster, host, addresses, slice_ports,
                                                     e.ready, via, s.name))
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


def _add_endpoint(merged: dict[str, tuple[list[str], list[Port], bool, str]], screen: Screen,
                  endpoint: Member) -> None:
    """One endpoint (one hostname, or one dashed address) into ``merged``, by name, with
    what ``screen`` refuses of it left out."""
    host = endpoint.hostname or ""
    good, bad = split_addresses(endpoint.addresses)
    problem = (diagnosis.invalid_label("hostname", host) if not is_dns_label(host)
               else screen.name_problem(endpoint.cluster, host))
    if problem:
        screen.left_out(endpoint, Exclusion.INVALID_NAME, problem)
        return
    if bad:
        screen.left_out(replace(endpoint, addresses=tuple(a for a, _ in bad)),
                        Exclusion.UNSAFE_ADDRESS, diagnosis.unsafe_addresses(bad))
        if not good:
            return
    addrs, ports, ready, first_slice = merged.setdefault(host, ([], [], False,
                                                                 endpoint.source))
    addrs.extend(a for a in good if a not in addrs)
    ports.extend(p for p in endpoint.ports if p not in ports)
    if endpoint.ready and not ready:
        merged[host] = (addrs, ports, True, first_slice)


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
    """
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
        _excluded(_mirror_member(svc, slices, ()), Exclusion.ORPHANED)
        for svc, slices in sorted(orphans, key=lambda ms: (ms[0].cluster, ms[0].hostname,
                                                           ms[0].name))
        if svc.role is not Role.HEADLESS_ROOT and svc.cluster_ips
    ]
    if not live and not exported and not flat:
        return GlobalService(namespace, name, (), tuple(excluded), headless, False, locality,
                             locality_from, annotation, has_local)
    screen = Screen(namespace, name, view.zone_octets)
    members: list[Member] = []
    if view.include_local and local is not None and local.role is Role.LOCAL:
        members.extend(_local_members(local, local_slices, view.cluster_name, screen))
    candidates: list[Member] = []
    for svc, slices in sorted(flat, key=lambda ms: ms[0].cluster):
        candidates.extend(endpoint_members(slices, svc.cluster, Via.FLAT_NETWORK, screen))
    for svc, slices in sorted(live, key=lambda ms: (ms[0].cluster, ms[0].hostname, ms[0].name)):
        if svc.role not in _MEMBER_ROLES or not svc.cluster_ips:
            continue
        if svc.role is Role.FEDERATED and not view.include_federated:
            continue
        mirror = _mirror_member(svc, slices, view.failing_gateways)
        if svc.cluster in flat_clusters:
            excluded.append(_excluded(mirror, Exclusion.SERVED_FLAT))
            continue
        screened = screen.member(mirror)
        if screened is not None:
            candidates.append(screened)
    taken = {(m.cluster, m.hostname) for m in members}
    for member in candidates:
        if (member.cluster, member.hostname) in taken:
            # Never two records for one name: the local member (or the first mirror, by
            # name) wins, everywhere at once since every RRset is built from `members`.
            excluded.append(_excluded(member, Exclusion.NAME_CLASH))
            continue
        taken.add((member.cluster, member.hostname))
        members.append(member)
    excluded.extend(screen.excluded)
    return GlobalService(namespace, name, tuple(members), tuple(excluded), headless, exported,
                         locality, locality_from, annotation, has_local)


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


def _excluded(member: Member, why: Exclusion, text: str = "") -> Member:
    """``member`` with the reason it is left out (``text``, else the reason's own). Its
    readiness stays Linkerd's: an orphan is typically still *ready*, which is the whole
    trouble, and `explain` says so; it is kept out of the answers by living in
    ``GlobalService.excluded``, not ``members``."""
    return Member(member.cluster, member.hostname, member.addresses, member.ports,
                  member.ready, member.via, member.source, text or why.why(member.cluster), why)


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
