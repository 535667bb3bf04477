"""SPEC §3 protocol rules, each through a real socket (UDP and TCP) against `dnsside serve`.

Queries are built byte by byte (tests/rawdns.py) so that broken ones can be
sent too; replies are read with dnspython and, where the rule is about bytes
(0x20 case echo, sizes), compared raw.
"""

from __future__ import annotations

import contextlib
import json
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest
import yaml
from rawdns import (
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
    Tcp,
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
from support import DEMO, Dnsside, answers, expect_udp_io, wait_for

TRANSPORTS = ["udp", "tcp"]
NGINX = "nginx-svc.default.svc-global"
NGINX_A = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]
ROACH = "cockroachdb.db.svc-global"
AD = 0x0020


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, udp_io: str) -> Iterator[Dnsside]:
    """The demo plus `mid.bulk` (50 addresses: > 512 B, < 1232 B) and `big.bulk` (120: > 1232 B)."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("mid", "bulk", 50, 98) + bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    with Dnsside("--source", str(path), "--cluster-name", "east") as s:
        yield expect_udp_io(s, udp_io)


@pytest.fixture(scope="module")
def short_idle() -> Iterator[Dnsside]:
    """Slow clients lose their slot fast here."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--tcp-max-connections", "20", "--tcp-idle-timeout", "1") as s:
        yield s


def ask(srv: Dnsside, wire: bytes, transport: str = "udp") -> bytes:
    reply = exchange(srv.host, srv.port, wire, transport, timeout=3.0)
    assert reply is not None, "no reply"
    assert reply[:2] == wire[:2], "reply carries another ID"
    return reply


def no_reply_udp(srv: Dnsside, wire: bytes) -> bool:
    return udp(srv.host, srv.port, wire, timeout=0.5) is None


def soa_only_authority(msg: dns.message.Message) -> None:
    assert len(msg.authority) == 1
    soa = msg.authority[0]
    assert soa.rdtype == dns.rdatatype.SOA and soa.name.to_text() == "svc-global."
    assert soa.ttl == 5 and soa[0].minimum == 5


# --------------------------------------------------------------------------- basics


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_answer_is_authoritative_and_never_recursive(srv: Dnsside, transport: str) -> None:
    msg = parse(ask(srv, query(NGINX), transport))
    assert msg.rcode() == dns.rcode.NOERROR
    assert msg.flags & dns.flags.QR and msg.flags & dns.flags.AA
    assert not msg.flags & (dns.flags.RA | dns.flags.TC | dns.flags.AD)
    assert answers(msg) == NGINX_A
    assert msg.edns == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "default.svc-global", "example.com"])
def test_rd_and_cd_copied_ad_never_set(srv: Dnsside, transport: str, name: str) -> None:
    for flags in (0, RD, CD, RD | CD, RD | AD):
        msg = parse(ask(srv, query(name, flags=flags), transport))
        assert msg.flags & dns.flags.RD == flags & RD
        assert msg.flags & dns.flags.CD == flags & CD
        assert not msg.flags & (dns.flags.AD | dns.flags.RA)


def test_apex_soa_and_ns(srv: Dnsside) -> None:
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
    srv: Dnsside, transport: str, name: str, qtype: int, rcode: int
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
def test_no_opt_without_edns(srv: Dnsside, transport: str, name: str) -> None:
    assert parse(ask(srv, query(name), transport)).edns == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("version", [1, 2, 255])
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "example.com"])
def test_edns_version_above_zero_is_badvers(
    srv: Dnsside, transport: str, version: int, name: str
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
    srv: Dnsside, transport: str, additional: bytes, arcount: int
) -> None:
    wire = query(NGINX, arcount=arcount) + additional
    msg = parse(ask(srv, wire, transport))
    assert msg.rcode() == dns.rcode.FORMERR
    assert not msg.flags & dns.flags.AA


# --------------------------------------------------------------------------- truncation


def test_udp_without_edns_truncates_to_whole_answer_records(srv: Dnsside) -> None:
    """TC=1 with as many whole SRV records as fit in 512 bytes, no glue (see
    tests/test_zone_rules.py for the rule at every size)."""
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


def test_same_query_over_tcp_is_complete(srv: Dnsside) -> None:
    msg = parse(ask(srv, query(ROACH, SRV), "tcp"))
    assert not msg.flags & dns.flags.TC
    assert len(answers(msg, "SRV")) == 10
    glue = [rr for rrset in msg.additional for rr in rrset if rrset.rdtype == dns.rdatatype.A]
    assert len(glue) == 5


def test_additional_section_goes_first(srv: Dnsside) -> None:
    full = ask(srv, query(ROACH, SRV, edns=opt_rr(payload=1232)))
    assert not parse(full).flags & dns.flags.TC
    wire = query(ROACH, SRV, edns=opt_rr(payload=len(full) - 1))
    reply = ask(srv, wire)
    msg = parse(reply)
    assert len(reply) < len(full)
    assert not msg.flags & dns.flags.TC, "dropping glue is not truncation (RFC 2181 §9)"
    assert len(answers(msg, "SRV")) == 10
    assert msg.additional == [] and msg.edns == 0  # only the OPT record is left


def test_tc_reply_keeps_opt(srv: Dnsside) -> None:
    reply = ask(srv, query(ROACH, SRV, edns=opt_rr(payload=512)))
    msg = parse(reply)
    assert msg.flags & dns.flags.TC and msg.edns == 0 and msg.payload == 1232
    assert len(answers(msg, "SRV")) == 7 and len(reply) <= 512


def test_payload_below_512_counts_as_512(srv: Dnsside) -> None:
    msg = parse(ask(srv, query(NGINX, edns=opt_rr(payload=100))))
    assert not msg.flags & dns.flags.TC and answers(msg) == NGINX_A


def test_mid_sized_answer_needs_edns(srv: Dnsside) -> None:
    plain = ask(srv, query("mid.bulk.svc-global"))
    assert parse(plain).flags & dns.flags.TC and len(plain) <= 512
    edns = ask(srv, query("mid.bulk.svc-global", edns=opt_rr(payload=1232)))
    assert 512 < len(edns) <= 1232
    assert len(answers(parse(edns))) == 50


@pytest.mark.parametrize("offered", [1233, 4096, 65535])
def test_udp_never_exceeds_1232_whatever_the_client_offers(srv: Dnsside, offered: int) -> None:
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
def test_opcode_other_than_query_is_notimp(srv: Dnsside, transport: str, opcode: int) -> None:
    for edns in (None, opt_rr()):
        wire = query("svc-global", SOA, flags=opcode << 11 | RD, edns=edns)
        reply = ask(srv, wire, transport)
        assert reply[2] >> 3 & 0xF == opcode, "opcode echoed"
        assert reply[3] & 0xF == dns.rcode.NOTIMP
        assert reply[2] & 0x80 and not reply[2] & 0x04  # QR, no AA
        if edns is not None:  # RFC 6891 §7: a request with OPT gets a reply with OPT
            assert reply[-11:-8] == b"\x00\x00\x29", "OPT echoed"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_qdcount_other_than_one_is_formerr(srv: Dnsside, transport: str) -> None:
    header_only = struct.pack("!6H", 0x4242, RD, 0, 0, 0, 0)
    two = query(NGINX, qdcount=2, qid=0x4343) + wire_name("nope.svc-global") + b"\x00\x01\x00\x01"
    for wire in (header_only, two):
        msg = parse(ask(srv, wire, transport))
        assert msg.rcode() == dns.rcode.FORMERR and not msg.flags & dns.flags.AA
        assert msg.flags & dns.flags.RD


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qclass", [3, 4, 254, 255, 0])
def test_class_other_than_in_is_refused(srv: Dnsside, transport: str, qclass: int) -> None:
    for edns in (None, opt_rr()):
        wire = query(NGINX, qclass=qclass, edns=edns)
        reply = ask(srv, wire, transport)
        msg = parse(reply)
        assert msg.rcode() == dns.rcode.REFUSED and not msg.flags & dns.flags.AA
        assert not msg.answer and question_of(reply) == question_of(wire)
        assert msg.edns == (0 if edns else -1)


def test_responses_are_dropped_udp(srv: Dnsside) -> None:
    for flags in (0x8000, 0x8400 | RD, 0x8000 | 4 << 11):
        assert no_reply_udp(srv, query(NGINX, flags=flags))
    assert answers(parse(ask(srv, query(NGINX)))) == NGINX_A


def test_responses_are_dropped_tcp_connection_kept(srv: Dnsside) -> None:
    with Tcp(srv.host, srv.port) as conn:
        conn.send(query(NGINX, flags=0x8000, qid=1), query(NGINX, qid=2))
        reply = conn.recv()
        assert reply is not None and reply[:2] == b"\x00\x02"


@pytest.mark.parametrize("size", [0, 1, 2, 5, 11])
def test_packets_shorter_than_a_header_are_dropped(srv: Dnsside, size: int) -> None:
    assert no_reply_udp(srv, query(NGINX)[:size])
    with Tcp(srv.host, srv.port) as conn:
        conn.send(query(NGINX)[:size], query(NGINX, qid=7))
        reply = conn.recv()
        assert reply is not None and reply[:2] == b"\x00\x07"


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
    srv: Dnsside, transport: str, case: str
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
    srv: Dnsside, transport: str, case: str
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
def test_compression_loops_elsewhere_are_formerr(srv: Dnsside, transport: str) -> None:
    for wire in (_pointer_loop_in_additional(), _forward_pointer_in_additional()):
        reply = ask(srv, wire, transport)
        assert reply[3] & 0xF == dns.rcode.FORMERR
    assert answers(parse(ask(srv, query(NGINX), transport))) == NGINX_A


# --------------------------------------------------------------------------- ANY, AXFR


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", [NGINX, ROACH, "mid.bulk.svc-global", "big.bulk.svc-global"])
def test_any_at_an_address_name_is_its_a_rrset(srv: Dnsside, transport: str, name: str) -> None:
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
def test_any_at_the_apex_is_hinfo_unless_it_owns_addresses(srv: Dnsside, transport: str) -> None:
    """The apex owns SOA and NS but no address or SRV RRset: the synthesised HINFO
    (RFC 8482 §4.2) stands for them. Should the apex own addresses (an NS target at the
    apex), ANY answers those instead: tests/test_any.py checks that rule on every name."""
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
def test_any_at_an_empty_non_terminal_is_nodata(srv: Dnsside, name: str) -> None:
    """An empty non-terminal owns no RRset for a synthesised HINFO to stand for."""
    msg = parse(ask(srv, query(name, ANY)))
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer
    soa_only_authority(msg)


def test_any_for_missing_name_is_nxdomain(srv: Dnsside) -> None:
    msg = parse(ask(srv, query("nope.svc-global", ANY)))
    assert msg.rcode() == dns.rcode.NXDOMAIN
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("qtype", [AXFR, IXFR])
def test_zone_transfers_are_refused(srv: Dnsside, transport: str, qtype: int) -> None:
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
    srv: Dnsside, transport: str, name: str, qtype: int, edns: bool
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


def test_0x20_owner_names_follow_the_question(srv: Dnsside) -> None:
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
def test_nodata(srv: Dnsside, transport: str, name: str, qtype: int) -> None:
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
def test_nxdomain(srv: Dnsside, transport: str, name: str, qtype: int) -> None:
    msg = parse(ask(srv, query(name, qtype), transport))
    assert msg.rcode() == dns.rcode.NXDOMAIN and msg.flags & dns.flags.AA
    assert not msg.answer
    soa_only_authority(msg)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "name", ["example.com", "svc-global.example", "svc-globalx", "xsvc-global", ".", "com",
             "nginx-svc.default.svc-global.cluster.local"],
)
def test_outside_the_zone_is_refused(srv: Dnsside, transport: str, name: str) -> None:
    wire = query(name)
    reply = ask(srv, wire, transport)
    msg = parse(reply)
    assert msg.rcode() == dns.rcode.REFUSED
    assert not msg.flags & dns.flags.AA
    assert not msg.answer and not msg.authority and not msg.additional
    assert question_of(reply) == question_of(wire)


# --------------------------------------------------------------------------- TCP (RFC 7766)


def test_tcp_pipelined_queries_answered_with_their_ids(srv: Dnsside) -> None:
    names = [(NGINX, A), (ROACH, SRV), ("nope.svc-global", A), ("default.svc-global", A),
             ("example.com", A), ("_http._tcp.nginx-svc.default.svc-global", SRV)] * 5
    wires = {0x100 + i: query(n, t, qid=0x100 + i) for i, (n, t) in enumerate(names)}
    with Tcp(srv.host, srv.port) as conn:
        conn.send(*wires.values())
        got: dict[int, bytes] = {}
        for _ in wires:
            reply = conn.recv()
            assert reply is not None
            got[reply[0] << 8 | reply[1]] = reply
    assert got.keys() == wires.keys()
    for qid, reply in got.items():
        assert question_of(reply) == question_of(wires[qid])
        assert reply[4:] == ask(srv, wires[qid], "tcp")[4:]


def test_tcp_message_trickled_byte_by_byte_is_answered(srv: Dnsside) -> None:
    wire = query(NGINX, qid=0x7777)
    framed = struct.pack("!H", len(wire)) + wire
    with Tcp(srv.host, srv.port) as conn:
        for b in framed:
            conn.send_raw(bytes([b]))
        reply = conn.recv()
    assert reply is not None and answers(parse(reply)) == NGINX_A


def test_tcp_burst_of_pipelined_queries_all_answered(srv: Dnsside) -> None:
    """A burst far larger than one read: every query answered, none dropped, no reset."""
    n = 20000
    names = [query(NGINX, qid=i) if i % 2 else query(ROACH, SRV, qid=i) for i in range(n)]
    with Tcp(srv.host, srv.port, timeout=30) as conn:
        sender = threading.Thread(target=conn.send, args=names, daemon=True)
        sender.start()  # we must read while it writes: the server may stop reading us
        ids = set()
        for _ in range(n):
            reply = conn.recv(timeout=30)
            assert reply is not None, f"connection closed after {len(ids)} answers"
            ids.add(reply[0] << 8 | reply[1])
        sender.join(30)
    assert ids == set(range(n))


def test_tcp_idle_connection_is_closed(short_idle: Dnsside) -> None:
    with Tcp(short_idle.host, short_idle.port) as conn:
        assert conn.exchange(query(NGINX)) is not None
        assert conn.closed_within(10), "an idle connection must be closed by the idle timeout"
    with Tcp(short_idle.host, short_idle.port) as silent:
        assert silent.closed_within(10)


@pytest.mark.parametrize(
    "partial",
    [b"\x00", struct.pack("!H", 40) + b"\x12\x34" + b"\x00" * 8, struct.pack("!H", 65535)],
    ids=["half-length-prefix", "half-message", "length-only"],
)
def test_tcp_partial_message_loses_its_slot(short_idle: Dnsside, partial: bytes) -> None:
    with Tcp(short_idle.host, short_idle.port) as conn:
        conn.send_raw(partial)
        assert conn.closed_within(10)


def test_tcp_trickling_a_message_does_not_extend_the_deadline(short_idle: Dnsside) -> None:
    """One byte every 0.2 s of a 300-byte message: closed after the idle timeout, never served."""
    with Tcp(short_idle.host, short_idle.port) as conn:
        conn.send_raw(struct.pack("!H", 300))
        sent = 0
        closed = False
        for _ in range(60):  # 60 x 0.2 s = 12 s at most, the deadline
            if conn.closed_within(0.2):
                closed = True
                break
            try:
                conn.send_raw(b"\x00")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sent += 1
        assert closed, f"still open after trickling {sent} bytes"


def test_tcp_connection_cap(tmp_path: Path) -> None:
    """Connections beyond the cap are closed unanswered; UDP is unaffected; freed slots reopen."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--tcp-max-connections", "20", "--tcp-idle-timeout", "60") as s:
        held = [Tcp(s.host, s.port) for _ in range(20)]
        try:
            for i, conn in enumerate(held):
                reply = conn.exchange(query(NGINX, qid=i))
                assert reply is not None and reply[:2] == struct.pack("!H", i)
            for _ in range(3):
                with Tcp(s.host, s.port) as extra:
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        extra.send(query(NGINX, qid=999))
                    assert extra.recv() is None, "a connection beyond the cap was served"
                assert answers(parse(ask(s, query(NGINX)))) == NGINX_A  # UDP unaffected
            for conn in held:  # the 20 are still served
                assert conn.exchange(query(NGINX)) is not None
            for conn in held[:5]:
                conn.close()
            held = held[5:]

            def fresh_connection_served() -> bool:
                try:
                    return tcp_answer(s) is not None
                except (ConnectionResetError, BrokenPipeError, TimeoutError):
                    return False

            wait_for(fresh_connection_served, 10, "a freed slot to be reusable")
        finally:
            for conn in held:
                conn.close()


def tcp_answer(s: Dnsside) -> bytes | None:
    with Tcp(s.host, s.port) as conn:
        conn.send(query(NGINX))
        return conn.recv()
