"""Zone transfer (AXFR, RFC 5936): a zone's records, read from the responder's tables,
as the messages of one transfer.

The records are the answers the responder already holds, pre-encoded for queries
(:class:`~dnsside.dns.wire.Answer`): every record an answer section carries for a
name of the zone, which is every record any query for that name gets. In those
bodies a record's owner is usually a compression pointer to the question at
offset 12; a transfer's question is the zone's apex, not the name, so each owner
is spelled out here (and then compressed against the apex, see :func:`messages`).
Every other name inside them must already be spelled out (the encoders promise
so); a record that breaks the promise would point at the wrong bytes in a
transfer, so :func:`snapshot` checks each one and raises :class:`Untransferable`
instead of sending it.

The snapshot is taken in one synchronous call: whoever calls it on the thread
that writes the tables (the event loop) gets one consistent version of the zone,
with the serial that goes with it.

IXFR (RFC 1995 §4) is answered with the whole zone in the AXFR form, which a
client must accept (the first two records are the SOA, then not a SOA). Over UDP
a transfer does not fit; that is the responder's business (see
:func:`dnsside.dns.responder.Responder.respond`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from dnsside.dns.names import find_zone
from dnsside.dns.wire import (
    AAAA,
    AT_QUESTION,
    AXFR,
    CLASS_IN,
    IXFR,
    NOERROR,
    NS,
    QR_AA,
    SERVFAIL,
    SOA,
    SRV,
    TCP_LIMIT,
    TXT,
    A,
    Answer,
    question_end,
    to_text,
)
from dnsside.dns.zone import Zone


class Untransferable(ValueError):
    """A record in the tables that a transfer cannot carry faithfully (a compression
    pointer where a name must be spelled out, a type whose names are not checked)."""


def looks_like_transfer(data: bytes) -> bool:
    """A cheap first look: the QTYPE after the first zero byte past the header is AXFR
    or IXFR. It can be wrong both ways only for messages :func:`request` turns down
    anyway (a zero inside a label, a pointer in the question)."""
    end = data.find(0, 12)
    return end > 0 and data[end + 1 : end + 3] in (b"\x00\xfc", b"\x00\xfb")


@dataclass(frozen=True)
class Request:
    """A well-formed AXFR or IXFR query for the apex of one of our zones."""

    qtype: int  # AXFR or IXFR
    zone: Zone
    question: bytes  # QNAME, QTYPE, QCLASS exactly as the client sent them
    header: bytes  # the reply's ID and flags (RD and opcode copied)

    @property
    def kind(self) -> str:
        return "ixfr" if self.qtype == IXFR else "axfr"


def request(data: bytes, zones: Mapping[bytes, Zone]) -> Request | None:
    """The transfer ``data`` asks for, or None when it is not a plain AXFR/IXFR query of
    one of ``zones``' apexes (a response, another opcode, a malformed question, a name
    below an apex, another class): the responder's usual rules answer those."""
    if len(data) < 17 or data[2] & 0xF8 or data[4:8] != b"\x00\x01\x00\x00":
        return None
    qend = question_end(data)
    if qend is None:
        return None
    qtype, qclass = struct.unpack_from("!HH", data, qend - 4)
    zone = zones.get(data[12 : qend - 4].lower())
    if qtype not in (AXFR, IXFR) or qclass != CLASS_IN or zone is None:
        return None
    flags = QR_AA | ((data[2] << 8 | data[3]) & 0x0100)  # RD copied
    return Request(qtype, zone, data[12:qend], data[:2] + flags.to_bytes(2, "big"))


@dataclass(frozen=True)
class Snapshot:
    """One version of a zone: its SOA and every other record, owners spelled out."""

    zone: Zone
    serial: int
    soa: bytes  # the SOA record, owner spelled out
    records: tuple[tuple[bytes, bytes], ...]  # (owner, the rest of the record), sorted


def snapshot(zone: Zone, answers: Mapping[bytes, Answer], zones: Mapping[bytes, Zone]
             ) -> Snapshot:
    """``zone``'s records in ``answers`` (keyed QNAME + QTYPE + QCLASS, as the responder
    keeps them; ``zones`` by apex, so a zone nested in another one keeps its names).
    Raises :class:`Untransferable`."""
    found: dict[tuple[bytes, bytes], None] = {}
    soa_key = zone.wire + struct.pack("!HH", SOA, CLASS_IN)
    for key, answer in answers.items():
        name = key[:-4]
        if key == soa_key or answer.rcode != NOERROR or not name.endswith(zone.wire):
            continue
        if find_zone(name, zones) is not zone:
            continue
        for owner, rest in answer_records(name, answer):
            if owner != name and find_zone(owner, zones) is not zone:
                raise Untransferable(f"{to_text(owner)} answers for {to_text(name)}, outside "
                                     f"zone {zone.origin}")
            found[(owner, rest)] = None
    return Snapshot(zone, zone.serial, zone.soa_rr, tuple(sorted(found)))


_HEAD = struct.Struct("!HHIH")  # TYPE, CLASS, TTL, RDLENGTH


def answer_records(name: bytes, answer: Answer) -> Iterator[tuple[bytes, bytes]]:
    """The answer section of ``answer`` (the reply to a question for ``name``) as
    (owner spelled out, type to RDATA). Raises :class:`Untransferable`."""
    body, count = answer.body, answer.counts[2] << 8 | answer.counts[3]
    i = 0
    for _ in range(count):
        if body[i : i + 2] == AT_QUESTION:
            owner, i = name, i + 2
        else:
            end = _name_end(body, i, "an owner name")
            owner, i = body[i:end], end
        rtype, _rclass, _ttl, rdlen = _HEAD.unpack_from(body, i)
        rd = i + 10
        _check_rdata(rtype, body, rd, rd + rdlen, owner)
        yield owner, body[i : rd + rdlen]
        i = rd + rdlen


def _check_rdata(rtype: int, body: bytes, start: int, end: int, owner: bytes) -> None:
    """RDATA whose names are all spelled out and exactly fill it."""
    if rtype in (A, AAAA, TXT):
        return
    if rtype == SRV:
        names = [start + 6]
    elif rtype == NS:
        names = [start]
    elif rtype == SOA:
        names = [start, _name_end(body, start, "a SOA MNAME")]
    else:
        raise Untransferable(f"type {rtype} at {to_text(owner)}: its names are not checked")
    at = start
    for at in names:
        at = _name_end(body, at, f"the RDATA of type {rtype} at {to_text(owner)}")
    if rtype == SOA:
        at += 20
    if at != end:
        raise Untransferable(f"type {rtype} at {to_text(owner)}: RDATA of an unexpected length")


def _name_end(body: bytes, i: int, what: str) -> int:
    """Where the spelled-out name at ``i`` ends; a pointer is :class:`Untransferable`."""
    while True:
        if i >= len(body):
            raise Untransferable(f"{what} runs past the record")
        n = body[i]
        if n == 0:
            return i + 1
        if n > 63:
            raise Untransferable(f"{what} is a compression pointer")
        i += n + 1


def failed(req: Request) -> bytes:
    """SERVFAIL for a transfer that cannot be sent faithfully, with the question."""
    flags = (req.header[2] << 8 | req.header[3]) & ~0x0400 | SERVFAIL  # not authoritative
    return (req.header[:2] + flags.to_bytes(2, "big") + struct.pack("!4H", 1, 0, 0, 0)
            + req.question)


def messages(req: Request, snap: Snapshot, limit: int = TCP_LIMIT) -> list[bytes]:
    """The replies of one transfer: the SOA, every record, the SOA again, packed into as
    few messages of at most ``limit`` bytes as they fit in (RFC 5936 §2.2).

    Each message copies the question; owners are compressed against it (the labels below
    the apex, then a pointer to offset 12), which the question makes sound when the client
    spelled the apex in lower case (else they are sent whole, case is no pointer's).
    """
    apex = snap.zone.wire
    compress = req.question[:-4] == apex
    head_size = 12 + len(req.question)
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = head_size

    def flush() -> None:
        nonlocal chunk, size
        out.append(b"".join((req.header, struct.pack("!4H", 1, len(chunk), 0, 0), req.question,
                             *chunk)))
        chunk, size = [], head_size

    soa = AT_QUESTION + snap.soa[len(apex):] if compress else snap.soa
    rrs = [soa]
    for owner, rest in snap.records:
        if compress:
            rrs.append(owner[: len(owner) - len(apex)] + AT_QUESTION + rest)
        else:
            rrs.append(owner + rest)
    rrs.append(soa)
    for rr in rrs:
        if size + len(rr) > limit and chunk:
            flush()
        chunk.append(rr)
        size += len(rr)
    flush()
    return out
