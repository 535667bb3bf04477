"""EDNS(0) (RFC 6891) and what rides on it: the OPT record echoed with our 1232-byte
payload and no options, BADVERS for versions above 0, malformed OPT records as FORMERR,
the DO bit copied into every reply (RFC 3225 §3) on the fast path and the slow one, and
Extended DNS Errors (RFC 8914): EDE 20 (Not Authoritative) on REFUSED, EDE 14 (Not Ready)
before the first sync, none on answers.

The rules are asked of the `server` fixture (tests/dns/conftest.py): in-process and
through both UDP modes; dig and kdig show them through a process of their own. How EDNS
sizes truncate is in test_truncation.py.
"""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from testkit.dig import dig
from testkit.inprocess import Server, ask
from testkit.rawdns import (
    ANY,
    DO,
    EDE,
    NS,
    SOA,
    TRANSPORTS,
    A,
    opt_rr,
    option,
    parse,
    query,
    question_of,
)
from testkit.serve import BIG, NGINX, NGINX_A, Dnsside, answers, wait_for
from testkit.threadedkube import ThreadedKube


def ede(msg: dns.message.Message) -> list[tuple[int, str]]:
    return [(o.code, o.text or "") for o in msg.options if o.otype == EDE]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- EDNS(0)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("name", "qtype", "rcode"),
    [(NGINX, A, dns.rcode.NOERROR), ("default.svc-global", A, dns.rcode.NOERROR),
     ("nope.svc-global", A, dns.rcode.NXDOMAIN), ("example.com", A, dns.rcode.REFUSED),
     (NGINX, ANY, dns.rcode.NOERROR)],
)
def test_edns_echoed_with_1232_and_no_options(
    server: Server, transport: str, name: str, qtype: int, rcode: int
) -> None:
    options = (
        option(65001, b"unknown")  # an option nobody implements
        + option(10, b"\x01\x02\x03\x04\x05\x06\x07\x08")  # COOKIE: not implemented
        + option(3, b"")  # NSID: not implemented
        + option(8, b"\x00\x01\x18\x00\x0a\x00\x00")  # client subnet 10.0.0.0/24
    )
    wire = query(name, qtype, edns=opt_rr(payload=4096, do=True, options=options))
    msg = parse(ask(server, wire, transport))
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
def test_no_opt_without_edns(server: Server, transport: str, name: str) -> None:
    assert parse(ask(server, query(name), transport)).edns == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("version", [1, 2, 255])
@pytest.mark.parametrize("name", [NGINX, "nope.svc-global", "example.com"])
def test_edns_version_above_zero_is_badvers(
    server: Server, transport: str, version: int, name: str
) -> None:
    wire = query(name, edns=opt_rr(version=version, options=option(65001, b"x")))
    reply = ask(server, wire, transport)
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
    server: Server, transport: str, additional: bytes, arcount: int
) -> None:
    wire = query(NGINX, arcount=arcount) + additional
    msg = parse(ask(server, wire, transport))
    assert msg.rcode() == dns.rcode.FORMERR
    assert not msg.flags & dns.flags.AA


# --------------------------------------------------------------------------- DO bit


# (name, qtype, which path answers it): the fast path takes names with a pre-encoded
# answer and a plain OPT record; everything else goes the slow path.
DO_CASES = [
    (NGINX, A, "fast"), ("svc-global", NS, "fast"), ("nope.svc-global", A, "slow"),
    ("default.svc-global", A, "slow"), ("example.com", A, "slow"), ("svc-global", 252, "slow"),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("name", "qtype", "path"), DO_CASES)
def test_do_bit_copied(server: Server, transport: str, name: str, qtype: int, path: str) -> None:
    for do in (True, False, True):  # the fast path caches OPT records: alternate
        for options in (b"", option(65001, b"x")):  # an option sends even a hit the slow way
            reply = ask(server, query(name, qtype, edns=opt_rr(do=do, options=options)), transport)
            msg = parse(reply)
            assert msg.edns == 0 and msg.payload == 1232
            assert bool(msg.ednsflags & DO) == do, (name, do, options)
            assert msg.ednsflags & ~DO == 0, "no other flag"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_do_bit_copied_into_badvers_and_notimp(server: Server, transport: str) -> None:
    for do in (True, False):
        bad = parse(ask(server, query(NGINX, edns=opt_rr(version=1, do=do)), transport))
        assert bad.rcode() == dns.rcode.BADVERS and bool(bad.ednsflags & DO) == do
        notimp = ask(server, query(NGINX, flags=4 << 11, edns=opt_rr(do=do)), transport)
        assert notimp[3] & 0xF == dns.rcode.NOTIMP
        assert notimp[-11:-8] == b"\x00\x00\x29" and bool(notimp[-4] & 0x80) == do


def test_dig_dnssec_shows_do(sockets: Dnsside) -> None:
    assert "flags: do;" in (dig(sockets, NGINX, "+dnssec").edns or "")
    assert "flags:;" in (dig(sockets, NGINX).edns or "")
    assert "flags: do;" in (dig(sockets, "nope.svc-global", "+dnssec").edns or "")


# --------------------------------------------------------------------------- EDE


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("name", "qclass"), [("example.com", 1), ("com", 1), (".", 1),
                                              (NGINX, 3), ("svc-global", 255)])
def test_refused_carries_ede_not_authoritative(
    server: Server, transport: str, name: str, qclass: int
) -> None:
    for do in (False, True):
        msg = parse(ask(server, query(name, qclass=qclass, edns=opt_rr(do=do)), transport))
        assert msg.rcode() == dns.rcode.REFUSED
        assert ede(msg) == [(20, "dnsside serves only its own zones, class IN")]
        assert bool(msg.ednsflags & DO) == do
    plain = parse(ask(server, query(name, qclass=qclass), transport))
    assert plain.rcode() == dns.rcode.REFUSED and plain.edns == -1, "no EDNS, no EDE"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_answers_carry_no_ede(server: Server, transport: str) -> None:
    for name, qtype in ((NGINX, A), ("nope.svc-global", A), ("default.svc-global", A),
                        ("svc-global", SOA), (BIG, A)):
        msg = parse(ask(server, query(name, qtype, edns=opt_rr(do=True)), transport))
        assert not msg.options, (name, msg.options)


def test_dig_shows_ede(sockets: Dnsside) -> None:
    d = dig(sockets, "example.com")
    assert d.status == "REFUSED"
    assert "; EDE: 20 (Not Authoritative): (dnsside serves only its own zones, class IN)" \
        in d.opt_lines, d.opt_lines


def test_before_the_first_sync_everything_in_the_zone_is_servfail_with_ede(
    kube: ThreadedKube,
) -> None:
    """The apex too (SOA, NS, its address): nothing answers NOERROR while /readyz says 503."""
    kube.call(kube.kube.fail_next, 10_000, 500, match=lambda r: "services" in r.path)
    with Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                 "--kube-backoff-cap", "0.3", wait_synced=False) as srv:
        wait_for(lambda: srv.query(NGINX), what="an answer")
        assert srv.http("/readyz")[0] == 503
        for transport in TRANSPORTS:
            for name, qtype in ((NGINX, A), ("svc-global", SOA), ("svc-global", NS),
                                ("svc-global", A), ("nope.svc-global", A)):
                for do in (False, True):
                    wire = query(name, qtype, edns=opt_rr(do=do))
                    msg = parse(ask(srv, wire, transport))
                    assert msg.rcode() == dns.rcode.SERVFAIL, (name, qtype, msg)
                    assert not msg.answer and not msg.flags & dns.flags.AA
                    assert ede(msg) == [(14, "dnsside has not synced its source yet")]
                    assert bool(msg.ednsflags & DO) == do
                plain = parse(ask(srv, query(name, qtype), transport))
                assert plain.rcode() == dns.rcode.SERVFAIL and plain.edns == -1
            out = parse(ask(srv, query("example.com", A, edns=opt_rr()), transport))
            assert out.rcode() == dns.rcode.REFUSED and ede(out)[0][0] == 20
        d = dig(srv, "svc-global", "SOA")
        assert d.status == "SERVFAIL"
        assert "; EDE: 14 (Not Ready): (dnsside has not synced its source yet)" in d.opt_lines
        kube.call(kube.kube.clear_failures)
        srv.wait_log("initial sync done")
        assert srv.query("svc-global", "SOA").rcode() == dns.rcode.NOERROR
        assert answers(srv.query("svc-global", "NS"), "NS") == ["svc-global."]
        assert answers(srv.query("svc-global", "A")) == ["127.0.0.1"]
        assert srv.http("/readyz")[0] == 200
