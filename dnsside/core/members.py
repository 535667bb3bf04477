"""A global service's members: one address holder each, screened once, and a big
headless Service's endpoints kept between assemblies.

A :class:`Member` is a pod or a whole cluster behind a ClusterIP; :class:`Screen`
checks what no source may put into an answer (an address no pod can own, a name DNS
cannot carry) as members are made, never per query. :func:`endpoint_members` makes the
members of a headless Service's EndpointSlices.

The subtle point is what a big Service keeps (:class:`KeptMembers`): a linked cluster
may re-send a slice of 12,000 endpoints with one changed, many times a second. Each
endpoint is compared as the packed text it arrives in (:meth:`Endpoints.pieces`), and
one that did not change gives the very same :class:`Member` object as last time,
without being decoded or screened again; the encoder keeps its wire form by that
object (:class:`~dnsside.core.encode.EncodedMembers`). So one endpoint's change costs
one endpoint, and a member object is never changed in place (they are frozen), so the
same object always means the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import cast

from dnsside.core import diagnosis
from dnsside.core.diagnosis import Exclusion
from dnsside.core.steps import STEP, chunks
from dnsside.dns.names import (
    MAX_NAME_OCTETS,
    MEMBER_OCTETS_MAX,
    PROTOCOL_LABELS,
    SRV_OCTETS_MAX,
    is_dns_label,
    member_octets,
    service_octets,
    srv_octets,
)
from dnsside.model.addresses import Unsafe, unsafe_address
from dnsside.model.endpoints import Endpoint, Endpoints
from dnsside.model.linkerd import Port, ServiceRecord, SliceRecord, Via


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



def dashed_ip(address: str) -> str:
    """The hostname Kubernetes DNS gives an endpoint without one: 10.42.1.10 → 10-42-1-10."""
    return address.replace(".", "-").replace(":", "-")


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
        self.base = service_octets(name, namespace, zone_octets)  # <svc>.<ns>.<zone>
        self.svc = f"{name}.{namespace}.<zone>"
        # Could a member's name (<host>.<cluster>.<svc>...), a port's SRV name
        # (_<port>._<proto>.<svc>...) be too long? Rarely: only then are they measured.
        self.long_names = self.base + MEMBER_OCTETS_MAX > MAX_NAME_OCTETS
        self.long_ports = self.base + SRV_OCTETS_MAX > MAX_NAME_OCTETS
        self.excluded: list[Member] = []
        self._good_ports: set[int] = set()  # ids of port tuples checked (alive meanwhile)

    def name_problem(self, cluster: str, hostname: str | None) -> str:
        """Why a member's own name cannot be published ("" when it can)."""
        if not self.long_names:
            return ""
        octets = member_octets(self.base, cluster, hostname)
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
            if p.protocol not in PROTOCOL_LABELS:
                bad.append((p, diagnosis.invalid_protocol(p.protocol)))
            elif p.name and not is_dns_label(p.name):
                bad.append((p, diagnosis.invalid_label("name", p.name)))
            elif p.name and self.long_ports and (
                    octets := srv_octets(self.base, p.name, p.protocol)) > MAX_NAME_OCTETS:
                bad.append((p, diagnosis.name_too_long(
                    f"_{p.name}.{PROTOCOL_LABELS[p.protocol]}.{self.svc}", octets)))
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
        self.excluded.append(excluded_as(m, why, text))


def endpoint_members(slices: Sequence[SliceRecord], cluster: str, via: Via, screen: Screen,
                     kept: KeptEndpoints | None = None) -> list[Member]:
    """One member per endpoint hostname of a headless Service's slices, or, for an
    endpoint without one (a Deployment's pods), one per address named by the address with
    dashes, as Kubernetes DNS names it (10-42-1-10, fd00-42--20-5), in every zone and
    from every source. A dual-stack pod with a hostname shows up once per address family,
    in two slices, under the same hostname: merge those. What ``screen`` refuses (an
    endpoint's unsafe addresses, a bad hostname, a slice's bad ports) it keeps, per
    slice.

    ``kept``: a big Service's endpoints as met last time: an endpoint that did not change
    gives the very same :class:`Member` object again, unscreened anew."""
    kept = KeptEndpoints() if kept is None else kept
    found: list[Member] = []
    by_slice: dict[str, _KeptSlice] = {}
    for s in sorted(slices, key=lambda s: s.name):
        slice_ports = screen.ports(s.ports, Member(cluster, None, (), (), True, via, s.name))
        before = kept.slices.get(s.name)
        ahead = kept.ahead.pop(s.name, None)
        if before is not None and before.record is s and before.ports is slice_ports:
            now = by_slice[s.name] = before  # the same slice: the same endpoints
        elif ahead is not None and ahead.record is s and ahead.ports == slice_ports:
            now = by_slice[s.name] = ahead  # screened ahead, in steps (screen_ahead)
        else:
            now = by_slice[s.name] = _screen_slice(s, slice_ports, cluster, via, screen,
                                                   before)
        screen.excluded.extend(now.refused)
        found.extend(now.members)
    kept.slices = by_slice
    for name in [name for name in kept.ahead if name not in by_slice]:
        del kept.ahead[name]  # screened ahead for a slice that is gone
    hosts = list(map(_HOSTNAME, found))  # an endpoint's member always has one
    if None in hosts:
        hosts = [h or "" for h in hosts]
    by_host = dict(zip(hosts, found, strict=True))
    if len(by_host) < len(found):
        return _merged(found, kept)
    if kept.by_host is None or kept.by_host.keys() != by_host.keys():
        kept.hosts = sorted(by_host)  # the same hostnames: the same order
    kept.by_host = by_host
    kept.merges = {}
    return list(map(by_host.__getitem__, kept.hosts))


_HOSTNAME = attrgetter("hostname")


def _merged(found: list[Member], kept: KeptEndpoints) -> list[Member]:
    """:func:`endpoint_members` where a hostname has several endpoints: one member each."""
    merged: dict[str, Member | list[Member]] = {}
    for m in found:
        host = m.hostname or ""
        first = merged.get(host)
        if first is None:
            merged[host] = m
        elif isinstance(first, list):
            first.append(m)
        else:
            merged[host] = [first, m]
    merges: dict[str, tuple[tuple[Member, ...], Member]] = {}
    members = []
    for host, one in sorted(merged.items()):
        if isinstance(one, list):
            parts = tuple(one)
            last = kept.merges.get(host)
            if last is None or len(last[0]) != len(parts) or any(
                    a is not b for a, b in zip(last[0], parts, strict=True)):
                last = (parts, _merge(parts))
            merges[host] = last
            members.append(last[1])
        else:
            members.append(one)
    kept.merges = merges
    kept.by_host = None
    return members


NOT_READY_ENDPOINT = "endpoint condition ready is false"


class _KeptSlice:
    """One slice's endpoints screened: per endpoint (its packed text, or itself), the
    members it names and what of it is refused; and all of them, in the slice's order."""

    __slots__ = ("by_endpoint", "members", "ports", "record", "refused")

    def __init__(self, record: SliceRecord, ports: tuple[Port, ...]) -> None:
        self.record = record
        self.ports = ports
        self.by_endpoint: dict[object, Member | _Screened] = {}
        self.members: list[Member] = []
        self.refused: list[Member] = []


# An endpoint screened: the members it names (one per hostname or dashed address, as if
# alone in the Service), and what of it is refused.
_Screened = tuple[tuple[Member, ...], tuple[Member, ...]]


# A mirror's member as kept: its Service, its slices, the failing gateways it was made
# with, the member screened (None: refused whole) and what the screen refused of it.
_KeptMirror = tuple[ServiceRecord, tuple[SliceRecord, ...], frozenset[str], Member | None,
                    tuple[Member, ...]]


# A global service of at least this many members keeps them between assemblies
# (KeptMembers) and their encoding between rebuilds (encode.EncodedMembers); a smaller one
# is done whole every time: cheap, and nothing is kept for it.
KEEP_FROM = 64


class KeptMembers:
    """What one global service keeps of its members between assemblies: its endpoints'
    members, per cluster and source (:class:`KeptEndpoints`)."""

    __slots__ = ("_by_source", "_met", "_mirrors", "_mirrors_met")

    def __init__(self) -> None:
        self._by_source: dict[tuple[str, Via], KeptEndpoints] = {}
        self._met: dict[tuple[str, Via], KeptEndpoints] = {}
        # Each mirror Service's member as screened, by the Service's name, with what it
        # was made of: the Service and slice records and the failing gateways.
        self._mirrors: dict[str, _KeptMirror] = {}
        self._mirrors_met: dict[str, _KeptMirror] = {}

    def mirror(self, svc: ServiceRecord, slices: Sequence[SliceRecord],
               failing: frozenset[str], make: Callable[[], Member], screen: Screen
               ) -> Member | None:
        """A mirror Service's member, screened (None: nothing of it may be published): the
        one kept when made of the very same records and failing gateways, else ``make``'s.
        A big service of Linkerd's per-pod mirrors has one per pod: one changed re-makes
        one."""
        last = self._mirrors.get(svc.name)
        if (last is not None and last[0] is svc and last[2] == failing
                and len(last[1]) == len(slices)
                and all(a is b for a, b in zip(last[1], slices, strict=True))):
            screened, refused = last[3], last[4]
            screen.excluded.extend(refused)
        else:
            mark = len(screen.excluded)
            screened = screen.member(make())
            refused = tuple(screen.excluded[mark:])
        self._mirrors_met[svc.name] = (svc, tuple(slices), failing, screened, refused)
        return screened

    def endpoints(self, cluster: str, via: Via) -> KeptEndpoints:
        found = self._by_source.get((cluster, via))
        if found is None:
            found = KeptEndpoints()
        self._met[(cluster, via)] = found
        return found

    def done(self) -> None:
        """The assembly is over: keep what it met (a cluster gone takes its part along)."""
        self._by_source, self._met = self._met, {}
        self._mirrors, self._mirrors_met = self._mirrors_met, {}

    def peek(self, cluster: str, via: Via, make: bool = False) -> KeptEndpoints | None:
        """What is kept of one cluster and source, for work done ahead (not an assembly);
        ``make``: kept from now on when nothing was (a slice big enough to be worth it
        arriving for a service that was not big)."""
        found = self._by_source.get((cluster, via))
        if found is None and make:
            found = self._by_source[(cluster, via)] = KeptEndpoints()
        return found


class KeptEndpoints:
    """A big headless Service's endpoints (of one cluster and source) as members, kept
    from one assembly to the next, so a slice of 12,000 endpoints with one changed costs
    one endpoint's screening, and the other members stay the same objects (which the
    encoder keeps by, :class:`~dnsside.core.encode.EncodedMembers`). Each assembly
    replaces what is kept with what it met."""

    __slots__ = ("ahead", "by_host", "hosts", "merges", "slices")

    def __init__(self) -> None:
        self.slices: dict[str, _KeptSlice] = {}
        # A slice screened ahead of the assembly that will meet it (screen_ahead), used
        # only if that assembly meets the very same record.
        self.ahead: dict[str, _KeptSlice] = {}
        # The members by hostname, and the hostnames in order, as last assembled: the same
        # hostnames need no sorting again.
        self.by_host: dict[str, Member] | None = None
        self.hosts: list[str] = []
        # A hostname in several endpoints (a dual-stack pod: one per family): its parts
        # and the member they merged into.
        self.merges: dict[str, tuple[tuple[Member, ...], Member]] = {}


def _screen_slice(s: SliceRecord, ports: tuple[Port, ...], cluster: str, via: Via,
                  screen: Screen, before: _KeptSlice | None) -> _KeptSlice:
    """Screen the endpoints of ``s``, reusing those ``before`` (the slice as kept, with the
    same ports) holds unchanged."""
    steps = _screen_slice_steps(s, ports, cluster, via, screen, before, 1 << 30)  # one step
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _screen_slice_steps(s: SliceRecord, ports: tuple[Port, ...], cluster: str, via: Via,
                        screen: Screen, before: _KeptSlice | None, chunk: int
                        ) -> Generator[list[Member], None, _KeptSlice]:
    """:func:`_screen_slice` in steps of ``chunk`` endpoints; each step yields the members
    it made (not reused from ``before``)."""
    known = before.by_endpoint if before is not None and before.ports == ports else {}
    now = _KeptSlice(s, ports)
    distinct = _distinct_ports(ports, before)
    keys = _endpoint_keys(s)
    found: list[Member | _Screened | None] = []
    fresh: dict[object, Member | _Screened] = {}
    for part in chunks(keys, chunk):
        at = len(found)
        found.extend(map(known.get, part))
        made: list[Member] = []
        for i in [i for i, x in enumerate(found[at:], at) if x is None]:  # new or changed
            key = keys[i]
            screened = fresh.get(key)
            if screened is None:
                e = Endpoints.unpack(key) if isinstance(key, str) else key
                assert isinstance(e, Endpoint)
                screened = fresh[key] = _screen_endpoint(e, cluster, via, ports, distinct,
                                                         s.name, screen)
                if isinstance(screened, Member):
                    made.append(screened)
                else:
                    made.extend(screened[0])
            found[i] = screened
        yield made
    now.by_endpoint = dict(zip(keys, cast(list[Member | _Screened], found), strict=True))
    if set(map(type, found)) <= {Member}:  # one member each, none refused
        now.members = cast(list[Member], found)
        return now
    for x in found:
        if isinstance(x, Member):
            now.members.append(x)
        else:
            assert x is not None
            now.members.extend(x[0])
            now.refused.extend(x[1])
    return now


def _distinct_ports(ports: tuple[Port, ...], before: _KeptSlice | None) -> tuple[Port, ...]:
    """The ports every member of a slice holds, each once, in one tuple (the SRV encoder
    goes by the tuples, few and shared, not by member): the kept one when equal."""
    distinct = ports if len(set(ports)) == len(ports) else tuple(dict.fromkeys(ports))
    if before is not None and before.members and before.members[0].ports == distinct:
        return before.members[0].ports
    return distinct


def _endpoint_keys(s: SliceRecord) -> Sequence[object]:
    """Each endpoint of ``s`` as it is compared: its packed text (or the endpoint itself,
    for the rare slice that could not be packed)."""
    endpoints = s.endpoints
    return endpoints.pieces() if isinstance(endpoints, Endpoints) else endpoints


def screen_ahead(s: SliceRecord, kept: KeptEndpoints, cluster: str, via: Via, screen: Screen,
                 chunk: int = STEP) -> Iterator[list[Member]]:
    """Screen slice ``s`` ahead of the assembly that will need it, ``chunk`` endpoints a
    step, reusing what the kept slice of its name holds: the assembly that meets this very
    record takes it whole (:attr:`KeptEndpoints.ahead`). Yields, each step, the members
    it made (for their encoding ahead).

    Nothing of this is trusted later: an assembly that meets another record (a slice
    changed again meanwhile) screens it itself, so a step never taken only costs time."""
    before = kept.slices.get(s.name)
    if before is not None and before.record is s:
        return
    ahead = kept.ahead.get(s.name)
    if ahead is not None and ahead.record is s:
        return
    ports = screen.ports(s.ports, Member(cluster, None, (), (), True, via, s.name))
    kept.ahead.pop(s.name, None)
    kept.ahead[s.name] = yield from _screen_slice_steps(s, ports, cluster, via, screen,
                                                        before, chunk)


def _screen_endpoint(e: Endpoint, cluster: str, via: Via, ports: tuple[Port, ...],
                     distinct: tuple[Port, ...], source: str, screen: Screen
                     ) -> Member | _Screened:
    """One endpoint's members, as if it were the only one of its hostname, and what of it
    ``screen`` refuses (nearly always: one member, nothing refused, and then just it).
    ``ports``: the slice's; a member holds them once each (``distinct``), a refused part
    as the slice has them."""
    if not e.addresses:
        return (), ()
    named = ((e.hostname.lower(), e.addresses),) if e.hostname else \
        tuple((dashed_ip(a), (a,)) for a in e.addresses)
    members: list[Member] = []
    refused: list[Member] = []
    for host, addresses in named:
        endpoint = Member(cluster, host, addresses, ports, e.ready, via, source)
        good, bad = split_addresses(addresses)
        problem = (diagnosis.invalid_label("hostname", host) if not is_dns_label(host)
                   else screen.name_problem(cluster, host))
        if problem:
            refused.append(excluded_as(endpoint, Exclusion.INVALID_NAME, problem))
            continue
        if bad:
            refused.append(excluded_as(replace(endpoint, addresses=tuple(a for a, _ in bad)),
                                     Exclusion.UNSAFE_ADDRESS, diagnosis.unsafe_addresses(bad)))
            if not good:
                continue
        members.append(Member(cluster, host, tuple(dict.fromkeys(good)), distinct,
                              e.ready, via, source,
                              "" if e.ready else NOT_READY_ENDPOINT))
    if len(members) == 1 and not refused:
        return members[0]
    return tuple(members), tuple(refused)


def _merge(parts: tuple[Member, ...]) -> Member:
    """One member of a hostname several endpoints hold: their addresses and ports in order,
    ready when any is, from the first one's slice."""
    addresses: list[str] = []
    ports: list[Port] = []
    for m in parts:
        addresses.extend(a for a in m.addresses if a not in addresses)
        ports.extend(p for p in m.ports if p not in ports)
    ready = any(m.ready for m in parts)
    first = parts[0]
    return Member(first.cluster, first.hostname, tuple(addresses), tuple(ports), ready,
                  first.via, first.source, "" if ready else NOT_READY_ENDPOINT)


def excluded_as(member: Member, why: Exclusion, text: str = "") -> Member:
    """``member`` with the reason it is left out (``text``, else the reason's own). Its
    readiness stays Linkerd's: an orphan is typically still *ready*, which is the whole
    trouble, and `explain` says so; it is kept out of the answers by living in
    ``GlobalService.excluded``, not ``members``."""
    return Member(member.cluster, member.hostname, member.addresses, member.ports,
                  member.ready, member.via, member.source, text or why.why(member.cluster), why)
