"""The protocol rules (answers, EDNS(0), truncation, header rules, malformed packets,
ANY and zone transfers, 0x20 case, NODATA/NXDOMAIN/REFUSED), each checked three ways on
the same zone: by calling `Responder.respond(bytes, udp) -> bytes` in-process (the fast
tier: no process, no socket), then through a real `dnsside serve` over UDP and TCP with
UDP moved in batches (recvmmsg/sendmmsg) and one by one.

Queries are built byte by byte (testkit/rawdns.py) so that broken ones can be sent
too; replies are read with dnspython and, where the rule is about bytes (0x20 case
echo, sizes), compared raw. What only a socket shows (TCP framing, pipelining, idle
connections, the connection cap) is in test_protocol_sockets.py.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator

import dns.flags
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest
import yaml

from dnsside.dns.responder import Responder
from testkit.inprocess import file_responder
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
    TXT,
    A,
    bulk_objects,
    exchange,
    opt_rr,
    option,
    parse,
    query,
    question_of,
    udp,
    wire_name,
)
from testkit.serve import DEMO, Dnsside, answers, expect_udp_io

TRANSPORTS = ["udp", "tcp"]
NGINX = "nginx-svc.default.svc-global"
NGINX_A = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]
ROACH = "cockroachdb.db.svc-global"
AD = 0x0020

Server = Responder | Dnsside


@pytest.fixture(scope="module", params=[
    pytest.param("in-process", marks=pytest.mark.quick), "batch", "plain"])
def srv(request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The demo plus `mid.bulk` (50 addresses: > 512 B, < 1232 B) and `big.bulk` (120:
    > 1232 B): a Responder in-process, or `dnsside serve` with `--udp-io` batch or plain."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("mid", "bulk", 50, 98) + bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    if request.param == "in-process":
        yield file_responder(path)
        return
    env = {**os.environ, "DNSSIDE_UDP_IO": request.param}
    with Dnsside("--source", str(path), "--cluster-name", "east", env=env) as s:
        yield expect_udp_io(s, request.param)


def ask(srv: Server, wire: bytes, transport: str = "udp") -> bytes:
    if isinstance(srv, Responder):
        reply = srv.respond(wire, transport == "udp")
    else:
        reply = exchange(srv.host, srv.port, wire, transport, timeout=3.0)
    assert reply is not None, "no reply"
    assert reply[:2] == wire[:2], "reply carries another ID"
    return reply


def no_reply_udp(srv: Server, wire: bytes) -> bool:
    if isinstance(srv, Responder):
        return srv.respond(wire, True) is None
    return udp(srv.host, srv.port, wire, timeout=0.5) is None


def soa_only_authority(msg: dns.message.Message) -> None:
    assert len(msg.authority) == 1
    soa = msg.authority[0]
    assert soa.rdtype == dns.rdatatype.SOA and soa.name.to_text() == "svc-global."
    assert soa.ttl == 5 and soa[0].minimum == 5


# --------------------------------------------------------------------------- basics


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_answer_is_authoritative_and_never_recursive(srv: Server, transport: str) -> None:
    msg = parse(ask(srv, query(NGINX), transport))
    assert msg.rcode() == dns.rcode.NOERROR
    assert msg.flags & dns.flags.QR and msg.flags & dns.flags.AA
    assert not msg.flags & (dns.flags.RA | dns.flags.TC | dns.flags.AD)
    assert answers(msg) == NGINX_A
    assert msg.edns == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "default.svc-global", "example.com"])
def test_rd_and_cd_copied_ad_never_set(srv: Server, transport: str, name: str) -> None:
    for flags in (0, RD, CD, RD | CD, RD | AD):
        msg = parse(ask(srv, query(name, flags=flags), transport))
        assert msg.flags & dns.flags.RD == flags & RD
        assert msg.flags & dns.flags.CD == flags & CD
        assert not msg.flags & (dns.flags.AD | dns.flags.RA)


def test_apex_soa_and_ns(srv: Server) -> None:
    soa = parse(ask(srv, query("svc-global", SOA)))
    assert soa.flags & dns.flags.AA and len(soa.answer) == 1
    rd = soa.answer[0][0]
    assert rd.mname.to_text() == "svc-global." and rd.minimum == 5, "MNAME: the NS target"
    ns = parse(ask(srv, query("svc-global", NS)))
    assert answers(ns, "NS") == ["svc-global."]


# --------------------------------------------------------------------------- EDNS(0)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("name", "qtype", "rcode"),
    [(NGINX, A, dns.rcode.NOERROR), ("default.svc-global", A, dns.rcode.NOERROR),
     ("nope.svc-global", A, dns.rcode.NXDOMAIN), ("example.com", A, dns.rcode.REFUSED),
     (NGINX, ANY, dns.rcode.NOERROR)],
)
def test_edns_echoed_with_1232_and_no_options(
    srv: Server, transport: str, name: str, qtype: int, rcode: int
) -> None:
    options = (
        option(65001, b"unknown")  # an option nobody implements
        + option(10, b"\x01\x02\x03\x04\x05\x06\x07\x08")  # COOKIE: not implemented
        + option(3, b"")  # NSID: not implemented
        + option(8, b"\x00\x01\x18\x00\x0a\x00\x00")  # client subnet 10.0.0.0/24
    )
    wire = query(name, qtype, edns=opt_rr(payload=4096, do=True, options=options))
    msg = parse(ask(srv, wire, transport))
    assert msg.rcode() == rcode
    assert msg.edns == 0 and msg.payload == 1232
    if rcode == dns.rcode.REFUSED:  # RFC 8914: Not Authoritative; nothing else is echoed
        assert [(o.otype, o.code) for o in msg.options] == [(15, 20)]
    else:
        assert not msg.options
    if rcode == dns.rcode.NOERROR and qtype == A and name == NGINX:
        assert answers(msg) == NGINX_A


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "default.svc-global", "example.com"])
def test_no_opt_without_edns(srv: Server, transport: str, name: str) -> None:
    assert parse(ask(srv, query(name), transport)).edns == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("version", [1, 2, 255])
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "example.com"])
def test_edns_version_above_zero_is_badvers(
    srv: Server, transport: str, version: int, name: str
) -> None:
    wire = query(name, edns=opt_rr(version=version, options=option(65001, b"x")))
    reply = ask(srv, wire, transport)
    msg = parse(reply)
    assert msg.rcode() == dns.rcode.BADVERS
    assert msg.edns == 0, "BADVERS carries an OPT record with the version we speak"
    assert msg.payload == 1232 and not msg.options
    assert not msg.answer and not msg.authority
    assert question_of(reply) == question_of(wire)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("additional", "arcount"),
    [
        (opt_rr() + opt_rr(), 2),  # two OPT records
        (b"\x03foo\x00" + opt_rr()[1:], 1),  # OPT owner is not the root
        (opt_rr(options=option(65001, b"abc"))[:-2], 1),  # RDLENGTH runs past the end
        (opt_rr(), 2),  # ARCOUNT promises more than there is
    ],
    ids=["two-opt", "opt-not-root", "opt-cut-short", "arcount-too-high"],
)
def test_malformed_opt_is_formerr(
    srv: Server, transport: str, additional: bytes, arcount: int
) -> None:
    wire = query(NGINX, arcount=arcount) + additional
    msg = parse(ask(srv, wire, transport))
    assert msg.rcode() == dns.rcode.FORMERR
    assert not msg.flags & dns.flags.AA


# --------------------------------------------------------------------------- truncation


def test_udp_without_edns_truncates_to_whole_answer_records(srv: Server) -> None:
    """TC=1 with as many whole SRV records as fit in 512 bytes, no glue (see
    tests/dns/test_zone_apex.py for the rule at every size)."""
    wire = query(ROACH, SRV)
    reply = ask(srv, wire)
    msg = parse(reply)
    assert len(reply) <= 512
    assert msg.flags & dns.flags.TC and msg.flags & dns.flags.AA
    assert msg.rcode() == dns.rcode.NOERROR
    assert struct.unpack("!4H", reply[4:12]) == (1, 7, 0, 0)
    assert reply[12 : 12 + len(question_of(wire))] == question_of(wire)
    full = parse(ask(srv, wire, "tcp"))
    assert set(answers(msg, "SRV")) < set(answers(full, "SRV"))


def test_same_query_over_tcp_is_complete(srv: Server) -> None:
    msg = parse(ask(srv, query(ROACH, SRV), "tcp"))
    assert not msg.flags & dns.flags.TC
    assert len(answers(msg, "SRV")) == 10
    glue = [rr for rrset in msg.additional for rr in rrset if rrset.rdtype == dns.rdatatype.A]
    assert len(glue) == 5


def test_additional_section_goes_first(srv: Server) -> None:
    full = ask(srv, query(ROACH, SRV, edns=opt_rr(payload=1232)))
    assert not parse(full).flags & dns.flags.TC
    wire = query(ROACH, SRV, edns=opt_rr(payload=len(full) - 1))
    reply = ask(srv, wire)
    msg = parse(reply)
    assert len(reply) < len(full)
    assert not msg.flags & dns.flags.TC, "dropping glue is not truncation (RFC 2181 §9)"
    assert len(answers(msg, "SRV")) == 10
    assert msg.additional == [] and msg.edns == 0  # only the OPT record is left


def test_tc_reply_keeps_opt(srv: Server) -> None:
    reply = ask(srv, query(ROACH, SRV, edns=opt_rr(payload=512)))
    msg = parse(reply)
    assert msg.flags & dns.flags.TC and msg.edns == 0 and msg.payload == 1232
    assert len(answers(msg, "SRV")) == 7 and len(reply) <= 512


def test_payload_below_512_counts_as_512(srv: Server) -> None:
    msg = parse(ask(srv, query(NGINX, edns=opt_rr(payload=100))))
    assert not msg.flags & dns.flags.TC and answers(msg) == NGINX_A


def test_mid_sized_answer_needs_edns(srv: Server) -> None:
    plain = ask(srv, query("mid.bulk.svc-global"))
    assert parse(plain).flags & dns.flags.TC and len(plain) <= 512
    edns = ask(srv, query("mid.bulk.svc-global", edns=opt_rr(payload=1232)))
    assert 512 < len(edns) <= 1232
    assert len(answers(parse(edns))) == 50


@pytest.mark.parametrize("offered", [1233, 4096, 65535])
def test_udp_never_exceeds_1232_whatever_the_client_offers(srv: Server, offered: int) -> None:
    for name, qtype in (("big.bulk.svc-global", A), ("big.bulk.svc-global", SRV)):
        reply = ask(srv, query(name, qtype, edns=opt_rr(payload=offered)))
        assert len(reply) <= 1232
        msg = parse(reply)
        assert msg.flags & dns.flags.TC and msg.payload == 1232
        assert 0 < len(answers(msg, "A" if qtype == A else "SRV")) < 120
    tcp = parse(ask(srv, query("big.bulk.svc-global", A, edns=opt_rr(payload=4096)), "tcp"))
    assert len(answers(tcp)) == 120 and not tcp.flags & dns.flags.TC


# --------------------------------------------------------------------------- header rules


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("opcode", [1, 2, 4, 5, 6, 15])
def test_opcode_other_than_query_is_notimp(srv: Server, transport: str, opcode: int) -> None:
    for edns in (None, opt_rr()):
        wire = query("svc-global", SOA, flags=opcode << 11 | RD, edns=edns)
        reply = ask(srv, wire, transport)
        assert reply[2] >> 3 & 0xF == opcode, "opcode echoed"
        assert reply[3] & 0xF == dns.rcode.NOTIMP
        assert reply[2] & 0x80 and not reply[2] & 0x04  # QR, no AA
        if edns is not None:  # RFC 6891 §7: a request with OPT gets a reply with OPT
            assert reply[-11:-8] == b"\x00\x00\x29", "OPT echoed"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_qdcount_other_than_one_is_formerr(srv: Server, transport: str) -> None:
    header_only = struct.pack("!6H", 0x4242, RD, 0, 0, 0, 0)
    two = query(NGINX, qdcount=2, qid=0x4343) + wire_name("nope.svc-global") + b"\x00\x01\x00\x01"
    for wire in (header_only, two):
        msg = parse(ask(srv, wire, transport))
        assert msg.rcode() == dns.rcode.FORMERR and not msg.flags & dns.flags.AA
        assert msg.flags & dns.flags.RD


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qclass", [3, 4, 254, 255, 0])
def test_class_other_than_in_is_refused(srv: Server, transport: str, qclass: int) -> None:
    for edns in (None, opt_rr()):
        wire = query(NGINX, qclass=qclass, edns=edns)
        reply = ask(srv, wire, transport)
        msg = parse(reply)
        assert msg.rcode() == dns.rcode.REFUSED and not msg.flags & dns.flags.AA
        assert not msg.answer and question_of(reply) == question_of(wire)
        assert msg.edns == (0 if edns else -1)


def test_responses_are_dropped_udp(srv: Server) -> None:
    for flags in (0x8000, 0x8400 | RD, 0x8000 | 4 << 11):
        assert no_reply_udp(srv, query(NGINX, flags=flags))
    assert answers(parse(ask(srv, query(NGINX)))) == NGINX_A


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
    srv: Server, transport: str, case: str
) -> None:
    wire = UNDECODABLE[case]
    reply = ask(srv, wire, transport)
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
    srv: Server, transport: str, case: str
) -> None:
    wire = query(POINTERS[case])
    reply = ask(srv, wire, transport)
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
def test_compression_loops_elsewhere_are_formerr(srv: Server, transport: str) -> None:
    for wire in (_pointer_loop_in_additional(), _forward_pointer_in_additional()):
        reply = ask(srv, wire, transport)
        assert reply[3] & 0xF == dns.rcode.FORMERR
    assert answers(parse(ask(srv, query(NGINX), transport))) == NGINX_A


# --------------------------------------------------------------------------- ANY, AXFR


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, ROACH, "mid.bulk.svc-global", "big.bulk.svc-global"])
def test_any_at_an_address_name_is_its_a_rrset(srv: Server, transport: str, name: str) -> None:
    """RFC 8482 §4.1: one real RRset, the A one, exactly as an A query gets it (same size
    rules: the bulk names are truncated over plain UDP like their A answers), never the
    whole node and never the HINFO placeholder."""
    any_reply = ask(srv, query(name, ANY), transport)
    a_reply = ask(srv, query(name, A), transport)
    msg, a_msg = parse(any_reply), parse(a_reply)
    assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
    assert msg.flags == a_msg.flags and answers(msg) == answers(a_msg)
    assert {rrset.rdtype for rrset in msg.answer} <= {A}
    if not msg.flags & dns.flags.TC:
        assert answers(msg), "addresses, not a placeholder"
    assert transport == "udp" or not msg.flags & dns.flags.TC
    assert len(any_reply) == len(a_reply) <= (512 if transport == "udp" else 65535)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_any_at_the_apex_is_hinfo_unless_it_owns_addresses(srv: Server, transport: str) -> None:
    """The apex owns SOA and NS but no address or SRV RRset: the synthesised HINFO
    (RFC 8482 §4.2) stands for them. Should the apex own addresses (an NS target at the
    apex), ANY answers those instead: tests/dns/test_any.py checks that rule on every name."""
    apex_a = parse(ask(srv, query("svc-global", A), transport))
    apex_aaaa = parse(ask(srv, query("svc-global", AAAA), transport))
    wire = query("svc-global", ANY)
    reply = ask(srv, wire, transport)
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
def test_any_at_an_empty_non_terminal_is_nodata(srv: Server, name: str) -> None:
    """An empty non-terminal owns no RRset for a synthesised HINFO to stand for."""
    msg = parse(ask(srv, query(name, ANY)))
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer
    soa_only_authority(msg)


def test_any_for_missing_name_is_nxdomain(srv: Server) -> None:
    msg = parse(ask(srv, query("nope.svc-global", ANY)))
    assert msg.rcode() == dns.rcode.NXDOMAIN
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qtype", [AXFR, IXFR])
def test_zone_transfers_are_refused(srv: Server, transport: str, qtype: int) -> None:
    msg = parse(ask(srv, query("svc-global", qtype), transport))
    assert msg.rcode() == dns.rcode.REFUSED and not msg.answer


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
    srv: Server, transport: str, name: str, qtype: int, edns: bool
) -> None:
    opt = opt_rr() if edns else None
    mixed = query(name, qtype, edns=opt)
    lower = query(name.lower(), qtype, edns=opt)
    got_mixed, got_lower = ask(srv, mixed, transport), ask(srv, lower, transport)
    q = question_of(mixed)
    assert got_mixed[12 : 12 + len(q)] == q, "question echoed exactly as sent"
    # Everything else is what the lower-case query gets: the lookup ignores case.
    assert got_mixed[:12] == got_lower[:12]
    assert got_mixed[12 + len(q) :] == got_lower[12 + len(q) :]


def test_0x20_owner_names_follow_the_question(srv: Server) -> None:
    msg = parse(ask(srv, query("NgInX-SvC.DeFaUlT.sVc-GlObAl")))
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
def test_nodata(srv: Server, transport: str, name: str, qtype: int) -> None:
    msg = parse(ask(srv, query(name, qtype), transport))
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
def test_nxdomain(srv: Server, transport: str, name: str, qtype: int) -> None:
    msg = parse(ask(srv, query(name, qtype), transport))
    assert msg.rcode() == dns.rcode.NXDOMAIN and msg.flags & dns.flags.AA
    assert not msg.answer
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "name", ["example.com", "svc-global.example", "svc-globalx", "xsvc-global", ".", "com",
             "nginx-svc.default.svc-global.cluster.local"],
)
def test_outside_the_zone_is_refused(srv: Server, transport: str, name: str) -> None:
    wire = query(name)
    reply = ask(srv, wire, transport)
    msg = parse(reply)
    assert msg.rcode() == dns.rcode.REFUSED
    assert not msg.flags & dns.flags.AA
    assert not msg.answer and not msg.authority and not msg.additional
    assert question_of(reply) == question_of(wire)
