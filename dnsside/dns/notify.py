"""NOTIFY (RFC 1996): the message that tells a secondary a zone has a new version, and
how its answer is recognised.

A NOTIFY is a query with opcode 4 for the zone's SOA, AA set; it carries the new SOA in
its answer section (§3.7: a hint the secondary may use to skip its SOA query). The
secondary answers with the same ID, opcode and question, QR set; whatever else arrives
on the socket (a stray datagram, another ID, a mangled question) is not that answer.
"""

from __future__ import annotations

import struct

from dnsside.dns.wire import CLASS_IN, SOA, question_end
from dnsside.dns.zone import Zone

OPCODE_NOTIFY = 4
_FLAGS = (OPCODE_NOTIFY << 11) | 0x0400  # opcode NOTIFY, AA


def notify_message(zone: Zone, serial: int, message_id: int) -> bytes:
    """The NOTIFY of ``zone``'s version ``serial``."""
    return (struct.pack("!6H", message_id & 0xFFFF, _FLAGS, 1, 1, 0, 0)
            + zone.wire + struct.pack("!HH", SOA, CLASS_IN) + zone.soa_record(serial))


def notify_answer(reply: bytes, notify: bytes) -> int | None:
    """The RCODE of ``reply`` when it answers ``notify``, else None."""
    if len(reply) < 12 or reply[:2] != notify[:2] or not reply[2] & 0x80:
        return None
    if (reply[2] >> 3) & 0xF != OPCODE_NOTIFY or reply[4:6] != b"\x00\x01":
        return None
    end = question_end(reply)
    if end is None or reply[12:end].lower() != notify[12 : question_end(notify)]:
        return None
    return reply[3] & 0xF
