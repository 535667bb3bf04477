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
from typing import Protocol

from dnsside.core.assembly import GlobalService, Member
from dnsside.core.locality import answering
from dnsside.dns.names import (
    MCS,
    SVC_GLOBAL,
    cluster_name,
    member_name,
    protocol_name,
    service_name,
    srv_name,
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


class _Target(Protocol):
    """What an SRV record points at, and the A/AAAA record tails of its glue."""

    target: bytes
    local: bool  # priority 0 under --srv-priority local-first
    a: tuple[bytes, ...]
    aaaa: tuple[bytes, ...]


class _MemberWire:
    """One member's pieces in wire form, computed once per rebuild of its service and
    reused by every RRset it appears in (its own name, its cluster, the service, each SRV)."""

    __slots__ = ("a", "aaaa", "local", "member", "name", "target")

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


def _address_answers(out: ServiceAnswers, name: bytes, group: Sequence[_Target]) -> None:
    if len(group) == 1:  # a pod's own name (most calls): its tails are distinct already
        pairs = ((A, group[0].a), (AAAA, group[0].aaaa))
    else:
        pairs = ((A, tuple(dict.fromkeys([t for w in group for t in w.a]))),
                 (AAAA, tuple(dict.fromkeys([t for w in group for t in w.aaaa]))))
    for rtype, tails in pairs:
        if tails:
            rrs = [AT_QUESTION + t for t in tails]
            if len(rrs) > _FIT_ALWAYS:
                rrs = _fit(rrs, MAX_BODY)
            if out.rotate and len(rrs) > 1:
                # Each name its own turn (see dnsside.dns.wire.Ring): not shared.
                out.answers[name + _TYPE_IN[rtype]] = Ring(NOERROR, rtype, rrs)
                continue
            # The owner is a pointer to the question, so the same addresses make the same
            # bytes under any name: a pod's answer in both schemes, a cluster of one pod.
            # One Answer object serves them all.
            body = b"".join(rrs)
            answer = out.shared.get(body)
            if answer is None:
                answer = out.shared[body] = Answer(NOERROR, rtype, rrs)
            out.answers[name + _TYPE_IN[rtype]] = answer


# Address records are at most 2 + 10 + 16 bytes: this many always fit in MAX_BODY.
_FIT_ALWAYS = MAX_BODY // 28
_TYPE_IN = {t: struct.pack("!HH", t, CLASS_IN) for t in (A, AAAA, SRV)}  # QTYPE, QCLASS


def _fit(rrs: list[bytes], room: int) -> list[bytes]:
    """Keep as many records as fit in ``room`` bytes (only huge RRsets ever lose any)."""
    total = 0
    for i, rr in enumerate(rrs):
        total += len(rr)
        if total > room:
            return rrs[:i]
    return rrs


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
    rotate: bool = False  # --round-robin: answers of several records rotate


def published(gs: GlobalService, options: ZoneOptions) -> list[Member]:
    return [m for m in gs.members if m.addresses and (m.ready or options.publish_not_ready)]


def encode_service(
    gs: GlobalService, zones: Sequence[Zone], options: ZoneOptions
) -> ServiceAnswers:
    """Pre-encode every answer of ``gs`` in every zone, by each zone's naming scheme.
    No published member → no names."""
    out = ServiceAnswers(rotate=options.round_robin)
    members = published(gs, options)
    if not members:
        return out
    for zone in zones:
        _ENCODERS[zone.scheme](gs, members, zone.services_wire, options, out)
    return out


def _encode_in_zone(
    gs: GlobalService, members: list[Member], zone: bytes, options: ZoneOptions,
    out: ServiceAnswers,
) -> None:
    """The ``--zone`` names: ``<svc>.<ns>.Z``, ``<cluster>.<svc>.<ns>.Z``,
    ``<hostname>.<cluster>.<svc>.<ns>.Z`` and the SRV names below ``<svc>.<ns>.Z``."""
    svc_name = service_name(gs.name, gs.namespace, zone)
    wires = [_MemberWire(m, svc_name, options.ttl, out) for m in members]
    own = _own(gs, members, wires)  # the service's own name: --locality
    _address_answers(out, svc_name, own)
    by_cluster: dict[str, list[_MemberWire]] = {}
    for w in wires:
        by_cluster.setdefault(w.member.cluster, []).append(w)
    for cluster, group in by_cluster.items():
        _address_answers(out, cluster_name(cluster, svc_name), group)
        for w in group:
            if w.name is not None:
                _address_answers(out, w.name, [w])
    _srv_answers(out, svc_name, [(w, p) for w in own for p in w.member.ports], options)


def _own(gs: GlobalService, members: list[Member], wires: list[_MemberWire]
         ) -> list[_MemberWire]:
    """The wires of the members the service's own name answers (all but under --locality
    local-first while a local member is ready); ``wires`` are ``members``'."""
    chosen = answering(gs, members)
    return wires if chosen is members else [w for w in wires if w.member.via.local]


def _encode_mcs(
    gs: GlobalService, members: list[Member], services: bytes, options: ZoneOptions,
    out: ServiceAnswers,
) -> None:
    """The Multi-Cluster Services names (KEP-1645 ``specification.md``) below
    ``svc.M`` (``services``), from the same members as :func:`_encode_in_zone`.

    Headless (§2.4): ``<svc>.<ns>.svc.M`` holds every published member's address, and
    each pod member has ``<hostname>.<clusterid>.<svc>.<ns>.svc.M`` (cluster id = the
    Linkerd link name), which SRV points at. A cluster-level member of a headless
    service (a link with headless mirroring off) has no name of its own: it is in the
    service's A/AAAA, not in SRV. ClusterIP (§2.3): the federated Service's ClusterIP is
    the clusterset IP when there is one, else every member's ClusterIP stands in; SRV
    points at ``<svc>.<ns>.svc.M``. Never a ``<clusterid>.<svc>.<ns>.svc.M`` name (§2.3.4,
    §2.4.4: no per-cluster subsets), so that is NXDOMAIN.
    """
    svc_name = service_name(gs.name, gs.namespace, services)
    if not gs.local_exported:  # only exporting clusters' members belong (KEP-1645)
        members = [m for m in members if not m.via.local]
        if not members:
            return
    pairs: list[tuple[_Target, Port]]
    if gs.headless:
        wires = [_MemberWire(m, svc_name, options.ttl, out) for m in members]
        own = _own(gs, members, wires)
        _address_answers(out, svc_name, own)
        for w in wires:
            if w.name is not None:
                _address_answers(out, w.name, [w])
        pairs = [(w, p) for w in own if w.name is not None for p in w.member.ports]
    else:
        own_members = answering(gs, members)
        chosen = [m for m in own_members if m.via is Via.FEDERATED] or own_members
        service = _ServiceTarget(svc_name, chosen, options.ttl)
        _address_answers(out, svc_name, [service])
        pairs = [(service, p) for p in dict.fromkeys(p for m in chosen for p in m.ports)]
    _srv_answers(out, svc_name, pairs, options)


_ENCODERS = {SVC_GLOBAL: _encode_in_zone, MCS: _encode_mcs}  # Zone.scheme → its encoder


def _srv_answers(
    out: ServiceAnswers, svc_name: bytes, pairs: list[tuple[_Target, Port]], options: ZoneOptions,
) -> None:
    """SRV below a service name, the same in both schemes: the service name answers for
    every port, ``_<port>._<proto>`` for each named one (unnamed ports have none)."""
    if not pairs:
        return
    # One record per target and port number: two port names (or protocols) on one number
    # would otherwise repeat a record (RFC 2181 §5: an RRset holds no duplicates).
    distinct = list({(id(w), p.port): (w, p) for w, p in pairs}.values())
    _put_srv(out, svc_name, svc_name, distinct, options)
    named: dict[tuple[str, str], list[tuple[_Target, Port]]] = {}
    for w, p in pairs:
        if p.name:
            named.setdefault((p.name, p.protocol), []).append((w, p))
    for (port_name, protocol), group_pairs in named.items():
        proto = protocol_name(protocol, svc_name)
        if proto is None:
            continue
        out.names.add(proto)
        try:
            name = srv_name(port_name, proto)
        except ValueError:
            continue
        distinct = list({(id(w), p.port): (w, p) for w, p in group_pairs}.values())
        _put_srv(out, name, svc_name, distinct, options)


def _put_srv(
    out: ServiceAnswers, name: bytes, svc_name: bytes, pairs: list[tuple[_Target, Port]],
    options: ZoneOptions,
) -> None:
    """The SRV answer of ``name`` (``svc_name`` or a ``_port._proto`` name below it) and its
    glue. A glue record's owner is a compression pointer into the SRV record naming its
    target when the answer keeps one order; when the records rotate, a pointer into them
    would point at another record after a turn, so the owners point only at what stays
    put (:func:`_still_glue`)."""
    ttl = options.ttl
    local_first = options.srv_priority == "local-first"

    def priority(w: _Target) -> int:
        return 10 if local_first and not w.local else 0

    per_priority: dict[int, int] = {0: len(pairs)}
    if local_first:
        per_priority = {}
        for w, _ in pairs:
            per_priority[priority(w)] = per_priority.get(priority(w), 0) + 1
    weights = {prio: max(1, 100 // n) for prio, n in per_priority.items()}
    # Offsets below are absolute in the reply: header, then the question (name + 4).
    offset = 12 + len(name) + 4
    answer: list[bytes] = []
    target_at: dict[bytes, tuple[int, _Target]] = {}
    # Everything of a record but its target: the pointer to the question, the RR head
    # (RDLENGTH depends on the target's length), priority, weight and port.
    heads: dict[tuple[int, int, int], bytes] = {}
    size = 0
    for w, p in sorted(pairs, key=lambda wp: priority(wp[0])) if local_first else pairs:
        prio = priority(w) if local_first else 0
        target = w.target
        head = heads.get((prio, p.port, len(target)))
        if head is None:
            head = heads[(prio, p.port, len(target))] = (
                AT_QUESTION + rr_head(SRV, ttl, 6 + len(target))
                + _PACK_SRV(prio, weights[prio], p.port))
        rr = head + target
        if size + len(rr) > MAX_BODY:
            break
        # The glue's owner will point at the target inside this record's RDATA.
        if target not in target_at:
            target_at[target] = (offset + size + 2 + 10 + 6, w)
        answer.append(rr)
        size += len(rr)
    rotate = out.rotate and len(answer) > 1
    additional: list[bytes] = []
    if rotate:
        additional = _still_glue([(target, w) for target, (_, w) in target_at.items()],
                                 {svc_name: 12 + len(name) - len(svc_name)}, offset + size)
    else:
        for target, (at, w) in target_at.items():
            owner = _pointer(at) if at < 0x4000 else target
            additional += [owner + t for t in w.a]
            if w.aaaa:
                additional += [owner + t for t in w.aaaa]
    additional = _fit(additional, MAX_BODY - size)
    out.answers[name + _TYPE_IN[SRV]] = (Ring(NOERROR, SRV, answer, additional) if rotate
                                         else Answer(NOERROR, SRV, answer, (), additional))


_PACK_SRV = struct.Struct("!HHH").pack  # priority, weight, port


def _pointer(at: int) -> bytes:
    return struct.pack("!H", 0xC000 | at)


def _still_glue(targets: list[tuple[bytes, _Target]], known: dict[bytes, int],
                at: int) -> list[bytes]:
    """The glue of a rotating SRV answer, written from offset ``at`` of the reply (just past
    the answer records, whose length no turn changes). Owners are compressed only against
    names that do not move with a turn: ``known`` (the service name inside the question,
    where every target ends) and the glue owners written before, so a target's second
    address record is a pointer to its first, and a pod's owner its hostname label and a
    pointer to its cluster's name, once written."""
    out: list[bytes] = []
    for target, w in targets:
        tails = (*w.a, *w.aaaa)
        if not tails:
            continue
        pos = 0
        while target[pos] and target[pos:] not in known:
            if at + pos < 0x4000:
                known[target[pos:]] = at + pos
            pos += target[pos] + 1
        owner = target[:pos] + _pointer(known[target[pos:]]) if target[pos] else target
        out.append(owner + tails[0])
        at += len(owner) + len(tails[0])
        if len(tails) > 1:
            again = _pointer(known[target]) if target in known else owner
            for tail in tails[1:]:
                out.append(again + tail)
                at += len(again) + len(tail)
    return out
