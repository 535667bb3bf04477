"""Truncation: a UDP reply stops at 512 bytes without EDNS and at the client's payload
(at least 512, at most 1232) with it, carrying TC=1 and as many whole answer records as
fit; glue goes before answers and dropping it is not truncation; TCP gets everything.

Asked of the `server` fixture (tests/dns/conftest.py): in-process and through both UDP
modes; kdig shows a partial answer through a process of its own.
"""

from __future__ import annotations

import struct

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.dig import kdig
from testkit.fuzzing import PROFILE, responder
from testkit.inprocess import Server, ask
from testkit.rawdns import (
    AAAA,
    DO,
    NS,
    SOA,
    SRV,
    A,
    opt_rr,
    option,
    parse,
    query,
    question_of,
)
from testkit.serve import BIG, NGINX, NGINX_A, ROACH, Dnsside, answers

# --------------------------------------------------------------------------- truncation


def test_udp_without_edns_truncates_to_whole_answer_records(server: Server) -> None:
    """TC=1 with as many whole SRV records as fit in 512 bytes, no glue (see
    tests/dns/test_zone_apex.py for the rule at every size)."""
    wire = query(ROACH, SRV)
    reply = ask(server, wire)
    msg = parse(reply)
    assert len(reply) <= 512
    assert msg.flags & dns.flags.TC and msg.flags & dns.flags.AA
    assert msg.rcode() == dns.rcode.NOERROR
    assert struct.unpack("!4H", reply[4:12]) == (1, 7, 0, 0)
    assert reply[12 : 12 + len(question_of(wire))] == question_of(wire)
    full = parse(ask(server, wire, "tcp"))
    assert set(answers(msg, "SRV")) < set(answers(full, "SRV"))


def test_same_query_over_tcp_is_complete(server: Server) -> None:
    msg = parse(ask(server, query(ROACH, SRV), "tcp"))
    assert not msg.flags & dns.flags.TC
    assert len(answers(msg, "SRV")) == 10
    glue = [rr for rrset in msg.additional for rr in rrset if rrset.rdtype == dns.rdatatype.A]
    assert len(glue) == 5


def test_additional_section_goes_first(server: Server) -> None:
    full = ask(server, query(ROACH, SRV, edns=opt_rr(payload=1232)))
    assert not parse(full).flags & dns.flags.TC
    wire = query(ROACH, SRV, edns=opt_rr(payload=len(full) - 1))
    reply = ask(server, wire)
    msg = parse(reply)
    assert len(reply) < len(full)
    assert not msg.flags & dns.flags.TC, "dropping glue is not truncation (RFC 2181 §9)"
    assert len(answers(msg, "SRV")) == 10
    assert msg.additional == [] and msg.edns == 0  # only the OPT record is left


def test_tc_reply_keeps_opt(server: Server) -> None:
    reply = ask(server, query(ROACH, SRV, edns=opt_rr(payload=512)))
    msg = parse(reply)
    assert msg.flags & dns.flags.TC and msg.edns == 0 and msg.payload == 1232
    assert len(answers(msg, "SRV")) == 7 and len(reply) <= 512


def test_payload_below_512_counts_as_512(server: Server) -> None:
    msg = parse(ask(server, query(NGINX, edns=opt_rr(payload=100))))
    assert not msg.flags & dns.flags.TC and answers(msg) == NGINX_A


def test_mid_sized_answer_needs_edns(server: Server) -> None:
    plain = ask(server, query("mid.bulk.svc-global"))
    assert parse(plain).flags & dns.flags.TC and len(plain) <= 512
    edns = ask(server, query("mid.bulk.svc-global", edns=opt_rr(payload=1232)))
    assert 512 < len(edns) <= 1232
    assert len(answers(parse(edns))) == 50


@pytest.mark.parametrize("offered", [1233, 4096, 65535])
def test_udp_never_exceeds_1232_whatever_the_client_offers(server: Server, offered: int) -> None:
    for name, qtype in (("big.bulk.svc-global", A), ("big.bulk.svc-global", SRV)):
        reply = ask(server, query(name, qtype, edns=opt_rr(payload=offered)))
        assert len(reply) <= 1232
        msg = parse(reply)
        assert msg.flags & dns.flags.TC and msg.payload == 1232
        assert 0 < len(answers(msg, "A" if qtype == A else "SRV")) < 120
    tcp = parse(ask(server, query("big.bulk.svc-global", A, edns=opt_rr(payload=4096)), "tcp"))
    assert len(answers(tcp)) == 120 and not tcp.flags & dns.flags.TC


# --------------------------------------------------------------------------- truncation


def check_partial(reply: bytes, wire: bytes, limit: int, full: dns.message.Message,
                  rdtype: str) -> int:
    """A TC reply with as many whole answer records as fit: counts right, nothing else."""
    msg = parse(reply)  # parses: every record whole, counts match the records
    assert msg.flags & dns.flags.TC and msg.flags & dns.flags.AA
    assert msg.rcode() == dns.rcode.NOERROR
    assert len(reply) <= limit
    q = question_of(wire)
    assert reply[12 : 12 + len(q)] == q
    an, ns, ar = struct.unpack("!3H", reply[6:12])
    n = len(answers(msg, rdtype))
    assert an == n > 0 and ns == 0 and ar == (1 if msg.edns == 0 else 0)
    assert set(answers(msg, rdtype)) <= set(answers(full, rdtype))
    # Maximal: the next record would not have fitted.
    sizes = [len(r) for r in _records(reply, an)]
    assert len(reply) + max(sizes) > limit
    return n


def _records(reply: bytes, count: int) -> list[bytes]:
    """The first ``count`` answer records, raw (owners are 2-byte pointers here)."""
    i = 12
    while reply[i]:
        i += reply[i] + 1
    i += 5
    out = []
    for _ in range(count):
        start = i
        i += 2 if reply[i] >= 0xC0 else 0
        rdlen = struct.unpack_from("!H", reply, i + 8)[0]
        i += 10 + rdlen
        out.append(reply[start:i])
    return out


@pytest.mark.parametrize("payload", [None, 512, 700, 1000, 1232, 4096])
@pytest.mark.parametrize(("name", "qtype"), [(BIG, A), (BIG, SRV), (ROACH, SRV),
                                             ("BiG.bUlK.SvC-gLoBaL", A)])
def test_udp_truncation_keeps_the_whole_records_that_fit(
    server: Server, payload: int | None, name: str, qtype: int
) -> None:
    rdtype = "A" if qtype == A else "SRV"
    full = parse(ask(server, query(name, qtype), "tcp"))
    limit = 512 if payload is None else min(max(payload, 512), 1232)
    for options in (b"", option(65001, b"slow path")):
        if payload is None and options:
            continue
        edns = None if payload is None else opt_rr(payload, options=options)
        wire = query(name, qtype, edns=edns)
        reply = ask(server, wire)
        if ROACH in name.lower() and limit >= 700:  # fits once its glue is dropped: no TC
            msg = parse(reply)
            assert not msg.flags & dns.flags.TC and len(reply) <= limit
            assert answers(msg, "SRV") == answers(full, "SRV")
            continue
        n = check_partial(reply, wire, limit, full, rdtype)
        assert n < len(answers(full, rdtype))


def test_musl_style_client_gets_addresses_without_tcp(server: Server) -> None:
    """No EDNS, UDP only, ignore TC (musl before 1.2.4): addresses, not an empty reply."""
    msg = parse(ask(server, query(BIG, A)))
    assert msg.flags & dns.flags.TC and len(answers(msg)) == 29  # (512 - 12 - 25) // 16


def test_kdig_shows_a_partial_answer(sockets: Dnsside) -> None:

    [tc] = kdig(sockets, "+noedns", "+ignore", BIG, "A")
    assert tc["TC"] == 1 and tc["ANCOUNT"] == 29 and len(tc["answerRRs"]) == 29


@pytest.mark.quick
@settings(parent=PROFILE)
@given(name=st.sampled_from([NGINX, ROACH, "_http._tcp." + NGINX, "svc-global",
                             "nope.svc-global", "example.com", "default.svc-global"]),
       qtype=st.sampled_from([A, AAAA, SRV, NS, SOA, 255]),
       payload=st.none() | st.integers(0, 0xFFFF), do=st.booleans(),
       options=st.sampled_from([b"", option(10, b"12345678"), option(65001, b"")]))
def test_property_do_copied_and_truncation_whole(
    name: str, qtype: int, payload: int | None, do: bool, options: bytes
) -> None:
    """In-process over the demo: every UDP reply to an EDNS query copies DO; every TC
    reply parses (whole records, right counts) and fits the limit."""
    r = responder()
    edns = None if payload is None else opt_rr(payload, do=do, options=options)
    wire = query(name, qtype, edns=edns)
    reply = r.respond(wire, True)
    assert reply is not None
    msg = parse(reply)
    limit = 512 if payload is None else min(max(payload, 512), 1232)
    assert len(reply) <= limit
    if payload is not None:
        assert msg.edns == 0 and bool(msg.ednsflags & DO) == do
    if msg.flags & dns.flags.TC:
        assert msg.answer and not msg.additional and not msg.authority
