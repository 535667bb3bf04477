"""Zone transfers (AXFR, RFC 5936; IXFR, RFC 1995): the request, and the records of
one transfer packed into its messages.

The records come from :class:`~dnsside.dns.versions.ZoneVersions`, one version whole
(AXFR), or the differences from the client's version to the current one (IXFR: the
current SOA, then for each step the old SOA, what went, the new SOA, what came, and the
current SOA again). An IXFR whose version the history no longer reaches gets the whole
zone in the AXFR form, which a client must accept (RFC 1995 §4: the first two records
are the SOA, then not a SOA); one that is current gets the SOA alone. Over UDP a
transfer does not fit; that is the responder's business
(:func:`dnsside.dns.responder.Responder.respond`).

Over TCP, :class:`ZoneTransfers` is the one call the connection makes for a message: it
reads the request once (question, OPT, TSIG), asks the serving side's policy, and returns
an :class:`Outcome`, whatever the message was; the responder counts every reply.

The records are built in one synchronous call: whoever calls on the thread that writes
the tables (the event loop) gets one version, with the serial that goes with it.
"""

from __future__ import annotations

import struct
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, chain

from dnsside.dns.responder import Responder
from dnsside.dns.tsig import (
    NOTAUTH,
    ReplySigner,
    TsigKey,
    Verdict,
    error_reply,
    overhead,
    verify_request,
)
from dnsside.dns.versions import Record, ZoneVersions, spelled_out
from dnsside.dns.wire import (
    AT_QUESTION,
    AXFR,
    CLASS_IN,
    FORMERR,
    IXFR,
    NOERROR,
    OPT_RR,
    QR_AA,
    REFUSED,
    SERVFAIL,
    TCP_LIMIT,
    authority_serial,
    question_end,
    read_edns,
)
from dnsside.dns.zone import Zone


def looks_like_transfer(data: bytes) -> bool:
    """A cheap first look: the QTYPE after the first zero byte past the header is AXFR
    or IXFR. It can be wrong both ways only for messages :func:`request` turns down
    anyway (a zero inside a label, a pointer in the question)."""
    end = data.find(0, 12)
    return end > 0 and data[end + 1 : end + 3] in (b"\x00\xfc", b"\x00\xfb")


@dataclass(frozen=True)
class TransferRequest:
    """A well-formed AXFR or IXFR query for the apex of one of our zones, read once: the
    replies are made from this, never from the bytes again."""

    qtype: int  # AXFR or IXFR
    zone: Zone
    question: bytes  # QNAME, QTYPE, QCLASS exactly as the client sent them
    header: bytes  # the reply's ID and flags (RD and opcode copied)
    client_serial: int | None = None  # an IXFR's: the version the client holds
    opt: bytes = b""  # the OPT record every reply carries (the request had one)
    signer: ReplySigner | None = None  # signed with our key: every reply is signed

    @property
    def kind(self) -> str:
        return "ixfr" if self.qtype == IXFR else "axfr"

    @property
    def signed(self) -> bool:
        return self.signer is not None


def request(data: bytes, zones: Mapping[bytes, Zone], signer: ReplySigner | None = None
            ) -> TransferRequest | None:
    """The transfer ``data`` asks for, or None when it is not a plain AXFR/IXFR query of
    one of ``zones``' apexes (a response, another opcode, a malformed question or OPT, an
    EDNS version we do not speak, a name below an apex, another class): the responder's
    rules answer those (NOTAUTH, FORMERR, BADVERS...). ``signer``: ``data`` is the request
    as its TSIG signed it, the TSIG taken off, and the replies are to be signed."""
    if len(data) < 17 or data[2] & 0xF8 or data[4:8] != b"\x00\x01\x00\x00":
        return None
    qend = question_end(data)
    if qend is None:
        return None
    qtype, qclass = struct.unpack_from("!HH", data, qend - 4)
    zone = zones.get(data[12 : qend - 4].lower())
    if qtype not in (AXFR, IXFR) or qclass != CLASS_IN or zone is None:
        return None
    edns, _limit, badvers, do = read_edns(data, qend, data[10] << 8 | data[11], False)
    if edns is None or badvers:
        return None
    flags = QR_AA | ((data[2] << 8 | data[3]) & 0x0100)  # RD copied
    client = authority_serial(data, qend) if qtype == IXFR else None
    return TransferRequest(qtype, zone, data[12:qend], data[:2] + flags.to_bytes(2, "big"),
                           client, OPT_RR[do] if edns else b"", signer)


def error(req: TransferRequest, rcode: int) -> bytes:
    """A reply that carries only ``rcode`` (REFUSED, FORMERR, SERVFAIL), with the question
    and the request's OPT, signed when the request was: not authoritative."""
    flags = (req.header[2] << 8 | req.header[3]) & ~0x0400 | rcode
    reply = (req.header[:2] + flags.to_bytes(2, "big")
             + struct.pack("!4H", 1, 0, 0, 1 if req.opt else 0) + req.question + req.opt)
    return req.signer.sign(reply) if req.signer is not None else reply


class Records:
    """A transfer's records as the sequences that hold them (the version's own tuple, the
    history's differences, a SOA or two), in order: shared with the version, never copied,
    so a transfer under way costs a few references, not a list of the zone."""

    __slots__ = ("count", "parts")

    def __init__(self, *parts: Sequence[Record]) -> None:
        self.parts = parts
        self.count = sum(len(p) for p in parts)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Record]:
        return chain.from_iterable(self.parts)


def axfr_records(req: TransferRequest, versions: ZoneVersions) -> Records:
    """The current version whole: its SOA, every record, the SOA again."""
    soa = (_soa(req.zone, _current(versions)),)
    return Records(soa, versions.records(), soa)


def ixfr_records(req: TransferRequest, versions: ZoneVersions) -> Records | None:
    """The differences from the client's version to the current one (the SOA alone when it
    is current), or None when the history does not reach back to it."""
    serial = _current(versions)
    since = req.client_serial
    steps = versions.differences(since) if since is not None else None
    if steps is None:
        return None
    zone = req.zone
    current = (_soa(zone, serial),)
    if not steps:
        return Records(current)
    parts: list[Sequence[Record]] = [current]
    for step in steps:
        parts += ((_soa(zone, step.old),), step.removed, (_soa(zone, step.new),), step.added)
    parts.append(current)
    return Records(*parts)


def _current(versions: ZoneVersions) -> int:
    if versions.serial is None:
        raise ValueError("no version of the zone has been cut yet")
    return versions.serial


def _soa(zone: Zone, serial: int) -> Record:
    return AT_QUESTION + zone.soa_record(serial)[len(zone.wire):]


def messages(req: TransferRequest, records: Iterable[Record], limit: int = TCP_LIMIT
             ) -> list[bytes]:
    """All of :func:`iter_messages` at once."""
    return list(iter_messages(req, records, limit))


def iter_messages(req: TransferRequest, records: Iterable[Record], limit: int = TCP_LIMIT
                  ) -> Iterator[bytes]:
    """``records`` packed into as few messages of at most ``limit`` bytes as they fit in
    (RFC 5936 §2.2), each made when it is asked for: a large zone is sent while the rest
    is still to be packed, and the caller may let queries in between.

    Each message copies the question; owners are compressed against it (the labels below
    the apex, then a pointer to offset 12), which the question makes sound when the client
    spelled the apex in lower case (else they are sent whole, case is no pointer's).

    The usual case (compressed) touches no record in Python: which records fit a message
    is found by summing their lengths in C (:func:`itertools.accumulate`) a block at a time
    and bisecting, and the message is joined from slices of the version's own sequences;
    a 600,000-record zone took a tenth of a second of the event loop's time per transfer
    record by record, this way 1.3-1.9 times less (10k members, in-process).
    """
    apex = req.zone.wire
    head_size = 12 + len(req.question) + len(req.opt) + (
        overhead(req.signer.key) if req.signer is not None else 0)
    if req.question[:-4] != apex:
        yield from _iter_spelled_out(req, records, limit, apex, head_size)
        return
    parts = records.parts if isinstance(records, Records) else (tuple(records),)
    room = limit - head_size
    pieces: list[Sequence[Record]] = []
    count = size = 0
    for part in parts:
        i, n = 0, len(part)
        while i < n:
            block = part[i : i + _BLOCK]
            ends = list(accumulate(map(len, block)))
            fit = bisect_right(ends, room - size)
            if fit == 0 and count == 0:
                fit = 1  # a record that fits no message alone: sent alone (never ours)
            if fit:
                pieces.append(block[:fit] if fit < len(block) else block)
                count += fit
                size += ends[fit - 1]
                i += fit
            if fit < len(block):  # the next record does not fit: this message is full
                yield _message_of(req, pieces, count)
                pieces, count, size = [], 0, 0
    yield _message_of(req, pieces, count)


# Records summed a block at a time: about half a message's worth (64 KiB of ~75-byte
# records), so that what is summed past a message's end is little.
_BLOCK = 512


def _message_of(req: TransferRequest, pieces: list[Sequence[Record]], count: int) -> bytes:
    """:func:`_message` from slices of the version's sequences (no list of records made)."""
    message = b"".join(chain((req.header, struct.pack("!4H", 1, count, 0, 1 if req.opt else 0),
                              req.question), *pieces, (req.opt,)))
    return req.signer.sign(message) if req.signer is not None else message


def _iter_spelled_out(req: TransferRequest, records: Iterable[Record], limit: int,
                      apex: bytes, head_size: int) -> Iterator[bytes]:
    """:func:`iter_messages` for a question that is not the apex in lower case: each
    record's owner spelled out, record by record."""
    chunk: list[bytes] = []
    size = head_size
    for rr in records:
        rr = spelled_out(rr, apex)
        if size + len(rr) > limit and chunk:
            yield _message(req, chunk)
            chunk, size = [], head_size
        chunk.append(rr)
        size += len(rr)
    yield _message(req, chunk)


def _message(req: TransferRequest, records: list[bytes]) -> bytes:
    """One message of the transfer: every one carries the request's OPT (RFC 6891 §6.1.1,
    as BIND does) and, when the request was signed, its TSIG."""
    message = b"".join((req.header, struct.pack("!4H", 1, len(records), 0, 1 if req.opt else 0),
                        req.question, *records, req.opt))
    return req.signer.sign(message) if req.signer is not None else message


@dataclass(frozen=True)
class Refusal:
    """Why the policy turns a transfer down: ``result`` as dnsside_transfers_total counts
    it (``refused``, ``busy``), ``why`` for the log."""

    result: str
    why: str


# The policy: who may have a transfer (addresses, key, caps). None lets the request in.
Admit = Callable[[TransferRequest], Refusal | None]


@dataclass(slots=True)  # not frozen: one is made for every TCP message, and a frozen
class Outcome:  # dataclass's __init__ costs a setattr call per field
    """What one TCP message gets, whatever it asked: its replies, made as they are taken.

    ``request`` is None for anything that is not a transfer of one of our zones (the
    responder answered it); for a transfer, ``result`` is how dnsside_transfers_total
    counts it (``ok``, ``full``, ``refused``, ``busy``, ``badtsig``, ``formerr``,
    ``error``), ``serial`` and ``records`` what is sent, ``why`` a refusal's or failure's
    reason, and ``verdict`` a TSIG that did not verify."""

    replies: Iterator[bytes]
    request: TransferRequest | None = None
    result: str = ""
    serial: int | None = None
    records: int = 0
    why: str = ""
    verdict: Verdict | None = None

    @property
    def sends_zone(self) -> bool:
        """A zone (or its differences) is sent: several messages, as the client reads."""
        return self.result in ("ok", "full")


class ZoneTransfers:
    """The protocol side of zone transfers over TCP: one call a message
    (:meth:`answer`), which reads the request once, asks ``admit`` (the serving side's
    policy) whether it may have one, and returns its replies, counted by the responder.

    The order is BIND 9.18's: a message that is not a transfer of one of our apexes is
    the responder's (NOTAUTH, FORMERR, BADVERS...); then the TSIG (NOTAUTH with its error);
    then the policy (REFUSED); then an IXFR without the client's SOA (FORMERR); then the
    version (SERVFAIL when there is none yet or a record cannot be sent)."""

    def __init__(self, responder: Responder, versions: Mapping[bytes, ZoneVersions],
                 tsig: TsigKey | None = None) -> None:
        self.responder = responder
        self.versions = versions
        self.tsig = tsig

    def answer(self, message: bytes, admit: Admit) -> Outcome:
        responder = self.responder
        if not looks_like_transfer(message):
            return self._responder(message)
        verdict = verify_request(message, self.tsig, int(time.time()))
        signer = None
        if verdict.status == "ok" and verdict.key is not None:
            signer = ReplySigner(verdict.key, verdict.mac, verdict.now)
        req = request(verdict.message if signer is not None else message,
                      responder.zone_by_wire, signer)
        if req is None:
            return self._responder(message)
        if not responder.ready:  # SERVFAIL with the EDE, as every query of the zone gets
            return self._responder(message, Outcome(iter(()), req, "error",
                                                    why="not ready: the first sync is not done"))
        if verdict.status not in ("ok", "unsigned"):  # RFC 8945 §5.2
            responder.count((0, FORMERR if verdict.status == "formerr" else NOTAUTH))
            return Outcome(iter((error_reply(message, verdict),)), req, "badtsig",
                           verdict=verdict)
        refusal = admit(req)
        if refusal is not None:
            return self._error(req, REFUSED, refusal.result, refusal.why)
        if req.qtype == IXFR and req.client_serial is None:
            return self._error(req, FORMERR, "formerr", "an IXFR without the client's SOA "
                               "in its authority section (RFC 1995 §3)")
        versions = self.versions.get(req.zone.wire)
        if versions is None or versions.serial is None:
            return self._error(req, SERVFAIL, "error", "no version of the zone yet")
        if versions.broken is not None:
            return self._error(req, SERVFAIL, "error", "a record cannot be transferred "
                               "faithfully: " + versions.broken)
        result = "ok"
        records = ixfr_records(req, versions) if req.qtype == IXFR else None
        if records is None:
            records = axfr_records(req, versions)
            if req.qtype == IXFR:
                result = "full"
        responder.count((req.qtype, NOERROR))
        return Outcome(iter_messages(req, records), req, result, versions.serial, len(records))

    def _responder(self, message: bytes, outcome: Outcome | None = None) -> Outcome:
        """The responder's reply to ``message`` (which counts it), in ``outcome``."""
        reply = self.responder.respond(message, udp=False)
        replies = iter((reply,) if reply is not None else ())
        return Outcome(replies) if outcome is None else replace(outcome, replies=replies)

    def _error(self, req: TransferRequest, rcode: int, result: str, why: str) -> Outcome:
        self.responder.count((req.qtype, rcode))
        return Outcome(iter((error(req, rcode),)), req, result, why=why)
