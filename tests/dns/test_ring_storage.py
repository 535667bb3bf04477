"""The three ways a rotating answer keeps its starts (dnsside.dns.wire.Ring: every start
pre-encoded, its records kept twice, slices of the body) give the same replies:
n successive whole answers are the n turns of the records, in order, with the glue whole;
and a truncated page (worked out once a room) is the longest run of whole records from its
start that fits, wrapping around, for records of one size and of several.

In-process, with the fast path's size rules (`Responder.respond`)."""

from __future__ import annotations

import functools
import json

import dns.flags
import dns.message
import dns.rdatatype
import pytest
import yaml

from dnsside.dns.responder import Responder
from dnsside.dns.wire import Ring, to_wire
from testkit.inprocess import ask, file_responder
from testkit.rawdns import SRV, A, bulk_objects, opt_rr, query
from testkit.serve import DEMO

# Quick tier: the tests marked below; the exhaustive ones run in the full suite (the
# quick tier must stay under a minute).

# members -> how the A answer keeps its starts (the SRV answers are bigger: see the test)
SIZES = {"three": 3, "twenty": 20, "sixty": 60, "many": 150}


@pytest.fixture(scope="module")
def responder(tmp_path_factory: pytest.TempPathFactory) -> Responder:
    demo = yaml.safe_load(DEMO.read_text())
    for i, (name, count) in enumerate(SIZES.items()):
        demo["items"] += bulk_objects(name, "bulk", count, 50 + i)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    return file_responder(path)


@functools.cache  # the second n turns are the first n byte for byte: each parsed once
def section(reply: bytes, which: str) -> list[str]:
    msg = dns.message.from_wire(reply, one_rr_per_rrset=True)
    return [f"{r.name} {dns.rdatatype.to_text(r.rdtype)} {r[0].to_text()}"
            for r in getattr(msg, which)]


def ring_of(responder: Responder, name: str, qtype: int) -> Ring:
    answer = responder.answers[to_wire(name) + qtype.to_bytes(2, "big") + b"\x00\x01"]
    assert isinstance(answer, Ring)
    return answer


def storage(ring: Ring) -> str:
    return "spin" if ring.spin is not None else "twice" if ring.twice is not None else "slices"


def test_every_storage_gives_every_turn_in_order(responder: Responder) -> None:
    seen = set()
    for name in SIZES:
        for qtype, qname in ((A, f"{name}.bulk.svc-global"),
                             (SRV, f"_http._tcp.{name}.bulk.svc-global")):
            ring = ring_of(responder, qname, qtype)
            seen.add(storage(ring))
            replies = [ask(responder, query(qname, qtype, edns=opt_rr()), "tcp")
                       for _ in range(2 * ring.n)]
            first = section(replies[0], "answer")
            assert len(first) == ring.n
            turns = [first[k:] + first[:k] for k in range(ring.n)]
            assert [section(r, "answer") for r in replies] == turns + turns, (qname, storage(ring))
            assert len({tuple(section(r, "additional")) for r in replies}) == 1, qname
    assert seen == {"spin", "twice", "slices"}  # each way is asked above


@pytest.mark.quick
@pytest.mark.parametrize("qtype", [A, SRV])
@pytest.mark.parametrize("edns", [None, opt_rr()], ids=["512", "1232"])
def test_a_page_is_the_longest_run_that_fits(responder: Responder, qtype: int,
                                            edns: bytes | None) -> None:
    """150 members: every page a run of the whole order from some start (wrapping), as long
    as fits the limit: one record more would not. SRV records differ in length (the
    targets' hostnames do), A records do not."""
    name = "many.bulk.svc-global" if qtype == A else "_http._tcp.many.bulk.svc-global"
    whole = section(ask(responder, query(name, qtype), "tcp"), "answer")
    size = {rr: len(r) for rr, r in zip(whole, wire_records(responder, name, qtype),
                                        strict=True)}
    limit = 512 if edns is None else 1232
    for _ in range(3 * len(whole)):
        reply = ask(responder, query(name, qtype, edns=edns), "udp")
        assert dns.message.from_wire(reply).flags & dns.flags.TC and len(reply) <= limit
        page = section(reply, "answer")
        start = whole.index(page[0])
        run = whole[start:] + whole[:start]
        assert page == run[: len(page)]
        assert len(reply) + size[run[len(page)]] > limit, (len(reply), page[-1])


def wire_records(responder: Responder, name: str, qtype: int) -> list[bytes]:
    """The answer's records as bytes, in the order of its body (the first turn)."""
    ring = ring_of(responder, name, qtype)
    return [ring.body[ring.bounds[k] : ring.bounds[k + 1]] for k in range(ring.n)]


@pytest.mark.quick
def test_every_start_of_a_spin_is_the_turn_of_the_body(responder: Responder) -> None:
    """The first start is the body itself (no copy), the others its turns."""
    ring = ring_of(responder, "three.bulk.svc-global", A)
    assert ring.spin is not None
    starts = list(ring.spin)
    records = wire_records(responder, "three.bulk.svc-global", A)
    assert starts[0] is ring.body
    assert starts == [b"".join(records[k:] + records[:k]) for k in range(ring.n)]
