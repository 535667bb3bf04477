"""DNS wire format: the constants, records and pre-encoded answers both halves share.

The encoder (:mod:`dnsside.core.encode`) builds :class:`Answer` objects from these
pieces when a service changes; the responder (:mod:`dnsside.dns.responder`) glues
them to a query's header and question when one arrives. Nothing here knows
Linkerd or sockets.

An :class:`Answer` holds a reply minus its first four
bytes and its question, so one encoding serves every query of a name whatever
its ID and letter case; everything in it that names the question is a
compression pointer to offset 12 (:data:`AT_QUESTION`).

An answer that rotates (``--round-robin``, :class:`Ring`) is sent from any one of its
answer records on, wrapped around: slices of the same bytes. That is sound only because
no record points into another (owners point at the question, SRV targets are spelled
out) and nothing after them points into them (the glue of a rotating SRV answer points
at the question or at glue before it, never into an SRV record that a turn moves).
"""

from __future__ import annotations

import functools
import socket
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence

A, NS, SOA, TXT, AAAA, SRV, OPT, HINFO, IXFR, AXFR, ANY = (1, 2, 6, 16, 28, 33, 41, 13, 251, 252,
                                                         255)
PTR = 12  # a catalog zone's members (dnsside.dns.catalog)
CLASS_IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
BADVERS = 16

EDNS_PAYLOAD = 1232  # what we advertise, and the most we send over UDP (DNS flag day 2020)
PLAIN_UDP_LIMIT = 512
TCP_LIMIT = 65535
# Room for the largest question (255-byte name + type/class) and an OPT record:
# an encoded body never exceeds this, so a reply always fits a TCP message.
MAX_BODY = TCP_LIMIT - 12 - 259 - 11
MAX_QUESTION = 259
MAX_ANSWER_OPT = 11  # the OPT record of an answer (options only ever go on errors)

QR_AA = 0x8400
TC = 0x0200
COPIED_FLAGS = 0x0110  # RD and CD are copied from the query
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
OPT_RR = (_opt_rr(False), _opt_rr(True))
OPT_LEN = len(OPT_RR[0])
OPT_BADVERS = (_opt_rr(False, BADVERS >> 4), _opt_rr(True, BADVERS >> 4))
_NOT_READY = _ede(EDE_NOT_READY, "dnsside has not synced its source yet")
OPT_NOT_READY = (_opt_rr(False, options=_NOT_READY), _opt_rr(True, options=_NOT_READY))
_NOT_AUTH = _ede(EDE_NOT_AUTHORITATIVE, "dnsside serves only its own zones, class IN")
OPT_NOT_AUTH = (_opt_rr(False, options=_NOT_AUTH), _opt_rr(True, options=_NOT_AUTH))

# --------------------------------------------------------------------------- names


def to_wire(name: str) -> bytes:
    """Dotted name → lower-case wire format. Raises ValueError for a name DNS can't carry."""
    labels = [label for label in name.lower().rstrip(".").split(".")] if name.strip(".") else []
    out = bytearray()
    for label in labels:
        try:
            raw = label.encode("ascii")
        except UnicodeEncodeError:
            raise ValueError(f"{name!r} is not ASCII: give the name as DNS carries it (an "
                             "internationalised label as xn--...)") from None
        if not 0 < len(raw) < 64:
            raise ValueError(f"{name!r}: the label {label!r} has {len(raw)} octets; a label "
                             "has 1 to 63")
        out.append(len(raw))
        out += raw
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"{name!r} has {len(out)} octets in wire form; a name has at most 255")
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
    gets addresses. Nearly every answer is small (one pod's address) and has none,
    so the slots for it live in the tail, not here.

    ``rotates`` is False for an answer that is always sent in one order (one record, a
    negative answer, the apex, ``--round-robin off``) and True for a :class:`Ring`. A flag,
    not a reference to the ring: a Ring that named itself (``ring = self``, as it once did)
    was a reference cycle, so every Ring a change replaced waited as garbage for the
    cyclic collector's full pass, which after the index's gc.freeze can take tens of
    minutes to come: RSS grew by the Rings of every change until then (issue 35,
    bench/MEMORY_CHURN.md). Nothing in an answer refers back to it.
    """

    __slots__ = ("body", "counts", "counts_edns", "flags", "size", "stat", "tail")
    rotates = False  # of the class, not a slot: 8 bytes less an answer

    def __init__(
        self, rcode: int, qtype: int, answer: Sequence[bytes], authority: Sequence[bytes] = (),
        additional: Sequence[bytes] = ()
    ) -> None:
        self.stat = stat_key(qtype, rcode)  # the key this answer is counted under, shared
        self.flags = REPLY_FLAGS[rcode]
        an, ns, ar = len(answer), len(authority), len(additional)
        part = b"".join((*answer, *authority)) if ns else b"".join(answer)
        self.body = part + b"".join(additional) if ar else part
        self.counts, self.counts_edns = section_counts(an, ns, ar), section_counts(an, ns, ar + 1)
        self.size = 12 + len(self.body)  # reply size minus the question and OPT
        self.tail: _Tail | None = None
        if self.size + MAX_QUESTION + MAX_ANSWER_OPT > PLAIN_UDP_LIMIT:
            self.tail = _Tail(an, ns, 12 + len(part), answer if self.keeps_ends else ())

    keeps_ends = True  # a Ring finds its records' ends in its own bounds

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
        self.counts_part = section_counts(an, ns, 0)
        self.counts_part_edns = section_counts(an, ns, 1)
        self.ends: Sequence[int] = _NO_ENDS
        if answer and size_part + MAX_QUESTION + MAX_ANSWER_OPT > PLAIN_UDP_LIMIT:
            end, ends = 0, []
            for rr in answer:
                end += len(rr)
                ends.append(end)
            # An array, not a tuple: 2 bytes an offset (a body is under 64 KiB) instead of
            # an int object and a slot (36), on every big RRset (an SRV answer holds one
            # per record).
            self.ends = array("H", ends)


_NO_ENDS: tuple[int, ...] = ()


class Ring(Answer):
    """An answer that rotates (``--round-robin``, more than one answer record): ``rotates``
    is True, and the query path reads its turns from the answer itself, one object as for
    any other answer (and no reference to itself: see :class:`Answer`).

    Each reply starts one record further on than the one before (per answer, so a name
    asked between others still gets every start in turn: a counter shared by all names
    would give a name asked every second query only every second start).

    A small answer (its body, once per start, takes at most :data:`SPIN_UP_TO` bytes: a
    service of a few members, the answers asked most) keeps every start's body (records
    from that start on, then the glue, which no turn moves) pre-encoded in ``spin``, a
    tuple whose first item is the body itself: a whole reply is ``spin[turn]``, nothing
    sliced. (An ``itertools.cycle`` would count in C, but reaches its bytes through three
    objects, not one: over a query file of many names that cost more than the counting,
    bench/ROUND_ROBIN.md.) Memory: at most :data:`SPIN_UP_TO` bytes an answer, which is
    why only small ones.

    A bigger one would cost the square of its size, so it is sent from ``turn`` on as
    slices of the body: ``bounds[k]`` is where record ``k`` starts in the body
    (``bounds[n]``: where the records end; ``step`` the records' size when they all have
    one: every A and AAAA RRset), nothing encoded per query. One of at most
    :data:`TWICE_UP_TO` bytes keeps its records ``twice``, end to end, and what follows
    them (``glue``, b"" for A and AAAA) apart: one slice then. (The responder finds a
    record's offset as ``k * step`` when it can: an item of a ``range`` costs six times
    that product, bench/ROUND_ROBIN.md round 3.)
    The UDP thread and the event loop's TCP may both move ``turn`` at once: the worst
    that does is one start given twice.

    A reply truncated to whole records (TC=1) gets a *page*, counted apart (``pages``): the
    records that fit from a start chosen so that successive truncated replies of one name
    tile the records, see :meth:`page`.
    """

    __slots__ = ("bounds", "glue", "laps", "length", "n", "pages", "per", "room", "spin",
                 "step", "stops", "turn", "twice")
    keeps_ends = False
    rotates = True

    def __init__(self, rcode: int, qtype: int, answer: Sequence[bytes],
                 additional: Sequence[bytes] = ()) -> None:
        super().__init__(rcode, qtype, answer, (), additional)
        self.n = n = len(answer)
        part_end = sum(map(len, answer))
        self.length = part_end
        size = len(answer[0])
        # Records of one size (every A or AAAA RRset, most SRV ones): a range holds their
        # offsets in 48 bytes, and indexes and bisects like the array the others need.
        self.step = size
        self.bounds: Sequence[int] = range(0, part_end + 1, size)
        if any(len(rr) != size for rr in answer):
            self.step = 0
            end, bounds = 0, [0]
            for rr in answer:
                end += len(rr)
                bounds.append(end)
            self.bounds = array("H", bounds)  # a body is under 64 KiB (MAX_BODY)
        body = self.body
        self.spin: tuple[bytes, ...] | None = None
        self.twice: bytes | None = None
        self.glue = b""  # what follows the records twice (no turn moves it)
        if n * len(body) <= SPIN_UP_TO:
            records, rest = body[:part_end], body[part_end:]
            # The first start is the body itself: one copy fewer.
            self.spin = (body, *(records[at:] + records[:at] + rest
                                 for at in (self.bounds[k] for k in range(1, n))))
        elif len(body) <= TWICE_UP_TO:
            self.twice = body[:part_end] * 2
            self.glue = body[part_end:]
        self.turn = 0  # the next reply's start, 0 .. n-1 (answers without a spin)
        self.pages = 0  # truncated replies so far
        # The last room a page was cut for, how many records fit it from the first, and the
        # pages of a lap: a name is asked with one or two sizes, so worked out once each.
        self.room = self.per = self.laps = 0
        self.stops: array[int] | None = None

    def page(self, body: bytes, room: int) -> tuple[int, bytes, bytes]:
        """The next truncated reply's records for ``body`` (the answer's) when ``room`` bytes
        are left for them: how many, and their bytes in two pieces (the second when they
        wrap around). Whole records, from a start that makes successive pages tile the
        RRset: with ``per`` records fitting from the first, a lap is ``laps`` replies
        starting ``per`` records apart, and lap ``L`` starts at record ``L``, so over many
        laps every record comes first. Any ``laps`` successive pages cover every record
        of an RRset of equal-sized records (A, AAAA) unless ``per`` divides ``n`` (then
        one more), as the records from ``L + 1`` of one lap on and those up to
        ``L + 1 + j·per`` of the next join up. Where a page from each start ends is worked
        out once a room (:meth:`_cut`): a page is then a lookup and two slices."""
        if room != self.room:
            self._cut(room)
        stops = self.stops
        if stops is None:
            return 0, b"", b""
        turn, laps, n = self.pages, self.laps, self.n
        self.pages = turn + 1
        start = (turn // laps + turn % laps * self.per) % n
        step, stop = self.step, stops[start]
        last = stop if stop <= n else stop - n  # the record after the page's last
        if step:  # (a range's item costs six times this product)
            at, to = start * step, last * step
        else:
            bounds = self.bounds
            at, to = bounds[start], bounds[last]
        if stop <= n:
            return stop - start, body[at:to], b""
        return stop - start, body[at : self.length], body[:to]

    def _cut(self, room: int) -> None:
        """The pages of ``room``: ``per`` records fit from the first, a lap is ``laps``
        pages, and a page from record ``k`` ends before record ``stops[k]`` (counted on past
        ``n`` when it wraps around). 2 bytes a record, for the names that get pages."""
        n, bounds, length = self.n, self.bounds, self.length
        per = bisect_right(bounds, room) - 1
        self.room, self.per, self.laps = room, per, -(-n // per) if per > 0 else 1
        if per <= 0:
            self.stops = None
            return
        stops = array("H", bytes(2 * n))
        for k in range(n):
            at = bounds[k]
            end = bisect_right(bounds, at + room, k) - 1  # records k .. end-1 fit
            if end >= n:  # and from the first on, 0 .. more-1
                end = n + bisect_right(bounds, room - (length - at), 0, k + 1) - 1
            stops[k] = end
        self.stops = stops


# An answer whose body, once per start, takes at most this many bytes keeps every start
# pre-encoded (an index a reply); else one of at most TWICE_UP_TO bytes keeps its records
# twice (one slice a reply); bigger ones take two slices of the body. More would cost more
# memory than it saves CPU (at 100k members: bench/ROUND_ROBIN.md).
SPIN_UP_TO = 1024
TWICE_UP_TO = 512


# The flags of an answer by its RCODE (QR, AA): one int object each, not one per answer.
REPLY_FLAGS = {rcode: QR_AA | rcode for rcode in range(16)}


@functools.lru_cache(maxsize=512)
def stat_key(qtype: int, rcode: int) -> tuple[int, int]:
    return (qtype, rcode)


@functools.lru_cache(maxsize=4096)
def section_counts(an: int, ns: int, ar: int) -> bytes:
    """QDCOUNT..ARCOUNT; cached, so the thousands of answers with the same counts share it."""
    return struct.pack("!4H", 1, an, ns, ar)


def resource_record(owner: bytes, rtype: int, ttl: int, rdata: bytes) -> bytes:
    return owner + struct.pack("!HHIH", rtype, CLASS_IN, ttl, len(rdata)) + rdata


AT_QUESTION = b"\xc0\x0c"  # compression pointer to the question name


def pack_addresses(addresses: Iterable[str]) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
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


@functools.lru_cache(maxsize=256)
def rr_head(rtype: int, ttl: int, rdlength: int) -> bytes:
    return struct.pack("!HHIH", rtype, CLASS_IN, ttl, rdlength)


def question_end(data: bytes) -> int | None:
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


def to_text(wire: bytes) -> str:
    """A spelled-out wire name as text, for messages (``\x03web\x00`` → ``web.``)."""
    labels, i = [], 0
    while i < len(wire) and wire[i]:
        labels.append(wire[i + 1 : i + 1 + wire[i]].decode("latin-1"))
        i += wire[i] + 1
    return ".".join(labels) + "."


def name_end(data: bytes, i: int) -> int:
    """Where the name at ``i`` ends: past its root label or its one compression pointer;
    -1 when it runs off the message, has a label type DNS does not use, or a pointer that
    does not point back past the header. Every walk over a message's names is this one
    (the query path, a transfer's request, TSIG); none follows a pointer, so no pointer
    loop can bite (TSIG's :func:`~dnsside.dns.tsig.read_name` follows them, backwards)."""
    end = len(data)
    while i < end:
        n = data[i]
        if n == 0:
            return i + 1
        if n >= 0xC0:
            return i + 2 if i + 1 < end and 12 <= ((n & 0x3F) << 8 | data[i + 1]) < i else -1
        if n > 63:
            return -1
        i += n + 1
    return -1


def read_edns(
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
        # The root (an OPT record's owner, most records here) without a call: the query
        # path pays a call per record otherwise.
        i = i + 1 if i < end and data[i] == 0 else name_end(data, i)
        if i < 0 or i + 10 > end:
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


def authority_serial(data: bytes, qend: int) -> int | None:
    """The serial of the SOA an IXFR carries first in its authority section (RFC 1995
    §3), or None when there is none or it does not parse."""
    if data[8:10] == b"\x00\x00":
        return None
    i = name_end(data, qend)
    if i < 0 or i + 10 > len(data):
        return None
    rtype, _rclass, _ttl, rdlen = struct.unpack_from("!HHIH", data, i)
    end = i + 10 + rdlen
    if rtype != SOA or rdlen < 22 or end > len(data):
        return None
    return int(struct.unpack_from("!I", data, end - 20)[0])
