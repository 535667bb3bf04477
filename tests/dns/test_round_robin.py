"""--round-robin (docs/protocol.md, "Answer order"): every A, AAAA and SRV answer of several
records starts one record further on than the one before, in both naming schemes, over
UDP (one by one and in recvmmsg batches) and TCP; a truncated one carries the next page
of the records, so a client without EDNS sees them all in a few queries; the glue of a
rotated SRV answer still names its targets; ``off`` is one order; a transfer is one order.

Asked in-process (the fast tier) and through a real ``dnsside serve`` with UDP moved in
batches and one by one."""

from __future__ import annotations

import functools
import json
import os
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.rdatatype
import pytest
import yaml

from dnsside.core.index import Index
from dnsside.dns import transfer
from testkit import topology as t
from testkit.inprocess import Server, ask, file_index, file_responder
from testkit.rawdns import AAAA, ANY, AXFR, SRV, A, bulk_objects, opt_rr, query
from testkit.serve import DEMO, Dnsside, expect_udp_io

MCS = "clusterset.local."
NGINX = "nginx-svc.default.svc-global"
BIG = "big.bulk.svc-global"  # 123 addresses: truncated without EDNS, and at 1232 B
CASES = [
    pytest.param(NGINX, A, id="A-service"),
    pytest.param("west.nginx-svc.default.svc-global", A, id="A-cluster"),
    pytest.param("v6.apps.svc-global", AAAA, id="AAAA"),
    pytest.param("_http._tcp." + NGINX, SRV, id="SRV-port"),
    pytest.param("cockroachdb.db.svc-global", SRV, id="SRV-service"),
    pytest.param("nginx-svc.default.svc.clusterset.local", A, id="MCS-A"),
    pytest.param("_http._tcp.nginx-svc.default.svc.clusterset.local", SRV, id="MCS-SRV"),
    pytest.param(NGINX, ANY, id="ANY"),  # the A RRset, in its turn
]


def zone_file(directory: Path) -> Path:
    """The demo, an IPv6-only service with three pods and `big.bulk` (123 addresses)."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += t.headless_link("apps", "v6", "west", {f"v6-{i}": [f"fd00::1{i}"]
                                                             for i in range(3)}, [("http", 80)])
    demo["items"] += bulk_objects("big", "bulk", 123, 99)
    path = directory / "zone.json"
    path.write_text(json.dumps(demo))
    return path


# Not in the quick tier: the same fixture starts dnsside for "batch" and "plain" (the quick
# tier's guard reads a fixture as a whole); the quick tests below are in-process only.
@pytest.fixture(scope="module", params=["in-process", "batch", "plain"])
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = zone_file(tmp_path_factory.mktemp("zone"))
    if request.param == "in-process":
        yield file_responder(path, mcs_zones=[MCS])
        return
    env = {**os.environ, "DNSSIDE_UDP_IO": request.param}
    with Dnsside("--source", str(path), "--cluster-name", "east", "--mcs-zone", MCS,
                 env=env) as s:
        yield expect_udp_io(s, request.param)


@functools.cache  # 1,200 replies a case, but only N of them differ: each parsed once
def records(reply: bytes) -> list[str]:
    """The answer section's records in the order sent: (type, rdata) as text."""
    msg = dns.message.from_wire(reply, one_rr_per_rrset=True)
    return [f"{dns.rdatatype.to_text(r.rdtype)} {r[0].to_text()}" for r in msg.answer]


def glue(reply: bytes) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rrset in dns.message.from_wire(reply).additional:
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            out.setdefault(rrset.name.to_text().lower(), []).extend(sorted(
                rd.to_text() for rd in rrset))
    return out


def turns(order: list[str]) -> list[list[str]]:
    return [order[k:] + order[:k] for k in range(len(order))]


@pytest.mark.parametrize(("name", "qtype"), CASES)
def test_each_record_comes_first_equally_often(server: Server, name: str, qtype: int) -> None:
    """1,000 UDP and 200 TCP answers: each of the N records first in 0.5/N to 1.5/N of them
    (exactly 1/N here: nobody else asks), each answer a turn of one order."""
    one_order: list[str] | None = None
    for transport, count in (("udp", 1000), ("tcp", 200)):
        firsts: Counter[str] = Counter()
        for _ in range(count):
            got = records(ask(server, query(name, qtype, edns=opt_rr()), transport))
            if one_order is None:
                one_order = got
            assert got in turns(one_order), "every answer is the same records, turned"
            firsts[got[0]] += 1
        n = len(one_order)
        assert n > 1 and set(firsts) == set(one_order), (transport, firsts)
        assert all(0.5 * count / n <= c <= 1.5 * count / n for c in firsts.values()), firsts


@pytest.mark.parametrize("name", ["_http._tcp." + NGINX, "cockroachdb.db.svc-global",
                                  "_http._tcp.nginx-svc.default.svc.clusterset.local"])
def test_the_glue_of_every_turn_names_its_targets(server: Server, name: str) -> None:
    """The glue's owners point at the question, not into SRV records a turn moves: in every
    turn each target's glue is that target's own addresses."""
    for _ in range(10):
        reply = ask(server, query(name, SRV, edns=opt_rr()), "udp")
        msg = dns.message.from_wire(reply)
        targets = {rd.target.to_text().lower() for rrset in msg.answer for rd in rrset}
        got = glue(reply)
        assert got and set(got) == targets
        for target, addresses in got.items():
            own = records(ask(server, query(target, A, edns=opt_rr()), "tcp"))
            assert addresses == sorted(r.split()[1] for r in own), target


@pytest.mark.quick
def test_names_asked_in_turn_each_get_every_start() -> None:
    """Two names of two records asked alternately: a counter shared by all names would give
    each of them one start only; each name's own turn gives both."""
    responder = file_responder(DEMO)
    names = ["east.nginx-svc.default.svc-global", "east.cockroachdb.db.svc-global"]
    firsts: dict[str, Counter[str]] = {n: Counter() for n in names}
    for _ in range(200):
        for n in names:
            firsts[n][records(ask(responder, query(n, A), "udp"))[0]] += 1
    assert all(sorted(c.values()) == [100, 100] for c in firsts.values()), firsts


@pytest.mark.parametrize(("edns", "limit", "within"), [(None, 512, 5), (opt_rr(), 1232, 2)])
def test_truncated_answers_page_through_every_record(server: Server, edns: bytes | None,
                                                     limit: int, within: int) -> None:
    """123 addresses: without EDNS (musl, busybox) 5 successive replies carry all of them,
    with 1232 B 2 do; each whole records, TC set, within the limit; over 60 replies every
    address comes first about equally often."""
    everything = set(records(ask(server, query(BIG, A), "tcp")))
    assert len(everything) == 123
    seen: set[str] = set()
    for _ in range(within):
        reply = ask(server, query(BIG, A, edns=edns), "udp")
        assert len(reply) <= limit and dns.message.from_wire(reply).flags & dns.flags.TC
        got = records(reply)
        assert got and set(got) <= everything
        seen |= set(got)
    assert seen == everything
    firsts: Counter[str] = Counter()
    for _ in range(123):
        firsts[records(ask(server, query(BIG, A, edns=edns), "udp"))[0]] += 1
    assert len(firsts) >= 100 and max(firsts.values()) <= 3, firsts


def test_truncated_srv_answers_cover_every_target(server: Server) -> None:
    """SRV records differ in length (the targets' names do): pages still cover them."""
    everything = set(records(ask(server, query(BIG, SRV), "tcp")))
    seen: set[str] = set()
    for _ in range(60):
        reply = ask(server, query(BIG, SRV), "udp")
        assert len(reply) <= 512 and dns.message.from_wire(reply).flags & dns.flags.TC
        seen |= set(records(reply))
    assert len(everything) == 123 and seen == everything


def test_the_batched_udp_path_turns_too(server: Server) -> None:
    """A burst of 200 datagrams (recvmmsg hands them over in batches, --udp-io batch): each
    of the five addresses first in about a fifth of the replies. In-process, the same 200
    calls."""
    wire = query(NGINX, A, edns=opt_rr())
    replies: list[bytes] = []
    if isinstance(server, Dnsside):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            sock.settimeout(3.0)
            for _ in range(200):
                sock.sendto(wire, (server.host, server.port))
            replies = [sock.recv(2048) for _ in range(200)]
    else:
        replies = [ask(server, wire, "udp") for _ in range(200)]
    firsts = Counter(records(reply)[0] for reply in replies)
    assert len(firsts) == 5 and all(20 <= c <= 60 for c in firsts.values()), firsts


@pytest.mark.quick
def test_off_is_one_order_and_todays_glue(tmp_path: Path) -> None:
    """--round-robin off: every answer the same bytes, the glue pointing into the SRV
    records as before (shorter: the five targets' glue fits 512 B)."""
    responder = file_responder(zone_file(tmp_path), mcs_zones=[MCS], round_robin="off")
    for name, qtype in [(NGINX, A), ("v6.apps.svc-global", AAAA), ("_http._tcp." + NGINX, SRV),
                        ("nginx-svc.default.svc.clusterset.local", A), (BIG, A)]:
        for transport in ("udp", "tcp"):
            wire = query(name, qtype)
            assert len({ask(responder, wire, transport) for _ in range(20)}) == 1, name
    plain = ask(responder, query("_http._tcp." + NGINX, SRV), "udp")
    assert len(glue(plain)) == 5 and len(plain) <= 512
    assert not any(responder.answers[k].rotates for k in responder.answers)


def test_the_flag_and_its_variable_reach_the_server(tmp_path: Path) -> None:
    """`DNSSIDE_ROUND_ROBIN=off` on a served zone: one order; `--round-robin on`: turns."""
    path = zone_file(tmp_path)
    with Dnsside("--source", str(path), "--cluster-name", "east",
                 env={**os.environ, "DNSSIDE_ROUND_ROBIN": "off"}) as off:
        assert len({tuple(records(ask(off, query(NGINX), "udp"))) for _ in range(10)}) == 1
    with Dnsside("--source", str(path), "--cluster-name", "east", "--round-robin", "on") as on:
        assert len({tuple(records(ask(on, query(NGINX), "udp"))) for _ in range(10)}) == 5


@pytest.mark.quick
def test_a_transfer_is_one_order_whatever_was_asked(tmp_path: Path) -> None:
    """The transfer sends the zone's records, not answers: the same order before and after
    the names were asked (their answers turned), each record once."""
    index = file_index(zone_file(tmp_path), mcs_zones=[MCS], allow_transfer=["127.0.0.0/8"])
    index.publisher.cut(1000)
    before = axfr_records(index)
    for name, qtype in [(NGINX, A), ("_http._tcp." + NGINX, SRV), (BIG, A),
                        ("nginx-svc.default.svc.clusterset.local", A)]:
        for _ in range(3):
            ask(index.responder, query(name, qtype), "tcp")
    after = axfr_records(index)
    assert after == before and len(set(after)) == len(after) > 300


def axfr_records(index: Index) -> list[str]:
    req = transfer.request(query("svc-global", AXFR), index.responder.zone_by_wire)
    assert req is not None
    messages = transfer.messages(req, transfer.axfr_records(req, index.publisher.versions[req.zone.wire]),
                                 65535)
    return [f"{r.name} {r.to_text()}" for m in messages
            for r in dns.message.from_wire(m, one_rr_per_rrset=True).answer][1:-1]  # no SOAs
