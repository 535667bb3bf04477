"""Query bytes in, reply bytes out: the query path.

:meth:`Responder.respond` turns a query into a reply from the tables the index
keeps. The common case is a header check, a label walk, one dict lookup and a
concatenation; everything unusual falls to :meth:`Responder._respond_slow`,
which reads the rest of the packet with a bounded walk that never follows a
compression pointer.

A reply is the query's ID, patched flags, pre-encoded
counts, the question exactly as the client sent it (RFC 0x20 case echo), and the
pre-encoded body, which is sound because every name in the body is spelled out
or points at offset 12 (see :mod:`dnsside.dns.wire`).
"""

from __future__ import annotations

import functools
import struct
import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence

from dnsside.dns.names import find_zone
from dnsside.dns.tsig import NOTAUTH, ReplySigner, TsigKey, Verdict, error_reply, verify_request
from dnsside.dns.wire import (
    AAAA,
    ANY,
    AT_QUESTION,
    AXFR,
    BADVERS,
    CLASS_IN,
    COPIED_FLAGS,
    EDNS_PAYLOAD,
    FORMERR,
    HINFO,
    IXFR,
    NOERROR,
    NOTIMP,
    NS,
    OPT_BADVERS,
    OPT_LEN,
    OPT_NOT_AUTH,
    OPT_NOT_READY,
    OPT_RR,
    PLAIN_UDP_LIMIT,
    PTR,
    REFUSED,
    REPLY_FLAGS,
    SERVFAIL,
    SOA,
    SRV,
    TC,
    TCP_LIMIT,
    TXT,
    A,
    Answer,
    Ring,
    authority_serial,
    question_end,
    read_edns,
    resource_record,
    section_counts,
)
from dnsside.dns.zone import Zone

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
    qend = question_end(data) if data[4:6] == b"\x00\x01" else None
    if qend is None:
        return _error(data, NOTIMP)
    edns, _limit, _badvers, do = read_edns(data, qend, data[10] << 8 | data[11], udp)
    return _error(data, NOTIMP, data[12:qend], OPT_RR[do] if edns else b"")


_HINFO_RDATA = b"\x07RFC8482\x00"
# ANY answers the first of these RRsets the name owns (RFC 8482 §4.1: one RRset), so a
# client asking for "A AAAA" at once (Java's JNDI sends ANY) still gets addresses.
_ANY_TYPES = tuple(struct.pack("!HH", t, CLASS_IN) for t in (A, AAAA, SRV, TXT, PTR))
_SOA_IN = struct.pack("!HH", SOA, CLASS_IN)
_OWNED_TYPES = tuple(struct.pack("!HH", t, CLASS_IN) for t in (A, AAAA, SRV, SOA, NS, TXT,
                                                                 PTR))


@functools.lru_cache(maxsize=16)
def _hinfo_answer(ttl: int) -> Answer:
    """The RFC 8482 §4.2 placeholder, shared by every name and query with that TTL."""
    return Answer(NOERROR, ANY, (resource_record(AT_QUESTION, HINFO, ttl, _HINFO_RDATA),))


_TSIG_MARK = b"\x00\xfa\x00\xff\x00\x00\x00\x00"

# The query types counted under their own name (dnsside_queries_total's qtype); any other
# a client sends is counted as OTHER_QTYPE, so no client chooses a series (issue 33).
COUNTED_QTYPES = {0: "none", 1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX",
                  16: "TXT", 28: "AAAA", 33: "SRV", 35: "NAPTR", 43: "DS", 48: "DNSKEY",
                  64: "SVCB", 65: "HTTPS", 251: "IXFR", 252: "AXFR", 255: "ANY", 257: "CAA"}
OTHER_QTYPE = -1


def counted(stat: tuple[int, int]) -> tuple[int, int]:
    """The key ``stat`` (qtype, rcode) is counted under: the qtype folded into
    OTHER_QTYPE unless it is one of COUNTED_QTYPES (the fast path's are: they own answers)."""
    return stat if stat[0] in COUNTED_QTYPES else (OTHER_QTYPE, stat[1])


class Responder:
    """Query bytes → reply bytes, from the tables the index keeps up to date.

    ``answers`` maps question keys to pre-encoded answers, ``names`` maps the names that
    exist without owning a record (empty non-terminals, the apex) to their zone; a name
    exists when it is in ``names`` or owns an answer (NODATA, not NXDOMAIN).
    """

    def __init__(self, zones: Sequence[Zone], fixed_zones: Sequence[Zone] = ()) -> None:
        self.zones = list(zones)
        # Zones whose every record is fixed at start (the catalog, dnsside.dns.catalog):
        # answered and transferred as the others, but no service is ever encoded into them.
        self.fixed_zones = list(fixed_zones)
        self.zone_by_wire = {z.wire: z for z in (*self.zones, *self.fixed_zones)}
        self.answers: dict[bytes, Answer] = {}
        self.names: dict[bytes, Zone] = {}
        self.ready = False
        # Queries answered by (qtype, rcode), per transport; read by the metrics collector.
        # A dict increment is all the fast path can afford.
        self.udp_counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.tcp_counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.dropped = 0
        # --tsig-key-file: a signed query (a secondary's SOA check, an IXFR over UDP) is
        # answered signed with it; one signed with another key gets the TSIG error.
        self.tsig: TsigKey | None = None
        for z in (*self.zones, *self.fixed_zones):
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
        for z in (*self.zones, *self.fixed_zones):
            self.answers.update(z.apex)
        self.ready = True

    def respond(self, data: bytes, udp: bool = True) -> bytes | None:
        """The reply to one query, or None to drop it. ``udp`` applies size limits."""
        # Fast path: one question, nothing else but maybe an OPT record, opcode QUERY.
        if (len(data) < 17 or (head := data[2]) & 0xF8
                or data[4:11] != b"\x00\x01\x00\x00\x00\x00\x00"):
            return self._respond_slow(data, udp)
        # The question name ends at the first zero byte *if* the key that gives is one
        # of ours: our keys are well-formed names, and a well-formed name read from
        # offset 12 by its length bytes ends exactly there (lower() never touches a
        # length byte). Any other zero (inside a label, after a pointer) misses the
        # table and takes the slow path, which walks the labels properly.
        qend = data.find(0, 12) + 5
        question = data[12:qend]
        answer = self.answers.get(question.lower())
        if answer is None:
            return self._respond_slow(data, udp)
        arcount = data[11]
        if arcount == 0:
            opt = b""
            room = (PLAIN_UDP_LIMIT if udp else TCP_LIMIT) - qend + 12
        elif arcount == 1:
            # One lookup for the OPT records clients keep sending (the full check once):
            # the UDP limit less our OPT record, and that record, DO bit copied.
            edns = _EDNS_LIMITS.get(data[qend:])
            if edns is None:
                edns = _plain_opt(data, qend)
                if edns is None:
                    return self._respond_slow(data, udp)
            space, opt = edns
            room = (space if udp else TCP_LIMIT - OPT_LEN) - qend + 12
        else:
            return self._respond_slow(data, udp)
        # `room`: bytes left for the header and the body. One test of the answer's class,
        # then reads of that class's slots only: a read that meets both classes is one
        # CPython 3.11 stops specialising, and it takes the generic way on every query.
        if type(answer) is Ring:
            (self.udp_counts if udp else self.tcp_counts)[answer.stat] += 1
            if answer.size > room:
                return _cut_turn(data, head, question, answer, opt, room)
            # _turn, inlined for the starts kept whole (most rotating answers asked): a
            # call costs as much as a sixth of the rest.
            k = answer.turn
            answer.turn = k + 1 if k + 1 < answer.n else 0
            flags, counts = (_FLAG_WORDS[answer.flags][head][data[3]],
                             answer.counts_edns if opt else answer.counts)
            spin = answer.spin
            if spin is not None:  # every start pre-encoded
                return b"".join((data[:2], flags, counts, question, spin[k], opt))
            twice = answer.twice
            if twice is not None:  # the records twice over: one slice, then the glue
                step = answer.step  # (a range's item costs six times a product)
                at = k * step if step else answer.bounds[k]
                return b"".join((data[:2], flags, counts, question,
                                 twice[at : at + answer.length], answer.glue, opt))
            return _sliced(data, flags, counts, question, answer, k, opt)
        (self.udp_counts if udp else self.tcp_counts)[answer.stat] += 1
        if answer.size <= room:
            return b"".join((data[:2], _FLAG_WORDS[answer.flags][head][data[3]],
                             answer.counts_edns if opt else answer.counts, question,
                             answer.body, opt))
        return _shortened(data, head, question, answer, opt, room)

    def _respond_slow(self, data: bytes, udp: bool) -> bytes | None:
        # A TSIG record's TYPE, CLASS (ANY) and TTL (0), found by bytes.find at C speed:
        # the full parse is only for the rare query that may carry one.
        if (len(data) >= 12 and data[10:12] != b"\x00\x00" and not data[2] & 0x80
                and _TSIG_MARK in data):
            verdict = verify_request(data, self.tsig, int(time.time()))
            if verdict.status not in ("unsigned", "formerr"):
                return self._respond_signed(data, udp, verdict)
        reply, stat = self._slow(data, udp)
        if reply is None:
            self.dropped += 1
            return None
        (self.udp_counts if udp else self.tcp_counts)[counted(stat)] += 1
        return reply

    def _respond_signed(self, data: bytes, udp: bool, verdict: Verdict) -> bytes | None:
        """A query with a TSIG: the usual answer to it without the TSIG, signed (RFC 8945
        §5.3); the TSIG error when it does not verify (§5.2), counted as NOTAUTH."""
        counts = self.udp_counts if udp else self.tcp_counts
        if verdict.status != "ok" or verdict.key is None:
            counts[(0, NOTAUTH)] += 1
            return error_reply(data, verdict)
        reply, stat = self._slow(verdict.message, udp)
        if reply is None:
            self.dropped += 1
            return None
        counts[counted(stat)] += 1
        return ReplySigner(verdict.key, verdict.mac, verdict.now).sign(reply)

    def _slow(self, data: bytes, udp: bool) -> tuple[bytes | None, tuple[int, int]]:
        """Every query the fast path did not take: the protocol rules (docs/protocol.md),
        one by one.
        Returns the reply (None: drop) and the (qtype, rcode) it is counted under."""
        if len(data) < 12 or data[2] & 0x80:
            return None, (0, 0)  # no readable header, or a response: never answer those
        if (data[2] >> 3) & 0xF != 0:
            return _notimp(data, udp), (0, NOTIMP)
        qdcount, _an, _ns, arcount = struct.unpack("!4H", data[4:12])
        qend = question_end(data) if qdcount == 1 else None
        if qend is None:
            return _error(data, FORMERR), (0, FORMERR)
        question = data[12:qend]
        qtype, qclass = struct.unpack("!HH", data[qend - 4 : qend])
        edns, limit, badvers, do = read_edns(data, qend, arcount, udp)
        if edns is None:
            return _error(data, FORMERR, question), (qtype, FORMERR)
        if badvers:
            return _error(data, BADVERS, question, OPT_BADVERS[do]), (qtype, BADVERS)
        qname = data[12 : qend - 4].lower()
        if qtype in (AXFR, IXFR):
            return self._transfer(data, qend, qtype, qname, qclass, udp, edns, limit, do)
        zone = find_zone(qname, self.zone_by_wire) if qclass == CLASS_IN else None
        if zone is None:  # another class, or outside every zone: never an open resolver
            return (_error(data, REFUSED, question, OPT_NOT_AUTH[do] if edns else b""),
                    (qtype, REFUSED))
        if not self.ready:
            return (_error(data, SERVFAIL, question, OPT_NOT_READY[do] if edns else b""),
                    (qtype, SERVFAIL))
        opt = OPT_RR[do] if edns else b""
        answer = self.answers.get(qname + data[qend - 4 : qend])
        if answer is None:
            if qname in self.names or any(qname + t in self.answers for t in _OWNED_TYPES):
                answer = self._any(qname, zone) if qtype == ANY else zone.nodata
            else:
                answer = zone.nxdomain
        return (assemble(data, qend, answer, opt, limit - len(opt)),
                (qtype, answer.rcode))

    def _transfer(self, data: bytes, qend: int, qtype: int, qname: bytes, qclass: int,
                  udp: bool, edns: bool, limit: int, do: int
                  ) -> tuple[bytes | None, tuple[int, int]]:
        """AXFR and IXFR, as BIND 9.18 answers them: NOTAUTH for a name that is not the
        apex of one of our zones (RFC 5936 §2.2.1: not authoritative for the zone asked
        for), SERVFAIL before the first sync. Over UDP an IXFR gets the current SOA alone
        (RFC 1995 §2: a reply that does not fit a datagram is a single SOA of the current
        version, and the client asks again over TCP, where access is checked; §4: the
        same SOA to a client that is current; BIND sends it even for differences that
        would fit), or FORMERR without the client's SOA in its authority section (§3).
        AXFR over UDP is REFUSED (RFC 5936 §4.2 leaves it undefined), and so is a TCP
        transfer that reaches the responder: the connection takes the ones it lets in
        (:class:`dnsside.dns.transfer.ZoneTransfers`)."""
        question = data[12:qend]
        opt = OPT_RR[do] if edns else b""
        zone = self.zone_by_wire.get(qname) if qclass == CLASS_IN else None
        if zone is None:
            return _error(data, NOTAUTH, question, opt), (qtype, NOTAUTH)
        if not self.ready:
            return (_error(data, SERVFAIL, question, OPT_NOT_READY[do] if edns else b""),
                    (qtype, SERVFAIL))
        if qtype == AXFR or not udp:
            return _error(data, REFUSED, question, opt), (qtype, REFUSED)
        if authority_serial(data, qend) is None:
            return _error(data, FORMERR, question, opt), (qtype, FORMERR)
        soa = self.answers[qname + _SOA_IN]
        return assemble(data, qend, soa, opt, limit - len(opt)), (qtype, NOERROR)

    def count(self, stat: tuple[int, int], udp: bool = False) -> None:
        """One reply counted under ``stat`` (qtype, rcode): every reply dnsside sends is
        counted here, a zone transfer's too (the metrics collector reads the counts)."""
        (self.udp_counts if udp else self.tcp_counts)[counted(stat)] += 1

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
        return find_zone(qname, self.zone_by_wire)


# --------------------------------------------------------------------------- replies
#
# Module functions, not methods: the fast path calls them by a global name (a staticmethod
# reached through ``self`` is looked up the generic way on every call). Each reads the
# slots of one class only (see Responder.respond).

# The reply's flags word (bytes 2-3) by the answer's flags (QR, AA, RCODE, maybe TC), then
# the query's byte 2 (RD; 0-7 in every query answered: QR clear, opcode QUERY) and byte 3
# (CD): RD and CD copied, pre-encoded. Two tuple lookups a reply; the arithmetic and
# int.to_bytes they replace cost more than the rest of the header (bench/ROUND_ROBIN.md,
# round 3). 128 KB.
def _flag_words(flags: int) -> tuple[tuple[bytes, ...], ...]:
    words = {w: w.to_bytes(2, "big") for w in (flags, flags | 0x0100, flags | 0x0010,
                                               flags | 0x0110)}
    by_rd = [tuple(words[flags | rd | byte3 & 0x10] for byte3 in range(256))
             for rd in (0, 0x0100)]
    return tuple(by_rd[byte2 & 1] for byte2 in range(8))


assert COPIED_FLAGS == 0x0110  # RD (byte 2's low bit) and CD (byte 3's 0x10), as above
_FLAG_WORDS = {f | tc: _flag_words(f | tc) for f in REPLY_FLAGS.values() for tc in (0, TC)}

# The counts of a truncated reply of `fit` answer records, without and with OPT: an index,
# not the lru_cache call. A UDP reply holds at most 1232 / 16 records (the smallest record
# the fast path sends: an A with its owner a pointer); more (never seen) take the call.
_TC_COUNTS = tuple(section_counts(fit, 0, 0) for fit in range(80))
_TC_COUNTS_EDNS = tuple(section_counts(fit, 0, 1) for fit in range(80))


def _tc_counts(fit: int, opt: bytes) -> bytes:
    if fit < 80:
        return _TC_COUNTS_EDNS[fit] if opt else _TC_COUNTS[fit]
    return section_counts(fit, 0, 1 if opt else 0)


def assemble(data: bytes, qend: int, answer: Answer, opt: bytes, space: int) -> bytes:
    """The reply: ``answer`` as a whole, else without its additional section, else
    TC=1 with the whole answer records that fit. ``opt`` is our OPT record or b"";
    ``space`` is the size limit less ``opt``. A :class:`~dnsside.dns.wire.Ring` starts at its
    next record (:func:`_turn`); the others are sent as they are. The slow path's way in;
    the fast path's is :meth:`Responder.respond`, which does the same."""
    room = space - qend + 12  # for the header and the body
    if type(answer) is Ring:
        return _turn(data, data[2], data[12:qend], answer, opt, room)
    if answer.size <= room:
        return b"".join((data[:2], _FLAG_WORDS[answer.flags][data[2]][data[3]],
                         answer.counts_edns if opt else answer.counts, data[12:qend],
                         answer.body, opt))
    return _shortened(data, data[2], data[12:qend], answer, opt, room)


def _shortened(data: bytes, head: int, question: bytes, answer: Answer, opt: bytes,
               room: int) -> bytes:
    """An answer of one order that misses ``room``: without its additional section, else
    TC=1 with the whole answer records that fit."""
    tail = answer.tail  # an answer that can miss a limit has one (see Answer)
    assert tail is not None
    body: bytes | memoryview
    if tail.size_part <= room:
        flags = answer.flags
        counts = tail.counts_part_edns if opt else tail.counts_part
        body = memoryview(answer.body)[: tail.size_part - 12]
    else:
        flags = answer.flags | TC
        fit = bisect_right(tail.ends, room - 12)
        counts = _tc_counts(fit, opt)
        body = memoryview(answer.body)[: tail.ends[fit - 1]] if fit else b""
    return b"".join((data[:2], _FLAG_WORDS[flags][head][data[3]], counts, question, body,
                     opt))


def _turn(data: bytes, head: int, question: bytes, ring: Ring, opt: bytes, room: int
          ) -> bytes:
    """A ring's reply: its next start whole, else that start without the glue, else a page
    of its records with TC=1 (see :class:`~dnsside.dns.wire.Ring`). The slow path's;
    :meth:`Responder.respond` has the first half inlined."""
    if ring.size > room:
        return _cut_turn(data, head, question, ring, opt, room)
    k = ring.turn
    ring.turn = k + 1 if k + 1 < ring.n else 0
    flags = _FLAG_WORDS[ring.flags][head][data[3]]
    counts = ring.counts_edns if opt else ring.counts
    spin = ring.spin
    if spin is not None:
        return b"".join((data[:2], flags, counts, question, spin[k], opt))
    twice = ring.twice
    if twice is not None:
        step = ring.step
        at = k * step if step else ring.bounds[k]
        return b"".join((data[:2], flags, counts, question, twice[at : at + ring.length],
                         ring.glue, opt))
    return _sliced(data, flags, counts, question, ring, k, opt)


def _sliced(data: bytes, flags: bytes, counts: bytes, question: bytes, ring: Ring, k: int,
            opt: bytes) -> bytes:
    """The whole reply of a ring kept as its body alone (the big ones), from record ``k``
    on: three slices of the body, joined once with the rest."""
    step, body, end = ring.step, ring.body, ring.length
    at = k * step if step else ring.bounds[k]  # (a range's item costs six times a product)
    return b"".join((data[:2], flags, counts, question, body[at:end], body[:at], body[end:],
                     opt))


def _cut_turn(data: bytes, head: int, question: bytes, ring: Ring, opt: bytes, room: int
              ) -> bytes:
    """A ring that misses ``room``: its next start without the glue, else a page of its
    records with TC=1 (a page is no turn: the next whole answer starts where it would)."""
    tail = ring.tail
    assert tail is not None
    if tail.size_part <= room:
        k = ring.turn
        ring.turn = k + 1 if k + 1 < ring.n else 0
        step, body = ring.step, ring.body
        at = k * step if step else ring.bounds[k]
        return b"".join((data[:2], _FLAG_WORDS[ring.flags][head][data[3]],
                         tail.counts_part_edns if opt else tail.counts_part, question,
                         body[at : ring.length], body[:at], opt))
    fit, first, second = ring.page(ring.body, room - 12)
    return b"".join((data[:2], _FLAG_WORDS[ring.flags | TC][head][data[3]],
                     _tc_counts(fit, opt), question, first, second, opt))


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
    edns = (limit - OPT_LEN, OPT_RR[data[qend + 7] >> 7])
    if len(data) == qend + 11 and len(_EDNS_LIMITS) < 256:  # no options: the tail is the key
        _EDNS_LIMITS[data[qend:]] = edns
    return edns
