"""The DNS contract (SPEC §3): which names exist, what each answers, how a query becomes a reply.

Two halves, both pure (no sockets, no clocks):

* **Encoding** — :func:`encode_service` turns one :class:`~dnsside.assembly.GlobalService`
  into pre-encoded :class:`Answer` objects keyed by question. The index runs it
  when a service changes, never per query. Each zone names things by one of two
  schemes, each one encoder: :func:`_encode_in_zone` for ``--zone`` (SPEC §3) and
  :func:`_encode_mcs` for ``--mcs-zone``, the Multi-Cluster Services names of
  KEP-1645 (SPEC §3b). The query path does not know there are two.
* **Answering** — :meth:`Responder.respond` turns query bytes into reply bytes.
  The common case is a header check, a label walk, one dict lookup and a
  concatenation; everything unusual falls to :meth:`Responder._respond_slow`,
  which reads the rest of the packet with a bounded walk that never follows a
  compression pointer.

The one tricky thing: answers are encoded once, for a lower-case question, and
reused for every query of that name whatever its case. That is sound because
every name inside an encoded body is either spelled out in full or is a
compression pointer into the question at offset 12 — and a question that
differs only in case has the same length, so every offset stays valid. A reply
is therefore: the query's ID, patched flags, pre-encoded counts, the question
exactly as the client sent it (RFC 0x20 case echo), and the pre-encoded body.
"""

from __future__ import annotations

import functools
import socket
import struct
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dnsside.assembly import GlobalService, Member
from dnsside.linkerd import Port, Via

A, NS, SOA, TXT, AAAA, SRV, OPT, HINFO, IXFR, AXFR, ANY = (1, 2, 6, 16, 28, 33, 41, 13, 251, 252,
                                                         255)
CLASS_IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
BADVERS = 16

EDNS_PAYLOAD = 1232  # what we advertise, and the most we send over UDP (DNS flag day 2020)
PLAIN_UDP_LIMIT = 512
TCP_LIMIT = 65535
# Room for the largest question (255-byte name + type/class) and an OPT record:
# an encoded body never exceeds this, so a reply always fits a TCP message.
MAX_BODY = TCP_LIMIT - 12 - 259 - 11
_MAX_QUESTION = 259
_MAX_ANSWER_OPT = 11  # the OPT record of an answer (options only ever go on errors)

_QR_AA = 0x8400
_TC = 0x0200
_COPIED_FLAGS = 0x0110  # RD and CD are copied from the query
_DO = 0x8000  # in the OPT record's TTL field: DNSSEC OK
EDE = 15  # RFC 8914 Extended DNS Error option
EDE_NOT_READY, EDE_NOT_AUTHORITATIVE = 14, 20


def _opt_rr(do: bool, ext_rcode: int = 0, options: bytes = b"") -> bytes:
    """Our OPT record: version 0, 1232 bytes, the query's DO bit (RFC 3225 §3), options."""
    return struct.pack("!BHHBBHH", 0, OPT, EDNS_PAYLOAD, ext_rcode, 0, _DO if do else 0,
                       len(options)) + options


def _ede(code: int, text: str) -> bytes:
    data = text.encode()
    return struct.pack("!HHH", EDE, 2 + len(data), code) + data


# Every OPT record a reply can carry, indexed by the query's DO bit (0 or 1): built once.
_OPT_RR = (_opt_rr(False), _opt_rr(True))
_OPT_LEN = len(_OPT_RR[0])
_OPT_BADVERS = (_opt_rr(False, BADVERS >> 4), _opt_rr(True, BADVERS >> 4))
_NOT_READY = _ede(EDE_NOT_READY, "dnsside has not synced its source yet")
_OPT_NOT_READY = (_opt_rr(False, options=_NOT_READY), _opt_rr(True, options=_NOT_READY))
_NOT_AUTH = _ede(EDE_NOT_AUTHORITATIVE, "dnsside serves only its own zones, class IN")
_OPT_NOT_AUTH = (_opt_rr(False, options=_NOT_AUTH), _opt_rr(True, options=_NOT_AUTH))
_PROTO_LABEL = {"TCP": "_tcp", "UDP": "_udp", "SCTP": "_sctp"}

# --------------------------------------------------------------------------- names


def to_wire(name: str) -> bytes:
    """Dotted name → lower-case wire format. Raises ValueError for a name DNS can't carry."""
    labels = [label for label in name.lower().rstrip(".").split(".")] if name.strip(".") else []
    out = bytearray()
    for label in labels:
        raw = label.encode("ascii")
        if not 0 < len(raw) < 64:
            raise ValueError(f"bad DNS label {label!r} in {name!r}")
        out.append(len(raw))
        out += raw
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"name longer than 255 bytes: {name!r}")
    return bytes(out)


# --------------------------------------------------------------------------- answers


class Answer:
    """A reply minus its first four bytes and its question.

    ``body`` holds the answer, authority and additional sections. The OPT record is
    appended at send time, so one body serves clients with and without EDNS.
    Section counts, ``flags`` and ``stat`` are shared objects.

    An answer big enough to miss some UDP size limit also has a ``tail``: the size
    and counts of its prefix without the additional section, for a limit the full
    reply misses, and the offsets where its answer records end, for a limit that
    even the prefix misses: the reply then carries, with TC=1, the answer records
    that fit (RFC 2181 §9), so a stub resolver that never retries over TCP still
    gets addresses. Nearly every answer is small (one pod's address) and has none:
    at 100k members the seven slots here instead of thirteen save 6 MB.
    """

    __slots__ = ("body", "counts", "counts_edns", "flags", "size", "stat", "tail")

    def __init__(
        self, rcode: int, qtype: int, answer: Sequence[bytes], authority: Sequence[bytes] = (),
        additional: Sequence[bytes] = ()
    ) -> None:
        self.stat = _stat(qtype, rcode)  # the key this answer is counted under, shared
        self.flags = _FLAGS[rcode]
        an, ns, ar = len(answer), len(authority), len(additional)
        part = b"".join((*answer, *authority)) if ns else b"".join(answer)
        self.body = part + b"".join(additional) if ar else part
        self.counts, self.counts_edns = _counts(an, ns, ar), _counts(an, ns, ar + 1)
        self.size = 12 + len(self.body)  # reply size minus the question and OPT
        self.tail: _Tail | None = None
        if self.size + _MAX_QUESTION + _MAX_ANSWER_OPT > PLAIN_UDP_LIMIT:
            self.tail = _Tail(an, ns, 12 + len(part), answer)

    @property
    def rcode(self) -> int:
        return self.stat[1]

    @property
    def qtype(self) -> int:
        return self.stat[0]


class _Tail:
    """What only an answer that can outgrow a UDP limit needs (see :class:`Answer`)."""

    __slots__ = ("counts_part", "counts_part_edns", "ends", "size_part")

    def __init__(self, an: int, ns: int, size_part: int, answer: Sequence[bytes]) -> None:
        self.size_part = size_part
        self.counts_part, self.counts_part_edns = _counts(an, ns, 0), _counts(an, ns, 1)
        self.ends: Sequence[int] = _NO_ENDS
        if size_part + _MAX_QUESTION + _MAX_ANSWER_OPT > PLAIN_UDP_LIMIT:
            end, ends = 0, []
            for rr in answer:
                end += len(rr)
                ends.append(end)
            # An array, not a tuple: 2 bytes an offset (a body is under 64 KiB) instead of
            # an int object and a slot (36), on every big RRset (an SRV answer holds one
            # per record).
            self.ends = array("H", ends)


_NO_ENDS: tuple[int, ...] = ()
# The flags of an answer by its RCODE (QR, AA): one int object each, not one per answer.
_FLAGS = {rcode: _QR_AA | rcode for rcode in range(16)}


@functools.lru_cache(maxsize=512)
def _stat(qtype: int, rcode: int) -> tuple[int, int]:
    return (qtype, rcode)


@functools.lru_cache(maxsize=4096)
def _counts(an: int, ns: int, ar: int) -> bytes:
    """QDCOUNT..ARCOUNT; cached, so the thousands of answers with the same counts share it."""
    return struct.pack("!4H", 1, an, ns, ar)


def _rr(owner: bytes, rtype: int, ttl: int, rdata: bytes) -> bytes:
    return owner + struct.pack("!HHIH", rtype, CLASS_IN, ttl, len(rdata)) + rdata


_AT_QUESTION = b"\xc0\x0c"  # compression pointer to the question name


def _packed(addresses: Iterable[str]) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(IPv4, IPv6) addresses in wire form, deduplicated. Addresses were validated and
    normalised when parsed; inet_pton is the C fast path."""
    v4: dict[bytes, None] = {}
    v6: dict[bytes, None] = {}
    for a in addresses:
        if ":" in a:
            v6[socket.inet_pton(socket.AF_INET6, a)] = None
        else:
            v4[socket.inet_pton(socket.AF_INET, a)] = None
    return tuple(v4), tuple(v6)


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
        cluster = out.labels.get(member.cluster)
        if cluster is None:
            cluster = out.labels[member.cluster] = _label(member.cluster)
        cluster += svc_name
        self.name: bytes | None = None
        if member.hostname is not None:
            self.target = self.name = _label(member.hostname) + cluster
        else:
            self.target = cluster
        # A and AAAA records minus their owner name: the same in every zone and scheme.
        tails = out.tails.get(id(member))
        if tails is None:
            v4, v6 = _packed(member.addresses)
            head_a, head_aaaa = _rr_head(A, ttl, 4), _rr_head(AAAA, ttl, 16)
            tails = out.tails[id(member)] = (tuple(head_a + p for p in v4),
                                             tuple(head_aaaa + p for p in v6))
        self.a, self.aaaa = tails


@functools.lru_cache(maxsize=256)
def _rr_head(rtype: int, ttl: int, rdlength: int) -> bytes:
    return struct.pack("!HHIH", rtype, CLASS_IN, ttl, rdlength)


class _ServiceTarget:
    """A KEP-1645 ClusterIP service as one SRV target, ``<svc>.<ns>.svc.M.``: its
    clusterset IP(s) are the addresses of the members it stands for."""

    __slots__ = ("a", "aaaa", "local", "target")

    def __init__(self, svc_name: bytes, members: Iterable[Member], ttl: int) -> None:
        self.target = svc_name
        self.local = True  # one target for every cluster: no priority to tell apart
        v4, v6 = _packed(a for m in members for a in m.addresses)
        head_a, head_aaaa = _rr_head(A, ttl, 4), _rr_head(AAAA, ttl, 16)
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
            rrs = [_AT_QUESTION + t for t in tails]
            if len(rrs) > _FIT_ALWAYS:
                rrs = _fit(rrs, MAX_BODY)
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


@dataclass(frozen=True)
class ZoneOptions:
    ttl: int = 5
    publish_not_ready: bool = False
    srv_priority: str = "equal"  # or "local-first"
    # Addresses of the zone's name server, the apex (validated, normalised IPv4/IPv6).
    ns_addresses: tuple[str, ...] = ("127.0.0.1",)


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
    labels: dict[str, bytes] = field(default_factory=dict)  # cluster names as labels


def published(gs: GlobalService, options: ZoneOptions) -> list[Member]:
    return [m for m in gs.members if m.addresses and (m.ready or options.publish_not_ready)]


def encode_service(
    gs: GlobalService, zones: Sequence[Zone], options: ZoneOptions
) -> ServiceAnswers:
    """Pre-encode every answer of ``gs`` in every zone, by each zone's naming scheme.
    No published member → no names."""
    out = ServiceAnswers()
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
    """The ``--zone`` names (SPEC §3): ``<svc>.<ns>.Z``, ``<cluster>.<svc>.<ns>.Z``,
    ``<hostname>.<cluster>.<svc>.<ns>.Z`` and the SRV names below ``<svc>.<ns>.Z``."""
    svc_name = _label(gs.name) + _label(gs.namespace) + zone
    wires = [_MemberWire(m, svc_name, options.ttl, out) for m in members]
    _address_answers(out, svc_name, wires)
    by_cluster: dict[str, list[_MemberWire]] = {}
    for w in wires:
        by_cluster.setdefault(w.member.cluster, []).append(w)
    for cluster, group in by_cluster.items():
        _address_answers(out, _label(cluster) + svc_name, group)
        for w in group:
            if w.name is not None:
                _address_answers(out, w.name, [w])
    _srv_answers(out, svc_name, [(w, p) for w in wires for p in w.member.ports], options)


def _encode_mcs(
    gs: GlobalService, members: list[Member], services: bytes, options: ZoneOptions,
    out: ServiceAnswers,
) -> None:
    """The Multi-Cluster Services names (KEP-1645 ``specification.md``, SPEC §3b) below
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
    svc_name = _label(gs.name) + _label(gs.namespace) + services
    pairs: list[tuple[_Target, Port]]
    if gs.headless:
        wires = [_MemberWire(m, svc_name, options.ttl, out) for m in members]
        _address_answers(out, svc_name, wires)
        pods = [(w, w.name) for w in wires if w.name is not None]
        for w, pod_name in pods:
            _address_answers(out, pod_name, [w])
        pairs = [(w, p) for w, _ in pods for p in w.member.ports]
    else:
        chosen = [m for m in members if m.via is Via.FEDERATED] or members
        service = _ServiceTarget(svc_name, chosen, options.ttl)
        _address_answers(out, svc_name, [service])
        pairs = [(service, p) for p in dict.fromkeys(p for m in chosen for p in m.ports)]
    _srv_answers(out, svc_name, pairs, options)


_ENCODERS = {"svc-global": _encode_in_zone, "mcs": _encode_mcs}  # Zone.scheme → its encoder


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
    _put_srv(out, svc_name, distinct, options)
    named: dict[tuple[str, str], list[tuple[_Target, Port]]] = {}
    for w, p in pairs:
        if p.name and p.protocol in _PROTO_LABEL:
            named.setdefault((p.name, p.protocol), []).append((w, p))
    for (port_name, protocol), group_pairs in named.items():
        proto_name = _label(_PROTO_LABEL[protocol]) + svc_name
        out.names.add(proto_name)
        try:
            srv_name = _label("_" + port_name) + proto_name
        except ValueError:
            continue
        distinct = list({(id(w), p.port): (w, p) for w, p in group_pairs}.values())
        _put_srv(out, srv_name, distinct, options)


def _label(text: str) -> bytes:
    raw = text.lower().encode("ascii")
    if not 0 < len(raw) < 64:
        raise ValueError(f"bad DNS label {text!r}")
    return bytes([len(raw)]) + raw


def _put_srv(
    out: ServiceAnswers, name: bytes, pairs: list[tuple[_Target, Port]], options: ZoneOptions,
) -> None:
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
                _AT_QUESTION + _rr_head(SRV, ttl, 6 + len(target))
                + _PACK_SRV(prio, weights[prio], p.port))
        rr = head + target
        if size + len(rr) > MAX_BODY:
            break
        # The glue's owner will point at the target inside this record's RDATA.
        if target not in target_at:
            target_at[target] = (offset + size + 2 + 10 + 6, w)
        answer.append(rr)
        size += len(rr)
    additional: list[bytes] = []
    for target, (at, w) in target_at.items():
        owner = struct.pack("!H", 0xC000 | at) if at < 0x4000 else target
        additional += [owner + t for t in w.a]
        if w.aaaa:
            additional += [owner + t for t in w.aaaa]
    additional = _fit(additional, MAX_BODY - size)
    out.answers[name + _TYPE_IN[SRV]] = Answer(NOERROR, SRV, answer, (), additional)


_PACK_SRV = struct.Struct("!HHH").pack  # priority, weight, port


# --------------------------------------------------------------------------- zones


class Zone:
    """One served zone: its apex records and the negative answers that carry its SOA.

    The zone's name server is the apex itself: ``Z. NS Z.``, with ``Z. A`` / ``Z.
    AAAA`` giving ``ZoneOptions.ns_addresses`` and the SOA MNAME naming it too.
    Every name the zone generates (a service, a cluster, a member, an SRV name, a
    namespace) lies strictly below the apex, so no Kubernetes object can ever take
    or shadow the name server's name, and the NS answer carries its own glue.

    ``scheme`` names the encoder that fills it (``_ENCODERS``); ``services_wire`` is the
    name namespaces hang below (``<ns>.Z``); ``fixed_names`` exist whatever the index
    holds (the apex, and for an MCS zone ``svc.M`` and ``dns-version.M``).
    """

    scheme = "svc-global"

    def __init__(self, origin: str, options: ZoneOptions, serial: int = 1) -> None:
        self.origin = origin if origin.endswith(".") else origin + "."
        self.wire = to_wire(self.origin)
        self.options = options
        self.ns_host = self.wire
        self.services_wire = self.wire
        self.fixed_names: tuple[bytes, ...] = (self.wire,)
        self.set_serial(serial)

    def set_serial(self, serial: int) -> None:
        """The serial changes whenever the index does; only zone-level bytes depend on it."""
        self.serial = serial & 0xFFFFFFFF
        ttl = self.options.ttl
        rdata = (
            self.ns_host + to_wire("hostmaster." + self.origin)
            + struct.pack("!5I", self.serial, 7200, 1800, 86400, ttl)
        )
        self.soa_rr = _rr(self.wire, SOA, ttl, rdata)
        self.nodata = Answer(NOERROR, 0, (), (self.soa_rr,))
        self.nxdomain = Answer(NXDOMAIN, 0, (), (self.soa_rr,))
        v4, v6 = _packed(self.options.ns_addresses)
        glue_a = [_rr(self.ns_host, A, ttl, p) for p in v4]
        glue_aaaa = [_rr(self.ns_host, AAAA, ttl, p) for p in v6]
        self.apex = {
            self.wire + struct.pack("!HH", SOA, CLASS_IN): Answer(NOERROR, SOA, (self.soa_rr,)),
            self.wire + struct.pack("!HH", NS, CLASS_IN): Answer(
                NOERROR, NS, (_rr(self.wire, NS, ttl, self.ns_host),), (), glue_a + glue_aaaa
            ),
        }
        if glue_a:
            self.apex[self.wire + struct.pack("!HH", A, CLASS_IN)] = Answer(NOERROR, A, glue_a)
        if glue_aaaa:
            self.apex[self.wire + struct.pack("!HH", AAAA, CLASS_IN)] = Answer(
                NOERROR, AAAA, glue_aaaa)


MCS_DNS_VERSION = b"1.0.0"  # the KEP-1645 DNS specification's schema version (§1, §2.2)


class McsZone(Zone):
    """A ``--mcs-zone``: the Multi-Cluster Services names (SPEC §3b) of the same global
    services, all below ``svc.M``, plus ``dns-version.M`` TXT at the top. SOA, NS and
    every negative answer work as in any zone."""

    scheme = "mcs"

    def __init__(self, origin: str, options: ZoneOptions, serial: int = 1) -> None:
        super().__init__(origin, options, serial)
        self.services_wire = b"\x03svc" + self.wire
        self.fixed_names = (self.wire, self.services_wire, self._version_wire())

    def _version_wire(self) -> bytes:
        return b"\x0bdns-version" + self.wire

    def set_serial(self, serial: int) -> None:
        super().set_serial(serial)
        txt = bytes([len(MCS_DNS_VERSION)]) + MCS_DNS_VERSION
        self.apex[self._version_wire() + struct.pack("!HH", TXT, CLASS_IN)] = Answer(
            NOERROR, TXT, (_AT_QUESTION + _rr_head(TXT, self.options.ttl, len(txt)) + txt,)
        )


# --------------------------------------------------------------------------- answering


def _error(data: bytes, rcode: int, question: bytes = b"", opt: bytes = b"") -> bytes:
    """A reply that carries only a status: FORMERR, SERVFAIL, NOTIMP, REFUSED, BADVERS.
    ``opt`` is the reply's OPT record (BADVERS's upper bits are in it)."""
    flags = (data[2] << 8 | data[3]) & 0x7910 | 0x8000  # keep opcode, RD, CD
    return (
        data[:2]
        + struct.pack("!5H", flags | rcode & 0xF, 1 if question else 0, 0, 0, 1 if opt else 0)
        + question
        + opt
    )


def _notimp(data: bytes, udp: bool) -> bytes:
    """NOTIMP for an opcode other than QUERY; with the question and an OPT record when both
    are readable (RFC 6891 §7: a request with OPT gets a reply with OPT)."""
    qend = _question_end(data) if data[4:6] == b"\x00\x01" else None
    if qend is None:
        return _error(data, NOTIMP)
    edns, _limit, _badvers, do = _read_edns(data, qend, data[10] << 8 | data[11], udp)
    return _error(data, NOTIMP, data[12:qend], _OPT_RR[do] if edns else b"")


_HINFO_RDATA = b"\x07RFC8482\x00"
# ANY answers the first of these RRsets the name owns (RFC 8482 §4.1: one RRset), so a
# client asking for "A AAAA" at once (Java's JNDI sends ANY) still gets addresses.
_ANY_TYPES = tuple(struct.pack("!HH", t, CLASS_IN) for t in (A, AAAA, SRV, TXT))
_OWNED_TYPES = tuple(struct.pack("!HH", t, CLASS_IN) for t in (A, AAAA, SRV, SOA, NS, TXT))


@functools.lru_cache(maxsize=16)
def _hinfo_answer(ttl: int) -> Answer:
    """The RFC 8482 §4.2 placeholder, shared by every name and query with that TTL."""
    return Answer(NOERROR, ANY, (_rr(_AT_QUESTION, HINFO, ttl, _HINFO_RDATA),))


class Responder:
    """Query bytes → reply bytes, from the tables the index keeps up to date.

    ``answers`` maps question keys to pre-encoded answers, ``names`` maps the names that
    exist without owning a record (empty non-terminals, the apex) to their zone; a name
    exists when it is in ``names`` or owns an answer (NODATA, not NXDOMAIN).
    """

    def __init__(self, zones: Sequence[Zone]) -> None:
        self.zones = list(zones)
        self.zone_by_wire = {z.wire: z for z in self.zones}
        self.answers: dict[bytes, Answer] = {}
        self.names: dict[bytes, Zone] = {}
        self.ready = False
        # Queries answered by (qtype, rcode), per transport; read by the metrics collector.
        # A dict increment is all the fast path can afford.
        self.udp_counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.tcp_counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.dropped = 0
        for z in self.zones:
            self.names.update(dict.fromkeys(z.fixed_names, z))

    def refresh_apex(self) -> None:
        """(Re)install the apex answers; not before the first sync, so that until then
        the apex answers SERVFAIL like every other name of the zone."""
        if not self.ready:
            return
        for z in self.zones:
            self.answers.update(z.apex)

    def set_ready(self) -> None:
        """The first sync is done: install the apex answers, then answer from the tables
        (in this order, so no query in between finds the apex without its records)."""
        for z in self.zones:
            self.answers.update(z.apex)
        self.ready = True

    def respond(self, data: bytes, udp: bool = True) -> bytes | None:
        """The reply to one query, or None to drop it. ``udp`` applies size limits."""
        # Fast path: one question, nothing else but maybe an OPT record, opcode QUERY.
        if len(data) < 17 or data[2] & 0xF8 or data[4:11] != b"\x00\x01\x00\x00\x00\x00\x00":
            return self._respond_slow(data, udp)
        # The question name ends at the first zero byte *if* the key that gives is one
        # of ours: our keys are well-formed names, and a well-formed name read from
        # offset 12 by its length bytes ends exactly there (lower() never touches a
        # length byte). Any other zero (inside a label, after a pointer) misses the
        # table and takes the slow path, which walks the labels properly.
        qend = data.find(0, 12) + 5
        answer = self.answers.get(data[12:qend].lower())
        if answer is None:
            return self._respond_slow(data, udp)
        if data[11] == 0:
            opt = b""
            space = PLAIN_UDP_LIMIT if udp else TCP_LIMIT
        elif data[11] == 1:
            # One lookup for the OPT records clients keep sending (the full check once):
            # the UDP limit less our OPT record, and that record, DO bit copied.
            edns = _EDNS_LIMITS.get(data[qend:])
            if edns is None:
                edns = _plain_opt(data, qend)
                if edns is None:
                    return self._respond_slow(data, udp)
            space, opt = edns
            if not udp:
                space = TCP_LIMIT - _OPT_LEN
        else:
            return self._respond_slow(data, udp)
        if udp:
            self.udp_counts[answer.stat] += 1
        else:
            self.tcp_counts[answer.stat] += 1
        return self._assemble(data, qend, answer, opt, space)

    @staticmethod
    def _assemble(data: bytes, qend: int, answer: Answer, opt: bytes, space: int) -> bytes:
        """The reply: ``answer`` as a whole, else without its additional section, else
        TC=1 with the whole answer records that fit. ``opt`` is our OPT record or b"";
        ``space`` is the size limit less ``opt``."""
        room = space - qend + 12  # for the header and the body
        flags = answer.flags | ((data[2] << 8 | data[3]) & _COPIED_FLAGS)
        body: bytes | memoryview
        if answer.size <= room:
            counts, body = (answer.counts_edns if opt else answer.counts), answer.body
        else:
            tail = answer.tail  # an answer that can miss a limit has one (see Answer)
            assert tail is not None
            if tail.size_part <= room:
                counts = tail.counts_part_edns if opt else tail.counts_part
                body = memoryview(answer.body)[: tail.size_part - 12]
            else:
                flags |= _TC
                fit = bisect_right(tail.ends, room - 12)
                counts = _counts(fit, 0, 1 if opt else 0)
                body = memoryview(answer.body)[: tail.ends[fit - 1]] if fit else b""
        return b"".join((data[:2], flags.to_bytes(2, "big"), counts, data[12:qend], body, opt))

    def _respond_slow(self, data: bytes, udp: bool) -> bytes | None:
        reply, stat = self._slow(data, udp)
        if reply is None:
            self.dropped += 1
            return None
        (self.udp_counts if udp else self.tcp_counts)[stat] += 1
        return reply

    def _slow(self, data: bytes, udp: bool) -> tuple[bytes | None, tuple[int, int]]:
        """Every query the fast path did not take: the rules of SPEC §3, one by one.
        Returns the reply (None: drop) and the (qtype, rcode) it is counted under."""
        if len(data) < 12 or data[2] & 0x80:
            return None, (0, 0)  # no readable header, or a response: never answer those
        if (data[2] >> 3) & 0xF != 0:
            return _notimp(data, udp), (0, NOTIMP)
        qdcount, _an, _ns, arcount = struct.unpack("!4H", data[4:12])
        qend = _question_end(data) if qdcount == 1 else None
        if qend is None:
            return _error(data, FORMERR), (0, FORMERR)
        question = data[12:qend]
        qtype, qclass = struct.unpack("!HH", data[qend - 4 : qend])
        edns, limit, badvers, do = _read_edns(data, qend, arcount, udp)
        if edns is None:
            return _error(data, FORMERR, question), (qtype, FORMERR)
        if badvers:
            return _error(data, BADVERS, question, _OPT_BADVERS[do]), (qtype, BADVERS)
        qname = data[12 : qend - 4].lower()
        zone = self.zone_of(qname) if qclass == CLASS_IN else None
        if zone is None:  # another class, or outside every zone: never an open resolver
            return (_error(data, REFUSED, question, _OPT_NOT_AUTH[do] if edns else b""),
                    (qtype, REFUSED))
        if not self.ready:
            return (_error(data, SERVFAIL, question, _OPT_NOT_READY[do] if edns else b""),
                    (qtype, SERVFAIL))
        opt = _OPT_RR[do] if edns else b""
        if qtype in (AXFR, IXFR):
            return _error(data, REFUSED, question, opt), (qtype, REFUSED)
        answer = self.answers.get(qname + data[qend - 4 : qend])
        if answer is None:
            if qname in self.names or any(qname + t in self.answers for t in _OWNED_TYPES):
                answer = self._any(qname, zone) if qtype == ANY else zone.nodata
            else:
                answer = zone.nxdomain
        return self._assemble(data, qend, answer, opt, limit - len(opt)), (qtype, answer.rcode)

    def _any(self, qname: bytes, zone: Zone) -> Answer:
        """RFC 8482: ANY gets one RRset, never the whole node. The name's A RRset, else its
        AAAA, else its SRV (else the TXT of an MCS zone's dns-version): the pre-encoded
        answer of that type, whose body does not depend on the question's type (owners
        point at the question, glue offsets depend only on the name's length), so the
        usual UDP size rules apply to it unchanged. A name with none of those (the apex)
        gets the synthesised HINFO; an empty non-terminal owns no RRset at all: NODATA.
        The query is counted as ANY by the caller, whatever answers it.
        """
        for rrtype in _ANY_TYPES:
            answer = self.answers.get(qname + rrtype)
            if answer is not None:
                return answer
        if not any(qname + rrtype in self.answers for rrtype in _OWNED_TYPES):
            return zone.nodata
        return _hinfo_answer(zone.options.ttl)

    def zone_of(self, qname: bytes) -> Zone | None:
        i = 0
        while True:
            zone = self.zone_by_wire.get(qname[i:])
            if zone is not None:
                return zone
            n = qname[i]
            if n == 0:
                return None
            i += n + 1


# OPT records (no options) seen on the fast path → (UDP limit less our OPT record, that
# record with the query's DO bit).
_EDNS_LIMITS: dict[bytes, tuple[int, bytes]] = {}


def _plain_opt(data: bytes, qend: int) -> tuple[int, bytes] | None:
    """The UDP size limit of the query's OPT record (ARCOUNT is 1), less our reply's OPT
    record, and that record (DO copied), when the query's directly follows the question,
    is version 0 and whole; None for anything else (the slow path's to judge)."""
    if not (
        data[qend : qend + 3] == b"\x00\x00\x29" and len(data) >= qend + 11
        and len(data) == qend + 11 + (data[qend + 9] << 8 | data[qend + 10])
        and data[qend + 6] == 0
    ):
        return None
    limit = min(max(data[qend + 3] << 8 | data[qend + 4], PLAIN_UDP_LIMIT), EDNS_PAYLOAD)
    edns = (limit - _OPT_LEN, _OPT_RR[data[qend + 7] >> 7])
    if len(data) == qend + 11 and len(_EDNS_LIMITS) < 256:  # no options: the tail is the key
        _EDNS_LIMITS[data[qend:]] = edns
    return edns


def _question_end(data: bytes) -> int | None:
    """End of the (only) question, or None when it is malformed. No pointers allowed:
    nothing precedes the question that a pointer could legitimately point at."""
    i = 12
    total = 0
    while i < len(data):
        n = data[i]
        if n == 0:
            return i + 5 if i + 5 <= len(data) else None
        if n > 63:
            return None
        total += n + 1
        if total > 254:
            return None
        i += n + 1
    return None


def _read_edns(
    data: bytes, qend: int, arcount: int, udp: bool
) -> tuple[bool | None, int, bool, int]:
    """(edns present, size limit, BADVERS, DO bit as 0/1) from the records after the
    question; edns None = FORMERR.

    A bounded walk over every record, no pointer followed (so no pointer loop can
    bite): an owner name is labels ending in the root label or in one compression
    pointer, which must point backwards, past the header. Bytes after the last
    record are ignored, as on the fast path.
    """
    limit = PLAIN_UDP_LIMIT if udp else TCP_LIMIT
    end = len(data)
    before_ar = (data[6] << 8 | data[7]) + (data[8] << 8 | data[9])
    i = qend
    opt: tuple[int, int] | None = None
    for n in range(before_ar + arcount):
        owner = i
        while True:
            if i >= end:
                return None, limit, False, 0
            length = data[i]
            if length == 0:
                i += 1
                break
            if length >= 0xC0:
                if i + 1 >= end or not 12 <= ((length & 0x3F) << 8 | data[i + 1]) < i:
                    return None, limit, False, 0
                i += 2
                break
            if length > 63:
                return None, limit, False, 0
            i += length + 1
        if i + 10 > end:
            return None, limit, False, 0
        rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", data, i)
        i += 10 + rdlen
        if i > end:
            return None, limit, False, 0
        if rtype == OPT:
            # RFC 6891 §6.1.1: one OPT, owned by the root, in the additional section.
            if opt is not None or n < before_ar or i - rdlen - 10 != owner + 1:
                return None, limit, False, 0
            opt = (rclass, ttl)
    if opt is None:
        return False, limit, False, 0
    payload, ttl = opt
    if udp:
        limit = min(max(payload, PLAIN_UDP_LIMIT), EDNS_PAYLOAD)
    return True, limit, (ttl >> 16) & 0xFF > 0, ttl >> 15 & 1
