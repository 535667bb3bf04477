"""Zone transfer in-process: the snapshot holds exactly the records queries get, spelled
out; messages stay under their limit; a record with a stray pointer is never sent; and the
TCP side's access rule, counters and replies (serving/transfer.py) without a socket."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from dnsside.config import networks
from dnsside.dns import transfer
from dnsside.dns.responder import Responder
from dnsside.dns.wire import AT_QUESTION, CLASS_IN, NOERROR, SRV, Answer, rr_head, to_wire
from dnsside.serving.transfer import Transfers
from dnsside.telemetry import metrics
from testkit.inprocess import file_responder
from testkit.rawdns import AXFR, IXFR, SOA, A, parse, query
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

ZONES = ["svc-global.", "clusterset.local."]
RRTYPES = {"A", "AAAA", "SRV", "TXT", "NS"}


@pytest.fixture(scope="module")
def responder() -> Responder:
    return file_responder(DEMO, mcs_zones=["clusterset.local"])


def records(replies: list[bytes]) -> list[tuple[str, str, str]]:
    out = []
    for reply in replies:
        msg = dns.message.from_wire(reply, one_rr_per_rrset=True)
        assert msg.rcode() == dns.rcode.NOERROR
        out += [(rrset.name.to_text().lower(), dns.rdatatype.to_text(rrset.rdtype),
                 rd.to_text().lower()) for rrset in msg.answer for rd in rrset]
    return out


def axfr(responder: Responder, zone: str, limit: int = 65535, name: str | None = None
         ) -> list[bytes]:
    req = transfer.request(query(name or zone, AXFR), responder.zone_by_wire)
    assert req is not None
    snap = transfer.snapshot(req.zone, responder.answers, responder.zone_by_wire)
    return transfer.messages(req, snap, limit)


def rrsets(rrs: Iterator[tuple[str, str, str]] | list[tuple[str, str, str]]
           ) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for name, rtype, rdata in rrs:
        out.setdefault((name, rtype), set()).add(rdata)
    return out


@pytest.mark.parametrize("zone", ZONES)
def test_the_transfer_holds_what_every_query_gets(responder: Responder, zone: str) -> None:
    got = records(axfr(responder, zone))
    assert got[0][1] == got[-1][1] == "SOA" and got[0] == got[-1]
    assert sum(1 for r in got if r[1] == "SOA") == 2
    sent = rrsets(got[1:-1])
    asked = {}
    wire = to_wire(zone)
    for key in responder.answers:
        name = key[:-4]
        rtype = dns.rdatatype.to_text(struct.unpack("!H", key[-4:-2])[0])
        if not name.endswith(wire) or responder.zone_of(name).wire != wire:
            continue
        reply = parse(responder.respond(query(name, struct.unpack("!H", key[-4:-2])[0]),
                                        udp=False) or b"")
        rrs = [(rrset.name.to_text(), dns.rdatatype.to_text(rrset.rdtype), rd.to_text())
               for rrset in reply.answer for rd in rrset]
        if rrs and rtype in RRTYPES:
            asked.update(rrsets(rrs))
    assert len(asked) > 20
    assert sent == asked


def test_a_small_limit_makes_several_messages_of_the_same_records(
        responder: Responder) -> None:
    whole = axfr(responder, "svc-global")
    parts = axfr(responder, "svc-global", limit=512)
    assert len(whole) == 1 and len(parts) > 5
    assert all(len(m) <= 512 for m in parts)
    assert records(parts) == records(whole)


def test_owners_are_spelled_out_for_a_question_in_another_case(responder: Responder) -> None:
    lower = records(axfr(responder, "svc-global"))
    mixed = axfr(responder, "svc-global", name="SvC-GlObAl")
    assert records(mixed) == lower
    assert b"\xc0\x0c" not in b"".join(m[12 + 16:] for m in mixed)  # no pointer to it


def test_what_is_not_a_transfer_of_an_apex_is_left_to_the_responder(
        responder: Responder) -> None:
    zones = responder.zone_by_wire
    assert transfer.request(query("default.svc-global", AXFR), zones) is None  # below
    assert transfer.request(query("example.com", AXFR), zones) is None
    assert transfer.request(query("svc-global", AXFR, qclass=3), zones) is None  # CH
    assert transfer.request(query("svc-global", A), zones) is None
    response = bytearray(query("svc-global", AXFR))
    response[2] |= 0x80
    assert transfer.request(bytes(response), zones) is None
    assert transfer.looks_like_transfer(query("svc-global", IXFR))
    assert not transfer.looks_like_transfer(query("svc-global", A))
    # The responder itself refuses every transfer: the TCP connection takes the allowed ones.
    for udp in (True, False):
        assert parse(responder.respond(query("svc-global", AXFR), udp) or b"").rcode() == 5
    assert parse(responder.respond(query("svc-global", IXFR), False) or b"").rcode() == 5


def test_ixfr_over_udp_is_the_current_soa_alone(responder: Responder) -> None:
    msg = parse(responder.respond(query("svc-global", IXFR), True) or b"")
    assert msg.rcode() == dns.rcode.NOERROR
    soa = parse(responder.respond(query("svc-global", SOA), True) or b"")
    assert [r.to_text() for r in msg.answer] == [r.to_text() for r in soa.answer]


def planted(responder: Responder, name: str, body: Answer) -> Iterator[None]:
    key = to_wire(name) + struct.pack("!HH", SRV, CLASS_IN)
    responder.answers[key] = body
    try:
        yield
    finally:
        del responder.answers[key]


def bad_srv(target: bytes) -> Answer:
    return Answer(NOERROR, SRV, (AT_QUESTION + rr_head(SRV, 5, 6 + len(target))
                                 + struct.pack("!HHH", 0, 0, 80) + target,))


@pytest.mark.parametrize("target", [b"\xc0\x0c", b"\x03abc\xc0\x0c", b"\x03abc"])
def test_a_record_with_a_name_not_spelled_out_is_never_sent(responder: Responder,
                                                            target: bytes) -> None:
    for _ in planted(responder, "_x._tcp.web.default.svc-global", bad_srv(target)):
        with pytest.raises(transfer.Untransferable):
            axfr(responder, "svc-global")
        axfr(responder, "clusterset.local")  # the other zone is unaffected


def count(kind: str, result: str) -> float:
    value = metrics.REGISTRY.get_sample_value("dnsside_transfers_total",
                                              {"type": kind, "result": result})
    return value or 0.0


def test_the_tcp_side_refuses_by_default_and_counts(responder: Responder) -> None:
    before = count("axfr", "refused")
    replies = Transfers(responder).answer(query("svc-global", AXFR), "127.0.0.1")
    assert replies is not None and len(replies) == 1
    assert parse(replies[0]).rcode() == dns.rcode.REFUSED
    assert count("axfr", "refused") == before + 1
    assert Transfers(responder).answer(query("web.default.svc-global", AXFR), "::1") is None


def test_the_tcp_side_transfers_to_an_allowed_client_and_counts(
        responder: Responder, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    allowed = Transfers(responder, networks(["127.0.0.0/8"], "--allow-transfer"))
    before, before_bytes = count("ixfr", "ok"), metrics.REGISTRY.get_sample_value(
        "dnsside_transfer_bytes_total") or 0.0
    replies = allowed.answer(query("svc-global", IXFR), "127.0.0.9")
    assert replies is not None and records(replies) == records(axfr(responder, "svc-global"))
    assert count("ixfr", "ok") == before + 1
    assert metrics.REGISTRY.get_sample_value("dnsside_transfer_bytes_total") == (
        before_bytes + sum(map(len, replies)))
    assert "transfer: IXFR of svc-global. to 127.0.0.9: serial" in caplog.text
    errors = count("axfr", "error")
    for _ in planted(responder, "_x._tcp.web.default.svc-global", bad_srv(b"\xc0\x0c")):
        failed = allowed.answer(query("svc-global", AXFR), "127.0.0.9")
    assert failed is not None and len(failed) == 1
    assert parse(failed[0]).rcode() == dns.rcode.SERVFAIL
    assert count("axfr", "error") == errors + 1
    assert "a record cannot be transferred faithfully" in caplog.text
