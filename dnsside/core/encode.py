"""The DNS contract: which names exist and what each answers, encoded before any query.

:func:`encode_service` turns one :class:`~dnsside.core.assembly.GlobalService` into
pre-encoded :class:`~dnsside.dns.wire.Answer` objects keyed by question. The index
runs it when a service changes, never per query. Each zone names things by one
of two schemes (their grammar is :mod:`dnsside.dns.names`, which writes every owner
name here), each one encoder: :func:`_encode_in_zone` for ``--zone`` and
:func:`_encode_mcs` for ``--mcs-zone``, the Multi-Cluster Services names of
KEP-1645; which names of the grammar exist is decided here. The query path
(:mod:`dnsside.dns.responder`) does not know there are two.

Answers are encoded once, for a lower-case question, and
reused for every query of that name whatever its case. That is sound because
every name inside an encoded body is either spelled out in full or is a
compression pointer into the question at offset 12, and a question that
differs only in case has the same length, so every offset stays valid.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from operator import attrgetter
from typing import cast

from dnsside.core.assembly import GlobalService
from dnsside.core.locality import answering
from dnsside.core.members import Member
from dnsside.core.srv import KeptAnswers, Target, fit, srv_answers
from dnsside.core.steps import Steps, chunks, finish
from dnsside.dns.names import (
    MCS,
    SVC_GLOBAL,
    cluster_name,
    member_name,
    service_name,
)
from dnsside.dns.wire import (
    AAAA,
    AT_QUESTION,
    CLASS_IN,
    MAX_BODY,
    NOERROR,
    SRV,
    A,
    Answer,
    Ring,
    pack_addresses,
    rr_head,
)
from dnsside.dns.zone import Zone, ZoneOptions
from dnsside.model.linkerd import Port, Via

# Members encoded in one step of a rebuild (those not encoded ahead): a few milliseconds.
ENCODE_STEP = 500

class MemberWire:
    """One member's pieces in wire form, computed once per rebuild of its service and
    reused by every RRset it appears in (its own name, its cluster, the service, each SRV).
    A big service keeps them from one rebuild to the next (:class:`EncodedMembers`), with
    its own name's answers (``own_a``, ``own_aaaa``): the part of the zone that is this
    pod's, which the publisher adds and removes whole (:meth:`own`).

    The answers are slots of the wire, not a tuple of (question, answer) pairs beside it:
    a big service's pods are most of what the cyclic garbage collector has to look at
    after a change (a full pass comes about once a 12,000-endpoint change, and stalls
    every query for as long as it takes), and each pair and tuple would be two more
    tracked objects a pod (bench/MEMORY_CHURN.md, issue 33 item 12)."""

    __slots__ = ("a", "aaaa", "local", "member", "name", "own_a", "own_aaaa", "owned",
                 "target")

    def __init__(self, member: Member, svc_name: bytes, ttl: int, out: ServiceAnswers) -> None:
        self.member = member
        self.local = member.local
        cluster = out.clusters.get((member.cluster, svc_name))
        if cluster is None:
            cluster = out.clusters[(member.cluster, svc_name)] = cluster_name(member.cluster,
                                                                              svc_name)
        self.name: bytes | None = None
        if member.hostname is not None:
            self.target = self.name = member_name(member.hostname, cluster)
        else:
            self.target = cluster
        # A and AAAA records minus their owner name: the same in every zone and scheme.
        tails = out.tails.get(id(member))
        if tails is None:
            v4, v6 = pack_addresses(member.addresses)
            head_a, head_aaaa = rr_head(A, ttl, 4), rr_head(AAAA, ttl, 16)
            tails = out.tails[id(member)] = (tuple(head_a + p for p in v4),
                                             tuple(head_aaaa + p for p in v6))
        self.a, self.aaaa = tails
        self.own_a: Answer | None = None
        self.own_aaaa: Answer | None = None
        self.owned = 0  # how many of the two

    def own(self) -> list[tuple[bytes, Answer]]:
        """Its own name's answers by question (none for a cluster-level member): made
        when published, not kept."""
        pairs = []
        if self.own_a is not None:
            pairs.append((cast(bytes, self.name) + _TYPE_IN[A], self.own_a))
        if self.own_aaaa is not None:
            pairs.append((cast(bytes, self.name) + _TYPE_IN[AAAA], self.own_aaaa))
        return pairs

    def encode_own(self, out: ServiceAnswers) -> None:
        """Its own name's answers (a pod's; a cluster-level member has no name)."""
        if self.name is not None:
            self.own_a = _one_answer(out, A, [AT_QUESTION + t for t in self.a])
            self.own_aaaa = _one_answer(out, AAAA, [AT_QUESTION + t for t in self.aaaa])
            self.owned = (self.own_a is not None) + (self.own_aaaa is not None)


class EncodedMembers:
    """A big service's members in wire form, kept from one encoding to the next, so a
    change re-encodes the members it changed and nothing else.

    The key is the member object itself (its id, the entry holding it alive): assembly
    hands back the very same :class:`~dnsside.core.members.Member` for an endpoint that
    did not change (:class:`~dnsside.core.members.KeptEndpoints`), and a member is
    immutable, so the same object means the same bytes. Every encoding replaces the kept
    entries with those of the members it met: nothing of a departed member stays.
    ``encoded`` counts the members whose names and records were encoded (not reused).
    """

    __slots__ = ("_kept", "_next", "dropped", "encoded", "srv")

    def __init__(self) -> None:
        self.encoded = 0
        self._kept: dict[bytes, dict[int, MemberWire]] = {}  # by service name, id(member)
        self._next: dict[bytes, dict[int, MemberWire]] = {}
        # What the last encoding let go of, for the caller to free (in steps, or at once).
        self.dropped: list[dict[bytes, dict[int, MemberWire]]] = []
        # The SRV answers as last made, and as made now (srv.KeptSrv).
        self.srv: tuple[KeptAnswers, KeptAnswers] = ({}, {})

    def wires(self, members: list[Member], svc_name: bytes, ttl: int, out: ServiceAnswers
              ) -> Steps[list[MemberWire]]:
        """The members' wires in this zone: those kept, and the others encoded now (with
        their own name's answers); :data:`~dnsside.core.steps.STEP` members a step."""
        kept = self._kept.get(svc_name, {})
        ids = list(map(id, members))
        wires: list[MemberWire | None] = []
        for part in chunks(ids):
            at = len(wires)
            wires.extend(map(kept.get, part))
            missing = [i for i, w in enumerate(wires[at:], at)
                       if w is None or w.member is not members[i]]
            for few in chunks(missing, ENCODE_STEP):  # not encoded ahead: heavier
                for i in few:
                    wires[i] = self._encode(members[i], svc_name, ttl, out)
                yield
            yield
        found = cast(list[MemberWire], wires)
        self._next[svc_name] = dict(zip(ids, found, strict=True))
        return found

    def ahead(self, members: Iterable[Member], zones: Sequence[Zone], options: ZoneOptions,
              gs_name: tuple[str, str]) -> None:
        """Encode, ahead of the rebuild that will need them, the members (of a headless
        service ``gs_name``, namespace and name) not kept yet, in every zone: the rebuild
        finds them by the same member objects. Unused, they go at the next rebuild."""
        out = ServiceAnswers(rotate=options.round_robin)
        chosen = [m for m in members if m.addresses and (m.ready or options.publish_not_ready)]
        namespace, name = gs_name
        for zone in zones:
            svc_name = service_name(name, namespace, zone.services_wire)
            kept = self._kept.setdefault(svc_name, {})
            for m in chosen:
                w = kept.get(id(m))
                if w is None or w.member is not m:
                    kept[id(m)] = self._encode(m, svc_name, options.ttl, out)

    def _encode(self, member: Member, svc_name: bytes, ttl: int, out: ServiceAnswers
                ) -> MemberWire:
        """One member's wire, with its own name's answers."""
        w = MemberWire(member, svc_name, ttl, out)
        w.encode_own(out)
        self.encoded += 1
        return w

    def take_dropped(self) -> list[dict[int, MemberWire]]:
        """What the encodings since the last call let go of (each zone's wires, by
        member), taken by the caller to free."""
        dropped = [wires for d in self.dropped for wires in d.values()]
        self.dropped = []
        return dropped

    def done(self) -> None:
        """The encoding is over: keep what it met; what it did not meet goes to
        ``dropped``, for the caller to free."""
        self.dropped.append(self._kept)
        self._kept, self._next = self._next, {}
        self.srv = (self.srv[1], {})


class _ServiceTarget:
    """A KEP-1645 ClusterIP service as one SRV target, ``<svc>.<ns>.svc.M.``: its
    clusterset IP(s) are the addresses of the members it stands for."""

    __slots__ = ("a", "aaaa", "local", "target")

    def __init__(self, svc_name: bytes, members: Iterable[Member], ttl: int) -> None:
        self.target = svc_name
        self.local = True  # one target for every cluster: no priority to tell apart
        v4, v6 = pack_addresses(a for m in members for a in m.addresses)
        head_a, head_aaaa = rr_head(A, ttl, 4), rr_head(AAAA, ttl, 16)
        self.a = tuple(head_a + p for p in v4)
        self.aaaa = tuple(head_aaaa + p for p in v6)


def _address_answers(out: ServiceAnswers, name: bytes, group: Sequence[Target]) -> None:
    """The A and AAAA answers of ``name``: every address of ``group``, into the service's
    answers."""
    if len(group) == 1:  # a cluster or service of one member: its tails are distinct
        pairs = ((A, [AT_QUESTION + t for t in group[0].a]),
                 (AAAA, [AT_QUESTION + t for t in group[0].aaaa]))
    else:
        pairs = ((A, _group_records(out, group, A)), (AAAA, _group_records(out, group, AAAA)))
    for rtype, rrs in pairs:
        answer = _one_answer(out, rtype, rrs)
        if answer is not None:
            out.answers[name + _TYPE_IN[rtype]] = answer


def _one_answer(out: ServiceAnswers, rtype: int, rrs: list[bytes]) -> Answer | None:
    """The answer of a name with the A (or AAAA) records ``rrs`` (None without any)."""
    if not rrs:
        return None
    if len(rrs) > _FIT_ALWAYS:
        rrs = fit(rrs, MAX_BODY)
    if out.rotate and len(rrs) > 1:
        return Ring(NOERROR, rtype, rrs)  # each name its own turn (dnsside.dns.wire.Ring)
    # The owner is a pointer to the question, so the same addresses make the same bytes
    # under any name: a pod's answer in both schemes, a cluster of one pod. One Answer
    # object serves them all.
    body = b"".join(rrs)
    answer = out.shared.get(body)
    if answer is None:
        answer = out.shared[body] = Answer(NOERROR, rtype, rrs)
    return answer


def _group_records(out: ServiceAnswers, group: Sequence[Target], rtype: int) -> list[bytes]:
    """The distinct A (or AAAA) records of a group's members, in order, as many as could
    fit in an answer and one more (a service of 12,000 pods: the first few thousand).
    Kept for the group while encoding: the service's name and its cluster's often have
    the very same group."""
    found = out.records.get((id(group), rtype))
    if found is None:
        seen: dict[bytes, None] = {}
        tails = chain.from_iterable(map(_TAILS[rtype], group))
        while len(seen) <= _MAX_RECORDS:
            more = list(islice(tails, _MAX_RECORDS + 1 - len(seen)))
            if not more:
                break
            seen.update(dict.fromkeys(more))
        found = out.records[(id(group), rtype)] = (group, [AT_QUESTION + t for t in seen])
    return found[1]


# Address records are at most 2 + 10 + 16 bytes: this many always fit in MAX_BODY; and
# at least 2 + 10 + 4: no more than this many ever fit.
_FIT_ALWAYS = MAX_BODY // 28
_MAX_RECORDS = MAX_BODY // 16
_TAILS = {A: attrgetter("a"), AAAA: attrgetter("aaaa")}
_TYPE_IN = {t: struct.pack("!HH", t, CLASS_IN) for t in (A, AAAA, SRV)}  # QTYPE, QCLASS


@dataclass
class ServiceAnswers:
    """Everything one global service contributes to the zone."""

    answers: dict[bytes, Answer] = field(default_factory=dict)
    # Names that exist but own no record (empty non-terminals), for NODATA. A name that
    # owns a record exists by its answer: 100k pod names need no second copy here.
    names: set[bytes] = field(default_factory=set)
    # While encoding only: address answers by body (identical ones become one object),
    # and each member's address record tails by id(member), for the next zone.
    shared: dict[bytes, Answer] = field(default_factory=dict)
    tails: dict[int, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = field(default_factory=dict)
    # Each cluster's name below each service name (one service, a few zones).
    clusters: dict[tuple[str, bytes], bytes] = field(default_factory=dict)
    kept: EncodedMembers | None = None  # while encoding a big service: its kept members
    # While encoding: a group's address records by (id(group), type), with the group.
    records: dict[tuple[int, int], tuple[Sequence[Target], list[bytes]]] = field(
        default_factory=dict)
    rotate: bool = False  # --round-robin: answers of several records rotate
    # A big service's pods' own answers, one wire per pod and zone, kept from one
    # encoding to the next (the same wire: the same answers); None for a small service,
    # whose every answer is in ``answers``.
    parts: list[MemberWire] | None = None

    def every(self) -> dict[bytes, Answer]:
        """Every answer, ``parts`` included (for tests and tools; the publisher diffs parts)."""
        out = dict(self.answers)
        for part in self.parts or ():
            out.update(part.own())
        return out


def published(gs: GlobalService, options: ZoneOptions) -> list[Member]:
    return published_of(gs.members, options)


def encode_service(
    gs: GlobalService, zones: Sequence[Zone], options: ZoneOptions,
    kept: EncodedMembers | None = None,
) -> ServiceAnswers:
    """Pre-encode every answer of ``gs`` in every zone, by each zone's naming scheme.
    No published member → no names. ``kept``: a big service's members as encoded last
    time (updated here); the pods' own answers then come in ``parts``."""
    out = finish(encode_steps(gs, zones, options, kept))
    if kept is not None:
        kept.dropped.clear()
    return out


def encode_steps(
    gs: GlobalService, zones: Sequence[Zone], options: ZoneOptions,
    kept: EncodedMembers | None = None,
) -> Steps[ServiceAnswers]:
    """:func:`encode_service` in steps (:mod:`dnsside.core.steps`): a pass over the
    members yields every :data:`~dnsside.core.steps.STEP` of them, and each aggregate
    answer (the service's, a cluster's, an SRV) is a step. What ``kept`` let go of is
    left in ``kept.dropped`` for the caller to free."""
    out = ServiceAnswers(rotate=options.round_robin)
    members: list[Member] = []
    for part in chunks(gs.members):
        members.extend(published_of(part, options))
        yield
    if not members:
        if kept is not None:
            kept.done()
        return out
    if kept is not None:
        out.parts = []
        out.kept = kept
    for zone in zones:
        yield from _ENCODERS[zone.scheme](gs, members, zone.services_wire, options, out)
    if kept is not None:
        kept.done()
    return out


def published_of(members: Iterable[Member], options: ZoneOptions) -> list[Member]:
    return [m for m in members if m.addresses and (m.ready or options.publish_not_ready)]


def _wires(out: ServiceAnswers, members: list[Member], svc_name: bytes, ttl: int
           ) -> Steps[list[MemberWire]]:
    kept = out.kept
    if kept is None:
        return [MemberWire(m, svc_name, ttl, out) for m in members]
    return (yield from kept.wires(members, svc_name, ttl, out))


def _pods(out: ServiceAnswers, wires: list[MemberWire]) -> Steps[None]:
    """The pods' own names' answers: into the service's answers, or (a big service) its
    ``parts``, encoded when their wire was."""
    parts = out.parts
    if parts is not None:
        for part in chunks(wires):
            parts.extend(w for w in part if w.owned)
            yield
        return
    for w in wires:
        w.encode_own(out)
        out.answers.update(w.own())



def _encode_in_zone(
    gs: GlobalService, members: list[Member], zone: bytes, options: ZoneOptions,
    out: ServiceAnswers,
) -> Steps[None]:
    """The ``--zone`` names: ``<svc>.<ns>.Z``, ``<cluster>.<svc>.<ns>.Z``,
    ``<hostname>.<cluster>.<svc>.<ns>.Z`` and the SRV names below ``<svc>.<ns>.Z``."""
    svc_name = service_name(gs.name, gs.namespace, zone)
    wires = yield from _wires(out, members, svc_name, options.ttl)
    own = _own(gs, members, wires)  # the service's own name: --locality
    _address_answers(out, svc_name, own)
    yield
    clusters = list(map(_CLUSTER, wires))
    by_cluster: dict[str, list[MemberWire]] = {}
    if clusters.count(clusters[0]) == len(clusters):  # one cluster (a big service, often)
        by_cluster[clusters[0]] = wires
    else:
        for w, cluster in zip(wires, clusters, strict=True):
            by_cluster.setdefault(cluster, []).append(w)
    for cluster, group in by_cluster.items():
        _address_answers(out, cluster_name(cluster, svc_name), group)
        yield
    yield from _pods(out, wires)
    yield from srv_answers(out.answers, out.names, out.rotate, svc_name, own,
                           list(map(_PORTS, own)), options, out.kept.srv if out.kept else None)


_PORTS = attrgetter("member.ports")  # a wire's member's ports
_CLUSTER = attrgetter("member.cluster")


def _own(gs: GlobalService, members: list[Member], wires: list[MemberWire]
         ) -> list[MemberWire]:
    """The wires of the members the service's own name answers (all but under --locality
    local-first while a local member is ready); ``wires`` are ``members``'."""
    chosen = answering(gs, members)
    return wires if chosen is members else [w for w in wires if w.member.via.local]


def _encode_mcs(
    gs: GlobalService, members: list[Member], services: bytes, options: ZoneOptions,
    out: ServiceAnswers,
) -> Steps[None]:
    """The Multi-Cluster Services names (KEP-1645 ``specification.md``) below
    ``svc.M`` (``services``), from the same members as :func:`_encode_in_zone`.

    Headless (§2.4): ``<svc>.<ns>.svc.M`` holds every published member's address, and
    each pod member has ``<hostname>.<clusterid>.<svc>.<ns>.svc.M`` (cluster id = the
    Linkerd link name), which SRV points at. A cluster-level member of a headless
    service (a link with headless mirroring off) has no name of its own: it is in the
    service's A/AAAA, not in SRV. ClusterIP (§2.3): the federated Service's ClusterIP is
    the clusterset IP when there is one, else every member's ClusterIP stands in; SRV
    points at ``<svc>.<ns>.svc.M``. Never records at ``<clusterid>.<svc>.<ns>.svc.M``
    (§2.3.4, §2.4.4: no per-cluster subsets); where pod names exist below it, that name
    is an empty non-terminal, NODATA (RFC 8020: NXDOMAIN would deny the pod names to a
    QNAME-minimising resolver, and a secondary serving the transferred zone says NODATA
    too), else NXDOMAIN.
    """
    svc_name = service_name(gs.name, gs.namespace, services)
    if not gs.local_exported:  # only exporting clusters' members belong (KEP-1645)
        members = [m for m in members if not m.via.local]
        if not members:
            return
    targets: Sequence[Target]
    ports: list[tuple[Port, ...]]
    if gs.headless:
        wires = yield from _wires(out, members, svc_name, options.ttl)
        own = _own(gs, members, wires)
        _address_answers(out, svc_name, own)
        yield
        yield from _pods(out, wires)
        out.names.update(cluster_name(c, svc_name)
                         for c in {w.member.cluster for w in wires if w.name is not None})
        targets = [w for w in own if w.name is not None]
        ports = list(map(_PORTS, targets))
    else:
        own_members = answering(gs, members)
        chosen = [m for m in own_members if m.via is Via.FEDERATED] or own_members
        service = _ServiceTarget(svc_name, chosen, options.ttl)
        _address_answers(out, svc_name, [service])
        targets = [service]
        ports = [tuple(dict.fromkeys(p for m in chosen for p in m.ports))]
    yield from srv_answers(out.answers, out.names, out.rotate, svc_name, targets, ports,
                           options, out.kept.srv if out.kept else None)


_ENCODERS = {SVC_GLOBAL: _encode_in_zone, MCS: _encode_mcs}  # Zone.scheme → its encoder
