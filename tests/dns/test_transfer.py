"""Zone transfer without a socket: the records of an AXFR and an IXFR (dns/transfer.py,
dns/versions.py) checked against the responder's own answers, and the TCP side's access
rule, counters and replies (serving/transfer.py)."""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections.abc import Iterator

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import pytest

from dnsside.core.index import Index
from dnsside.dns import transfer
from dnsside.dns.responder import Responder
from dnsside.dns.tsig import make_key
from dnsside.dns.versions import Untransferable, answer_records
from dnsside.dns.wire import AT_QUESTION, NOERROR, SRV, Answer, rr_head, to_wire
from dnsside.model.events import Delete, Kind, Upsert
from dnsside.netvalues import networks
from dnsside.serving.transfer import Transfer, Transfers
from dnsside.sources.file import load_records
from dnsside.telemetry import metrics
from testkit.inprocess import file_index
from testkit.rawdns import AXFR, IXFR, SOA, A, parse, query
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

ZONES = ["svc-global.", "clusterset.local."]
RRTYPES = {"A", "AAAA", "SRV", "TXT", "NS"}


@pytest.fixture(scope="module")
def index() -> Index:
    """The demo, its zones kept as versions, the first one cut (what serve does once
    synced); a test that changes it puts it back."""
    idx = file_index(DEMO, mcs_zones=["clusterset.local"], allow_transfer=["127.0.0.0/8"])
    idx.publisher.cut(1000)
    return idx


@pytest.fixture(scope="module")
def responder(index: Index) -> Responder:
    return index.responder


def records(replies: list[bytes]) -> list[tuple[str, str, str]]:
    out = []
    for reply in replies:
        msg = dns.message.from_wire(reply, one_rr_per_rrset=True)
        assert msg.rcode() == dns.rcode.NOERROR
        out += [(rrset.name.to_text().lower(), dns.rdatatype.to_text(rrset.rdtype),
                 rd.to_text().lower()) for rrset in msg.answer for rd in rrset]
    return out


def axfr(index: Index, zone: str, limit: int = 65535, name: str | None = None
         ) -> list[bytes]:
    req = transfer.request(query(name or zone, AXFR), index.responder.zone_by_wire)
    assert req is not None
    return transfer.messages(req, transfer.axfr_records(req, index.publisher.versions[req.zone.wire]),
                             limit)


def transferring() -> tuple[Index, Transfers]:
    """A demo index of its own that keeps versions (the first cut at its sync), and its
    TCP side for 127.0.0.0/8."""
    idx = file_index(DEMO, mcs_zones=["clusterset.local"], allow_transfer=["127.0.0.0/8"])
    return idx, Transfers(idx.responder, networks(["127.0.0.0/8"], "--allow-transfer"),
                          idx.publisher.versions)


def sent(transfers: Transfers, wire: bytes, peer: str) -> list[bytes]:
    """Every reply ``transfers`` sends to ``wire`` from ``peer``."""
    return list(transfers.answer(wire, peer))


def ixfr_query(zone: str, serial: int) -> bytes:
    """An IXFR query as a secondary sends it: the SOA of its version in the authority."""
    q = dns.message.make_query(zone, "IXFR")
    q.authority.append(dns.rrset.from_text(
        zone, 5, "IN", "SOA", f"{zone} hostmaster.{zone} {serial} 7200 1800 86400 5"))
    return q.to_wire()


def rrsets(rrs: Iterator[tuple[str, str, str]] | list[tuple[str, str, str]]
           ) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for name, rtype, rdata in rrs:
        out.setdefault((name, rtype), set()).add(rdata)
    return out


@pytest.mark.parametrize("zone", ZONES)
def test_the_transfer_holds_what_every_query_gets(index: Index, zone: str) -> None:
    responder = index.responder
    got = records(axfr(index, zone))
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


def test_a_small_limit_makes_several_messages_of_the_same_records(index: Index) -> None:
    whole = axfr(index, "svc-global")
    parts = axfr(index, "svc-global", limit=512)
    assert len(whole) == 1 and len(parts) > 5
    assert all(len(m) <= 512 for m in parts)
    assert records(parts) == records(whole)


def test_owners_are_spelled_out_for_a_question_in_another_case(index: Index) -> None:
    lower = records(axfr(index, "svc-global"))
    mixed = axfr(index, "svc-global", name="SvC-GlObAl")
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
    """RFC 1995 §2, §4: over UDP an IXFR gets the current SOA alone, whatever the client
    holds (BIND 9.18 answers so, even for differences that would fit): a client behind it
    asks again over TCP. Without the client's SOA it is FORMERR (RFC 1995 §3; BIND's)."""
    soa = parse(responder.respond(query("svc-global", SOA), True) or b"")
    serial = soa.answer[0][0].serial
    for since in (serial - 1, serial, serial + 5):  # behind, current, (a replica's) newer
        msg = parse(responder.respond(ixfr_query("svc-global.", since), True) or b"")
        assert msg.rcode() == dns.rcode.NOERROR and not msg.flags & dns.flags.TC
        assert [r.to_text() for r in msg.answer] == [r.to_text() for r in soa.answer]
    msg = parse(responder.respond(query("svc-global", IXFR), True) or b"")
    assert msg.rcode() == dns.rcode.FORMERR and not msg.answer


def bad_srv(target: bytes) -> Answer:
    return Answer(NOERROR, SRV, (AT_QUESTION + rr_head(SRV, 5, 6 + len(target))
                                 + struct.pack("!HHH", 0, 0, 80) + target,))


@pytest.mark.parametrize("target", [b"\xc0\x0c", b"\x03abc\xc0\x0c", b"\x03abc"])
def test_a_record_with_a_name_not_spelled_out_is_never_sent(target: bytes) -> None:
    name = to_wire("_x._tcp.web.default.svc-global")
    with pytest.raises(Untransferable):
        list(answer_records(name, bad_srv(target)))
    idx = file_index(DEMO, mcs_zones=["clusterset.local"], allow_transfer=["127.0.0.0/8"])
    idx.publisher.cut(1000)
    idx.publisher.versions[to_wire("svc-global")].replace(name, None, bad_srv(target))
    assert idx.publisher.versions[to_wire("svc-global")].broken is not None
    assert idx.publisher.versions[to_wire("clusterset.local")].broken is None  # the other zone is fine


def count(kind: str, result: str) -> float:
    value = metrics.REGISTRY.get_sample_value("dnsside_transfers_total",
                                              {"type": kind, "result": result})
    return value or 0.0


def test_the_tcp_side_refuses_by_default_and_counts(index: Index) -> None:
    responder = index.responder
    before = count("axfr", "refused")
    replies = sent(Transfers(responder, versions=index.publisher.versions), query("svc-global", AXFR),
                                                                    "127.0.0.1")
    assert replies is not None and len(replies) == 1
    assert parse(replies[0]).rcode() == dns.rcode.REFUSED
    assert count("axfr", "refused") == before + 1
    below = sent(Transfers(responder), query("web.default.svc-global", AXFR), "::1")
    assert [parse(r).rcode() for r in below] == [dns.rcode.NOTAUTH]  # the responder's
    outside = Transfers(responder, networks(["10.0.0.0/8"], "--allow-transfer"), index.publisher.versions)
    replies = sent(outside, query("svc-global", AXFR), "127.0.0.1")
    assert replies is not None and parse(replies[0]).rcode() == dns.rcode.REFUSED
    assert count("axfr", "refused") == before + 2


def test_the_tcp_side_transfers_to_an_allowed_client_and_counts(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    idx, allowed = transferring()
    errors = count("axfr", "error")
    # The first version was cut at the initial sync, before the first answer: the SOA's
    # serial is one a transfer sends (issue 36: SERVFAIL in the first second).
    soa = parse(idx.responder.respond(query("svc-global", SOA), True) or b"")
    first = records(sent(allowed, query("svc-global", AXFR), "127.0.0.9"))
    assert first[0][1] == "SOA" and int(first[0][2].split()[2]) == soa.answer[0][0].serial
    assert idx.publisher.cut_serial == soa.answer[0][0].serial
    idx.publisher.cut(1000)
    before, full, before_bytes = count("ixfr", "ok"), count("ixfr", "full"), \
        metrics.REGISTRY.get_sample_value("dnsside_transfer_bytes_total") or 0.0
    replies = sent(allowed, ixfr_query("svc-global.", 990), "127.0.0.9")
    assert replies is not None and records(replies) == records(axfr(idx, "svc-global"))
    assert count("ixfr", "full") == full + 1 and count("ixfr", "ok") == before
    assert metrics.REGISTRY.get_sample_value("dnsside_transfer_bytes_total") == (
        before_bytes + sum(map(len, replies)))
    assert ("transfer: IXFR from 990 of svc-global. to 127.0.0.9: serial 1000, whole zone"
            in caplog.text)
    current = sent(allowed, ixfr_query("svc-global.", 1000), "127.0.0.9")
    assert current is not None and [r[1] for r in records(current)] == ["SOA"]
    assert count("ixfr", "ok") == before + 1
    assert "serial 1000, the SOA alone, the client is current" in caplog.text
    ahead = sent(allowed, ixfr_query("svc-global.", 1500), "127.0.0.9")
    assert ahead is not None and [r[1] for r in records(ahead)] == ["SOA"]
    assert "holds svc-global. at serial 1500, ahead of ours (1000)" in caplog.text
    idx.publisher.versions[to_wire("svc-global")].replace(to_wire("_x._tcp.web.default.svc-global"),
                                                None, bad_srv(b"\xc0\x0c"))
    failed = sent(allowed, query("svc-global", AXFR), "127.0.0.9")
    assert failed is not None and len(failed) == 1
    assert parse(failed[0]).rcode() == dns.rcode.SERVFAIL
    assert count("axfr", "error") == errors + 1
    assert "a record cannot be transferred faithfully" in caplog.text


def zone_records(index: Index, zone: str) -> set[tuple[str, str, str]]:
    return set(records(axfr(index, zone))[1:-1])


def apply_ixfr(old: set[tuple[str, str, str]], replies: list[bytes]
               ) -> tuple[set[tuple[str, str, str]], list[int]]:
    """What a secondary holding ``old`` holds after the IXFR ``replies``, and the serials
    of the SOAs in them (RFC 1995 §4: current, then old/new per step, then current)."""
    rrs = records(replies)
    serials = [int(rd.split()[2]) for _n, t, rd in rrs if t == "SOA"]
    held, removing = set(old), False  # the first SOA inside opens a removal
    for rr in rrs[1:-1]:
        if rr[1] == "SOA":
            removing = not removing
            continue
        if removing:
            assert rr in held, f"IXFR removes {rr}, which the old version does not hold"
            held.discard(rr)
        else:
            held.add(rr)
    return held, serials


def test_ixfr_sends_the_differences_that_turn_each_old_version_into_the_current_one(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    idx, allowed = transferring()
    idx.publisher.cut(1000)
    held = {1000: {z: zone_records(idx, z) for z in ("svc-global", "clusterset.local")}}
    by_name = {r.name: r for r in load_records(DEMO)[0] if r.namespace == "default"}
    mirror = next(n for n in by_name if n.startswith("nginx-set-2-"))
    steps = [[Delete(Kind.SERVICE, "default", mirror)],  # a pod's mirror goes
             [Upsert(by_name[mirror])]]  # and comes back
    # a mirror moves to another address
    moved = dataclasses.replace(by_name["nginx-set-0-west"], cluster_ips=("10.43.9.9",))
    steps.append([Upsert(moved)])
    for serial, events in zip((1001, 1002, 1003), steps, strict=True):
        idx.apply(events)
        assert idx.publisher.pending
        idx.publisher.cut(serial)
        held[serial] = {z: zone_records(idx, z) for z in held[1000]}
        assert held[serial] != held[serial - 1]
    for zone in held[1000]:
        for since in (1000, 1001, 1002):
            replies = sent(allowed, ixfr_query(zone + ".", since), "127.0.0.9")
            assert replies is not None
            got, serials = apply_ixfr(held[since][zone], replies)
            assert got == held[1003][zone]
            assert serials[0] == serials[-1] == 1003
            assert serials[1:-1] == [s for step in range(since, 1003) for s in (step, step + 1)]
    assert "differences" in caplog.text


KEY = dns.tsig.Key("xfr-key.", "c2VjcmV0IHNlY3JldCBzZWNyZXQgc2VjcmV0IDMyIGJ5dGVz", "hmac-sha256")
OTHER = dns.tsig.Key("xfr-key.", "YW5vdGhlciBzZWNyZXQgb2YgMzIgYnl0ZXMgZm9yIHRlc3Q=", "hmac-sha256")


def signed_axfr(key: dns.tsig.Key | None) -> dns.message.Message:
    q = dns.message.make_query("svc-global.", "AXFR")
    if key is not None:
        q.use_tsig(key)
    return q


def test_with_a_key_only_transfers_signed_with_it_are_answered_and_signed(
        index: Index, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    key = make_key("xfr-key.", "hmac-sha256", KEY.secret)
    signed = Transfers(index.responder, versions=index.publisher.versions, tsig=key)  # any address
    q = signed_axfr(KEY)
    replies = sent(signed, q.to_wire(), "192.0.2.7")
    assert replies is not None
    # dnspython reads them as dns.query.xfr does: each message's MAC chained to the last.
    ctx, got = None, []
    for wire in replies:
        msg = dns.message.from_wire(wire, keyring={KEY.name: KEY}, request_mac=q.mac,
                                    xfr=True, tsig_ctx=ctx, multi=True,
                                    one_rr_per_rrset=True)
        ctx = msg.tsig_ctx
        assert msg.had_tsig and msg.rcode() == dns.rcode.NOERROR
        got += [(rrset.name.to_text().lower(), dns.rdatatype.to_text(rrset.rdtype),
                 rd.to_text().lower()) for rrset in msg.answer for rd in rrset]
    assert got == records(axfr(index, "svc-global"))
    badtsig = count("axfr", "badtsig")
    unsigned = sent(signed, signed_axfr(None).to_wire(), "192.0.2.7")
    assert unsigned is not None and parse(unsigned[0]).rcode() == dns.rcode.REFUSED
    wrong_q = signed_axfr(OTHER)
    wrong = sent(signed, wrong_q.to_wire(), "192.0.2.7")
    assert wrong is not None
    with pytest.raises(dns.tsig.PeerBadSignature):
        dns.message.from_wire(wrong[0], keyring={OTHER.name: OTHER}, request_mac=wrong_q.mac)
    assert count("axfr", "badtsig") == badtsig + 2
    assert "no TSIG, and --tsig-key-file asks every transfer for one" in caplog.text
    assert "its TSIG is signed with another secret (BADSIG) (key xfr-key." in caplog.text
    # With --allow-transfer too, both must hold: the key does not open another address.
    # Its REFUSED is signed, as serve's responder signs every answer to a signed query.
    both = Transfers(index.responder, networks(["127.0.0.0/8"], "--allow-transfer"),
                     index.publisher.versions, key)
    index.responder.tsig = key
    try:
        q = signed_axfr(KEY)
        outside = sent(both, q.to_wire(), "192.0.2.7")
    finally:
        index.responder.tsig = None
    assert outside is not None
    refused = dns.message.from_wire(outside[0], keyring={KEY.name: KEY}, request_mac=q.mac)
    assert refused.rcode() == dns.rcode.REFUSED and refused.had_tsig


def test_a_signed_query_is_answered_signed_and_a_wrong_key_gets_notauth() -> None:
    """A secondary signs its SOA checks (and an IXFR over UDP): the answer must be signed,
    or it throws it away."""
    responder = file_index(DEMO).responder
    responder.tsig = make_key("xfr-key.", "hmac-sha256", KEY.secret)
    for transport in (True, False):
        q = dns.message.make_query("svc-global.", "SOA")
        q.use_tsig(KEY)
        reply = dns.message.from_wire(responder.respond(q.to_wire(), transport) or b"",
                                      keyring={KEY.name: KEY}, request_mac=q.mac)
        assert reply.had_tsig and reply.rcode() == dns.rcode.NOERROR
        assert reply.answer[0].rdtype == dns.rdatatype.SOA
    wrong = dns.message.make_query("svc-global.", "SOA")
    wrong.use_tsig(OTHER)
    with pytest.raises(dns.tsig.PeerBadSignature):
        dns.message.from_wire(responder.respond(wrong.to_wire(), True) or b"",
                              keyring={OTHER.name: OTHER}, request_mac=wrong.mac)
    responder.tsig = None  # no key at all: a signed query is BADKEY
    with pytest.raises(dns.tsig.PeerBadKey):
        dns.message.from_wire(responder.respond(wrong.to_wire(), True) or b"",
                              keyring={OTHER.name: OTHER}, request_mac=wrong.mac)


def test_a_transfer_is_packed_as_it_is_sent_and_one_cut_short_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    """The messages are made as the connection asks for them: what a closed connection
    leaves unsent is never packed, and the log line says the client went first."""
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    idx, allowed = transferring()
    idx.publisher.cut(1000)
    whole = sent(allowed, query("svc-global", AXFR), "127.0.0.9")
    assert whole is not None and len(whole) == 1
    caplog.clear()
    replies = allowed.answer(query("svc-global", AXFR), "127.0.0.9")
    assert replies.streamed
    assert "transfer: AXFR" not in caplog.text  # nothing sent yet, nothing logged
    assert next(iter(replies)) == whole[0]
    replies.close()  # the connection is lost
    assert f"records: cut short after {len(whole[0])} bytes in 1 messages" in caplog.text


def rcode(replies: Transfer) -> int:
    got = list(replies)
    assert not replies.streamed and len(got) == 1
    return parse(got[0]).rcode()


def test_transfers_are_capped_per_client_and_in_all_and_share_the_versions_records(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 33: 500 unread transfers held 500 copies of the zone. At most
    --transfer-max-per-client (2) transfers under way to one client (an IPv6 /64 is one)
    and --transfer-max (3) in all; one more is REFUSED, counted `busy` and logged once a
    client; a slot comes back when a transfer ends or is cut short. Every transfer refers
    to the version's own records, never a copy."""
    idx, _ = transferring()
    idx.publisher.cut(1000)
    allowed = Transfers(idx.responder, networks(["127.0.0.0/8", "2001:db8::/32"],
                                                "--allow-transfer"),
                        idx.publisher.versions, max_total=3, max_per_client=2)
    wire = query("svc-global", AXFR)
    busy = count("axfr", "busy")
    first, second = allowed.answer(wire, "2001:db8::1"), allowed.answer(wire, "2001:db8::2")
    assert first.streamed and second.streamed
    assert rcode(allowed.answer(wire, "2001:db8::3")) == dns.rcode.REFUSED  # the same /64
    third = allowed.answer(wire, "127.0.0.4")
    assert third.streamed
    assert rcode(allowed.answer(wire, "127.0.0.5")) == dns.rcode.REFUSED  # 3 in all
    assert rcode(allowed.answer(wire, "127.0.0.5")) == dns.rcode.REFUSED
    assert count("axfr", "busy") == busy + 3
    assert caplog.text.count("refused to 127.0.0.5, 3 transfers are under way "
                             "(--transfer-max)") == 1
    assert "refused to 2001:db8::3, it has 2 transfers under way " \
           "(--transfer-max-per-client)" in caplog.text
    next(first)
    first.close()  # the client went
    assert allowed.answer(wire, "127.0.0.5").streamed
    assert len(list(second)) == 1  # the whole zone sent: its slot is free
    assert allowed.answer(wire, "2001:db8::3").streamed
    versions = idx.publisher.versions[to_wire("svc-global")]
    req = transfer.request(wire, idx.responder.zone_by_wire)
    assert req is not None
    shared = versions.records()
    assert versions.records() is shared
    assert any(part is shared for part in transfer.axfr_records(req, versions).parts)


def test_a_transfer_asked_with_edns_has_opt_in_every_message_and_signed_it_stays_last(
        index: Index) -> None:
    """RFC 6891 §6.1.1: a request with OPT gets OPT back; BIND 9.18 puts it in every message
    of a transfer, and so does dnsside (before the TSIG, which is last: RFC 8945 §5.3)."""
    q = dns.message.make_query("svc-global.", "AXFR", use_edns=0, payload=1232)
    req = transfer.request(q.to_wire(), index.responder.zone_by_wire)
    assert req is not None and req.opt
    parts = transfer.messages(req, transfer.axfr_records(req, index.publisher.versions[req.zone.wire]),
                              limit=512)
    assert len(parts) > 5
    assert all(dns.message.from_wire(m).edns == 0 for m in parts)
    assert records(parts) == records(axfr(index, "svc-global"))
    key = make_key("xfr-key.", "hmac-sha256", KEY.secret)
    signed = Transfers(index.responder, versions=index.publisher.versions, tsig=key)
    q.use_tsig(KEY)
    replies = sent(signed, q.to_wire(), "192.0.2.7")
    ctx = None
    for wire in replies:
        msg = dns.message.from_wire(wire, keyring={KEY.name: KEY}, request_mac=q.mac,
                                    xfr=True, tsig_ctx=ctx, multi=True)
        ctx = msg.tsig_ctx
        assert msg.had_tsig and msg.edns == 0 and msg.rcode() == dns.rcode.NOERROR


def test_the_tcp_side_answers_each_edge_as_bind(index: Index) -> None:
    """EDNS version 1: BADVERS, never the zone; a name that is no apex: NOTAUTH; an IXFR
    without the client's SOA: FORMERR to a client that may transfer, REFUSED to one that
    may not (BIND 9.18's order: access first); each counted by the responder."""
    allowed = Transfers(index.responder, networks(["127.0.0.0/8"], "--allow-transfer"),
                        index.publisher.versions)
    tcp = index.responder.tcp_counts

    def one(wire: bytes, peer: str = "127.0.0.9") -> dns.message.Message:
        replies = sent(allowed, wire, peer)
        assert len(replies) == 1
        return dns.message.from_wire(replies[0])

    badvers = one(dns.message.make_query("svc-global.", "AXFR", use_edns=1).to_wire())
    assert badvers.rcode() == dns.rcode.BADVERS and badvers.edns == 0 and not badvers.answer
    for name, qtype in (("web.default.svc-global", AXFR), ("example.com", IXFR)):
        assert one(query(name, qtype)).rcode() == dns.rcode.NOTAUTH
    formerr = count("ixfr", "formerr")
    before = tcp[(IXFR, dns.rcode.FORMERR)]
    assert one(query("svc-global", IXFR)).rcode() == dns.rcode.FORMERR
    assert count("ixfr", "formerr") == formerr + 1
    assert tcp[(IXFR, dns.rcode.FORMERR)] == before + 1
    assert one(query("svc-global", IXFR), "192.0.2.7").rcode() == dns.rcode.REFUSED
    assert not allowed.under_way  # the slot of the FORMERR was given back
