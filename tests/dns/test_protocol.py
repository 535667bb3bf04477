"""The protocol rules: answers, header rules, malformed packets, ANY and zone transfers,
0x20 case, NODATA/NXDOMAIN/REFUSED, each asked of the `server` fixture
(tests/dns/conftest.py) three ways: `Responder.respond(bytes, udp) -> bytes` in-process
(the fast tier: no process, no socket), then a real `dnsside serve` over UDP and TCP
with UDP moved in batches (recvmmsg/sendmmsg) and one by one.

Queries are built byte by byte (testkit/rawdns.py) so that broken ones can be sent
too; replies are read with dnspython and, where the rule is about bytes (0x20 case
echo, sizes), compared raw. EDNS is in test_edns.py, truncation in test_truncation.py,
what only a socket shows (TCP framing, pipelining, idle connections, the connection
cap) in test_protocol_sockets.py.
"""

from __future__ import annotations

import struct

import dns.flags
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest

from testkit.inprocess import Server, ask, no_reply_udp
from testkit.rawdns import (
    AAAA,
    ANY,
    AXFR,
    CD,
    HINFO,
    IXFR,
    NS,
    RD,
    SOA,
    SRV,
    TRANSPORTS,
    TXT,
    A,
    opt_rr,
    parse,
    query,
    question_of,
    same_but_turn,
    wire_name,
)
from testkit.serve import NGINX, NGINX_A, ROACH, answers

AD = 0x0020

def soa_only_authority(msg: dns.message.Message) -> None:
    assert len(msg.authority) == 1
    soa = msg.authority[0]
    assert soa.rdtype == dns.rdatatype.SOA and soa.name.to_text() == "svc-global."
    assert soa.ttl == 5 and soa[0].minimum == 5


# --------------------------------------------------------------------------- basics


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_answer_is_authoritative_and_never_recursive(server: Server, transport: str) -> None:
    msg = parse(ask(server, query(NGINX), transport))
    assert msg.rcode() == dns.rcode.NOERROR
    assert msg.flags & dns.flags.QR and msg.flags & dns.flags.AA
    assert not msg.flags & (dns.flags.RA | dns.flags.TC | dns.flags.AD)
    assert answers(msg) == NGINX_A
    assert msg.edns == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "default.svc-global", "example.com"])
def test_rd_and_cd_copied_ad_never_set(server: Server, transport: str, name: str) -> None:
    for flags in (0, RD, CD, RD | CD, RD | AD):
        msg = parse(ask(server, query(name, flags=flags), transport))
        assert msg.flags & dns.flags.RD == flags & RD
        assert msg.flags & dns.flags.CD == flags & CD
        assert not msg.flags & (dns.flags.AD | dns.flags.RA)


def test_apex_soa_and_ns(server: Server) -> None:
    soa = parse(ask(server, query("svc-global", SOA)))
    assert soa.flags & dns.flags.AA and len(soa.answer) == 1
    rd = soa.answer[0][0]
    assert rd.mname.to_text() == "svc-global." and rd.minimum == 5, "MNAME: the NS target"
    ns = parse(ask(server, query("svc-global", NS)))
    assert answers(ns, "NS") == ["svc-global."]


# --------------------------------------------------------------------------- header rules


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("opcode", [1, 2, 4, 5, 6, 15])
def test_opcode_other_than_query_is_notimp(server: Server, transport: str, opcode: int) -> None:
    for edns in (None, opt_rr()):
        wire = query("svc-global", SOA, flags=opcode << 11 | RD, edns=edns)
        reply = ask(server, wire, transport)
        assert reply[2] >> 3 & 0xF == opcode, "opcode echoed"
        assert reply[3] & 0xF == dns.rcode.NOTIMP
        assert reply[2] & 0x80 and not reply[2] & 0x04  # QR, no AA
        if edns is not None:  # RFC 6891 §7: a request with OPT gets a reply with OPT
            assert reply[-11:-8] == b"\x00\x00\x29", "OPT echoed"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_qdcount_other_than_one_is_formerr(server: Server, transport: str) -> None:
    header_only = struct.pack("!6H", 0x4242, RD, 0, 0, 0, 0)
    two = query(NGINX, qdcount=2, qid=0x4343) + wire_name("nope.svc-global") + b"\x00\x01\x00\x01"
    for wire in (header_only, two):
        msg = parse(ask(server, wire, transport))
        assert msg.rcode() == dns.rcode.FORMERR and not msg.flags & dns.flags.AA
        assert msg.flags & dns.flags.RD


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qclass", [3, 4, 254, 255, 0])
def test_class_other_than_in_is_refused(server: Server, transport: str, qclass: int) -> None:
    for edns in (None, opt_rr()):
        wire = query(NGINX, qclass=qclass, edns=edns)
        reply = ask(server, wire, transport)
        msg = parse(reply)
        assert msg.rcode() == dns.rcode.REFUSED and not msg.flags & dns.flags.AA
        assert not msg.answer and question_of(reply) == question_of(wire)
        assert msg.edns == (0 if edns else -1)


def test_responses_are_dropped_udp(server: Server) -> None:
    for flags in (0x8000, 0x8400 | RD, 0x8000 | 4 << 11):
        assert no_reply_udp(server, query(NGINX, flags=flags))
    assert answers(parse(ask(server, query(NGINX)))) == NGINX_A


UNDECODABLE = {
    "no-root-label": struct.pack("!6H", 9, RD, 1, 0, 0, 0) + b"\x05nginx\x03svc",
    "no-type-class": struct.pack("!6H", 9, RD, 1, 0, 0, 0) + wire_name(NGINX),
    "half-type": struct.pack("!6H", 9, RD, 1, 0, 0, 0) + wire_name(NGINX) + b"\x00",
    "label-0x40": query(b"\x41" + b"a" * 65 + b"\x00"),
    "label-0x80": query(b"\x81" + b"a" * 1 + b"\x00"),
    "name-over-255": query(b"".join(b"\x3f" + b"a" * 63 for _ in range(4)) + b"\x00"),
    "length-past-end": struct.pack("!6H", 9, RD, 1, 0, 0, 0) + b"\x3fab",
    "arcount-but-nothing": query(NGINX, arcount=1),
    "ancount-garbage": query(NGINX, ancount=1, tail=b"\x00\x00"),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", sorted(UNDECODABLE))
def test_undecodable_with_readable_header_is_formerr(
    server: Server, transport: str, case: str
) -> None:
    wire = UNDECODABLE[case]
    reply = ask(server, wire, transport)
    assert reply[3] & 0xF == dns.rcode.FORMERR
    assert reply[2] & 0x80 and not reply[2] & 0x04  # QR, no AA
    parse(reply)


POINTERS = {
    "self-loop": b"\xc0\x0c",
    "two-pointer-loop": b"\xc0\x0e\xc0\x0c",
    "label-then-loop": b"\x05nginx\xc0\x0c",
    "forward": b"\x05nginx\xc0\x20" + b"\x00" * 20,
    "into-header": b"\xc0\x00",
    "past-the-end": b"\xc0\xff",
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", sorted(POINTERS))
def test_compression_pointers_in_the_question_are_formerr(
    server: Server, transport: str, case: str
) -> None:
    wire = query(POINTERS[case])
    reply = ask(server, wire, transport)
    assert reply[3] & 0xF == dns.rcode.FORMERR


def _pointer_loop_in_additional() -> bytes:
    """A query whose third additional record's owner is a 2-pointer loop at offset 448."""
    head = query(NGINX, arcount=3, edns=opt_rr())
    filler_at = len(head)
    rdlen = 448 - (filler_at + 11)  # owner(1) + type/class/ttl/rdlen(10) before the rdata
    filler = b"\x00" + struct.pack("!HHIH", TXT, 1, 0, rdlen) + b"\x00" * rdlen
    loop = b"\xc1\xc1\xc0\x01" + struct.pack("!HIH", 1, 0, 0)  # 448 → 449 → 448 …
    wire = head + filler + loop
    assert wire[448:450] == b"\xc1\xc1"
    return wire


def _forward_pointer_in_additional() -> bytes:
    head = query(NGINX, arcount=2, edns=opt_rr())
    return head + b"\xc0\xf0" + struct.pack("!HHIH", TXT, 1, 0, 0)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_compression_loops_elsewhere_are_formerr(server: Server, transport: str) -> None:
    for wire in (_pointer_loop_in_additional(), _forward_pointer_in_additional()):
        reply = ask(server, wire, transport)
        assert reply[3] & 0xF == dns.rcode.FORMERR
    assert answers(parse(ask(server, query(NGINX), transport))) == NGINX_A


# --------------------------------------------------------------------------- ANY, AXFR


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, ROACH, "mid.bulk.svc-global", "big.bulk.svc-global"])
def test_any_at_an_address_name_is_its_a_rrset(server: Server, transport: str, name: str) -> None:
    """RFC 8482 §4.1: one real RRset, the A one, exactly as an A query gets it (same size
    rules: the bulk names are truncated over plain UDP like their A answers), never the
    whole node and never the HINFO placeholder."""
    any_reply = ask(server, query(name, ANY), transport)
    a_reply = ask(server, query(name, A), transport)
    msg, a_msg = parse(any_reply), parse(a_reply)
    assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
    assert msg.flags == a_msg.flags and {rrset.rdtype for rrset in msg.answer} <= {A}
    # Truncated, each reply carries the next page of the records (--round-robin).
    if msg.flags & dns.flags.TC:
        everything = answers(parse(ask(server, query(name, A), "tcp")))
        assert set(answers(msg)) <= set(everything)
        assert len(answers(msg)) == len(answers(a_msg))
    else:
        assert answers(msg) == answers(a_msg)
    if not msg.flags & dns.flags.TC:
        assert answers(msg), "addresses, not a placeholder"
    assert transport == "udp" or not msg.flags & dns.flags.TC
    assert len(any_reply) == len(a_reply) <= (512 if transport == "udp" else 65535)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_any_at_the_apex_is_hinfo_unless_it_owns_addresses(server: Server, transport: str) -> None:
    """The apex owns SOA and NS but no address or SRV RRset: the synthesised HINFO
    (RFC 8482 §4.2) stands for them. Should the apex own addresses (an NS target at the
    apex), ANY answers those instead: tests/dns/test_any.py checks that rule on every name."""
    apex_a = parse(ask(server, query("svc-global", A), transport))
    apex_aaaa = parse(ask(server, query("svc-global", AAAA), transport))
    wire = query("svc-global", ANY)
    reply = ask(server, wire, transport)
    msg = parse(reply)
    if answers(apex_a) or answers(apex_aaaa, "AAAA"):
        owned = apex_a if answers(apex_a) else apex_aaaa
        assert [r.rdtype for r in msg.answer] == [r.rdtype for r in owned.answer]
        assert msg.answer == owned.answer
        return
    assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
    assert not msg.flags & dns.flags.TC
    assert [rrset.rdtype for rrset in msg.answer] == [HINFO] and len(msg.answer[0]) == 1
    assert msg.answer[0][0].cpu == b"RFC8482"
    assert not msg.additional and not msg.authority
    assert len(reply) < 512 and len(reply) < 2 * len(wire) + 40, "not an amplifier"


@pytest.mark.parametrize(
    "name", ["default.svc-global", "db.svc-global", "_tcp.nginx-svc.default.svc-global"]
)
def test_any_at_an_empty_non_terminal_is_nodata(server: Server, name: str) -> None:
    """An empty non-terminal owns no RRset for a synthesised HINFO to stand for."""
    msg = parse(ask(server, query(name, ANY)))
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer
    soa_only_authority(msg)


def test_any_for_missing_name_is_nxdomain(server: Server) -> None:
    msg = parse(ask(server, query("nope.svc-global", ANY)))
    assert msg.rcode() == dns.rcode.NXDOMAIN
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qtype", [AXFR, IXFR])
def test_zone_transfers_are_refused(server: Server, transport: str, qtype: int) -> None:
    """No --allow-transfer: refused, but for IXFR over UDP without the client's SOA in its
    authority section, which is FORMERR (RFC 1995 §3; BIND 9.18 answers the same): over UDP
    nothing asks who may transfer, an IXFR gets the current SOA alone at most."""
    msg = parse(ask(server, query("svc-global", qtype), transport))
    if qtype == IXFR and transport == "udp":
        assert msg.rcode() == dns.rcode.FORMERR and not msg.answer
        return
    assert msg.rcode() == dns.rcode.REFUSED and not msg.answer


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qtype", [AXFR, IXFR])
@pytest.mark.parametrize("name", ["web.default.svc-global", "example.com"])
def test_a_transfer_of_a_name_that_is_no_apex_is_notauth(server: Server, transport: str,
                                                          qtype: int, name: str) -> None:
    """RFC 5936 §2.2.1: not authoritative for the zone asked for, NOTAUTH; BIND 9.18 says so
    below an apex and outside its zones alike (it used to be REFUSED)."""
    msg = parse(ask(server, query(name, qtype), transport))
    assert msg.rcode() == dns.rcode.NOTAUTH and not msg.answer


# --------------------------------------------------------------------------- 0x20


MIXED = [
    ("NgInX-SvC.DeFaUlT.sVc-GlObAl", A),  # fast path
    ("_HTTP._Tcp.NGINX-svc.default.SVC-GLOBAL", SRV),  # SRV with glue pointing into the question
    ("CockroachDB.DB.Svc-Global", SRV),  # truncated over UDP
    ("DeFaUlT.SvC-gLoBaL", A),  # NODATA
    ("NoPe.SvC-gLoBaL", A),  # NXDOMAIN
    ("NGINX-SVC.DEFAULT.SVC-GLOBAL", ANY),
    ("ExAmPlE.CoM", A),  # REFUSED
    ("SVC-GLOBAL", SOA),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("name", "qtype"), MIXED)
@pytest.mark.parametrize("edns", [False, True])
def test_0x20_question_echoed_byte_for_byte(
    server: Server, transport: str, name: str, qtype: int, edns: bool
) -> None:
    opt = opt_rr() if edns else None
    mixed = query(name, qtype, edns=opt)
    lower = query(name.lower(), qtype, edns=opt)
    got_mixed, got_lower = ask(server, mixed, transport), ask(server, lower, transport)
    q = question_of(mixed)
    assert got_mixed[12 : 12 + len(q)] == q, "question echoed exactly as sent"
    # Everything else is what the lower-case query gets (the lookup ignores case), but for
    # the record the answer starts at (--round-robin).
    assert same_but_turn(got_mixed[:12] + got_lower[12 : 12 + len(q)] + got_mixed[12 + len(q) :],
                         got_lower)


def test_0x20_owner_names_follow_the_question(server: Server) -> None:
    msg = parse(ask(server, query("NgInX-SvC.DeFaUlT.sVc-GlObAl")))
    assert msg.answer[0].name.to_text() == "NgInX-SvC.DeFaUlT.sVc-GlObAl."
    assert answers(msg) == NGINX_A


# ------------------------------------------------------------------ NODATA, NXDOMAIN, REFUSED


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("name", "qtype"),
    [("default.svc-global", A), ("db.svc-global", A), ("default.svc-global", SRV),
     ("_tcp.nginx-svc.default.svc-global", SRV), ("_tcp.nginx-svc.default.svc-global", A),
     (NGINX, AAAA), (NGINX, TXT), ("east.nginx-svc.default.svc-global", SRV),
     ("svc-global", AAAA), ("svc-global", SRV), ("_http._tcp.nginx-svc.default.svc-global", A)],
)
def test_nodata(server: Server, transport: str, name: str, qtype: int) -> None:
    msg = parse(ask(server, query(name, qtype), transport))
    assert msg.rcode() == dns.rcode.NOERROR, "an empty non-terminal is never NXDOMAIN (RFC 8020)"
    assert msg.flags & dns.flags.AA
    assert not msg.answer and not msg.additional
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("name", "qtype"),
    [("nope.svc-global", A), ("metrics.default.svc-global", A), ("nope.default.svc-global", SRV),
     ("_grpc._tcp.nginx-svc.default.svc-global", SRV),
     ("_http._udp.nginx-svc.default.svc-global", SRV),
     ("x.nginx-set-0.east.nginx-svc.default.svc-global", A),
     ("nope.east.nginx-svc.default.svc-global", A), ("a.b.c.d.svc-global", AAAA)],
)
def test_nxdomain(server: Server, transport: str, name: str, qtype: int) -> None:
    msg = parse(ask(server, query(name, qtype), transport))
    assert msg.rcode() == dns.rcode.NXDOMAIN and msg.flags & dns.flags.AA
    assert not msg.answer
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "name", ["example.com", "svc-global.example", "svc-globalx", "xsvc-global", ".", "com",
             "nginx-svc.default.svc-global.cluster.local"],
)
def test_outside_the_zone_is_refused(server: Server, transport: str, name: str) -> None:
    wire = query(name)
    reply = ask(server, wire, transport)
    msg = parse(reply)
    assert msg.rcode() == dns.rcode.REFUSED
    assert not msg.flags & dns.flags.AA
    assert not msg.answer and not msg.authority and not msg.additional
    assert question_of(reply) == question_of(wire)


# --------------------------------------------------------------------------- name walks

HEADER = bytes(12)


@pytest.mark.quick
@pytest.mark.parametrize(("message", "start", "end"), [
    (HEADER + b"\x03web\x00", 12, 17),  # labels, then the root
    (HEADER + b"\x00", 12, 13),  # the root alone (an OPT record's owner)
    (HEADER + b"\x03web\x00" + b"\xc0\x0c", 17, 19),  # a pointer back to the question
    (HEADER + b"\x03web\x00" + b"\x01a\xc0\x0c", 17, 21),  # labels, then a pointer
    (HEADER + b"\x03web\x00" + b"\xc0\x11", 17, -1),  # a pointer to itself: a loop
    (HEADER + b"\x03web\x00" + b"\xc0\x40", 17, -1),  # a pointer forward
    (HEADER + b"\x03web\x00" + b"\xc0\x02", 17, -1),  # a pointer into the header
    (HEADER + b"\x03web\x00" + b"\xc0", 17, -1),  # a pointer cut short
    (HEADER + b"\x03we", 12, -1),  # a label that runs off the message
    (HEADER + b"\x03web", 12, -1),  # no root label
    (HEADER + b"\x41" + b"x" * 65 + b"\x00", 12, -1),  # label type 01: unknown
])
def test_a_name_in_a_message_ends_where_its_labels_do(message: bytes, start: int,
                                                       end: int) -> None:
    """The one walk over a message's names (the query path's records, a transfer's
    request, TSIG): it follows no pointer, and a pointer must point back past the
    header."""
    from dnsside.dns.wire import name_end

    assert name_end(message, start) == end
