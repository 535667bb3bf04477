"""ANY (RFC 8482): one real RRset where the name owns one, the HINFO placeholder only where
it owns nothing else to give.

The rule, checked on every kind of name: ANY answers exactly what a query for the first
of A, AAAA, SRV the name owns gets (same bytes after the question, same flags, same UDP
size rules); a name owning none of those but some RRset (the apex: SOA, NS) gets the
synthesised HINFO; an empty non-terminal is NODATA; a missing name NXDOMAIN. Java's JNDI
asks for "A AAAA" with one ANY query, so this is what gives it addresses.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator

import dns.flags
import dns.rcode
import dns.rdatatype
import pytest
import yaml

from dnsside.dns.responder import Responder
from dnsside.dns.wire import Answer, to_wire
from dnsside.dns.zone import Zone, ZoneOptions
from testkit import topology as t
from testkit.inprocess import ask
from testkit.rawdns import (
    AAAA,
    ANY,
    HINFO,
    NS,
    SRV,
    A,
    opt_rr,
    parse,
    query,
    same_but_turn,
)
from testkit.serve import DEMO, Dnsside, answers, wait_for

V6 = "v6only.apps.svc-global"
DUAL = "dual.apps.svc-global"
NGINX = "nginx-svc.default.svc-global"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsside]:
    """The demo plus an IPv6-only service (AAAA, no A) and a dual-stack one."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += t.headless_link("apps", "v6only", "west",
                                     {"v6-0": ["fd00::10"], "v6-1": ["fd00::11"]}, [("http", 80)])
    demo["items"] += t.headless_link("apps", "dual", "north",
                                     {"d-0": ["10.1.0.1", "fd00::21"]}, [("http", 80)])
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    with Dnsside("--source", str(path), "--cluster-name", "east") as s:
        yield s


NAMES = [
    # service, cluster and member names: A
    NGINX, "west.nginx-svc.default.svc-global", "nginx-set-0.east.nginx-svc.default.svc-global",
    "cockroachdb.db.svc-global",
    # IPv6 only: AAAA; dual stack: A first
    V6, "west." + V6, "v6-1.west." + V6, DUAL, "d-0.north." + DUAL,
    # SRV names (glue in additional, pointing into the question)
    "_http._tcp." + NGINX, "_grpc._tcp.cockroachdb.db.svc-global", "_http._tcp." + V6,
    # the apex: SOA and NS (HINFO unless it owns addresses)
    "svc-global",
]


def expected_type(srv: Dnsside, name: str) -> int | None:
    """The first of A, AAAA, SRV that ``name`` owns (asked over TCP: never truncated)."""
    for rtype in (A, AAAA, SRV):
        if parse(ask(srv, query(name, rtype), "tcp")).answer:
            return rtype
    return None


@pytest.mark.parametrize("transport", ["udp", "tcp"])
@pytest.mark.parametrize("edns", [False, True], ids=["plain", "edns"])
@pytest.mark.parametrize("name", NAMES)
def test_any_is_the_first_owned_rrset_or_hinfo(
    srv: Dnsside, name: str, transport: str, edns: bool
) -> None:
    opt = opt_rr() if edns else None
    any_wire = query(name, ANY, edns=opt)
    reply = ask(srv, any_wire, transport)
    msg = parse(reply)
    assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
    rtype = expected_type(srv, name)
    if rtype is None:
        assert [rrset.rdtype for rrset in msg.answer] == [HINFO]
        assert msg.answer[0][0].cpu == b"RFC8482" and len(reply) < 100
        return
    same = ask(srv, query(name, rtype, edns=opt), transport)
    qend = len(any_wire) - (len(opt) if opt else 0)  # end of the question
    # Same header (flags, counts: the UDP size rules apply alike), same body but for the
    # record it starts at (--round-robin: the RRset's next turn); only the question's
    # type differs.
    assert same_but_turn(reply[: qend - 4] + same[qend - 4 : qend] + reply[qend:], same)
    assert reply[12 : qend - 4] == same[12 : qend - 4]
    assert struct.unpack("!H", reply[qend - 4 : qend - 2]) == (ANY,)
    assert {rrset.rdtype for rrset in msg.answer} <= {rtype}
    if not msg.flags & dns.flags.TC:
        assert msg.answer, "a real RRset, not a placeholder"


def test_any_picks_aaaa_then_srv(srv: Dnsside) -> None:
    """What each kind of name answers, spelled out (the generic test above derives it)."""
    v6 = srv.query(V6, "ANY", tcp=True)
    assert [r.rdtype for r in v6.answer] == [dns.rdatatype.AAAA]
    assert answers(v6, "AAAA") == ["fd00::10", "fd00::11"]
    dual = srv.query(DUAL, "ANY")
    assert [r.rdtype for r in dual.answer] == [dns.rdatatype.A]
    assert answers(dual) == ["10.1.0.1"]
    srv_any = srv.query("_http._tcp." + NGINX, "ANY", tcp=True)
    assert [r.rdtype for r in srv_any.answer] == [dns.rdatatype.SRV]
    assert sorted((rd.port, rd.target.to_text()) for rd in srv_any.answer[0]) == sorted(
        (80, f"{h}.{c}.{NGINX}.") for h, c in [("nginx-set-0", "east"), ("nginx-set-1", "east"),
                                              ("nginx-set-0", "west"), ("nginx-set-1", "west"),
                                              ("nginx-set-2", "west")])
    glue = {r.name.to_text(): [rd.to_text() for rd in r] for r in srv_any.additional}
    assert glue[f"nginx-set-0.west.{NGINX}."] == ["10.43.179.60"]


def test_any_never_amplifies_past_the_udp_limit(srv: Dnsside) -> None:
    """The bodies ANY borrows obey the same 512 / EDNS limits: the SRV with glue of
    cockroachdb (10 records) loses its glue, then truncates, as its SRV answer does."""
    for payload in (None, 512, 1232, 4096):
        wire = query("cockroachdb.db.svc-global", ANY,
                     edns=None if payload is None else opt_rr(payload))
        reply = ask(srv, wire, "udp")
        assert len(reply) <= min(max(payload or 512, 512), 1232)


def test_any_is_counted_as_any(srv: Dnsside) -> None:
    """The borrowed answer carries the A/SRV stat key; the query is still counted as ANY."""
    def count(qtype: str) -> float:
        text = srv.http("/metrics")[1]
        for line in text.splitlines():
            m = re.match(r'dnsside_queries_total\{(.*)\} (\S+)$', line)
            if m and sorted(m.group(1).split(",")) == sorted(
                    [f'qtype="{qtype}"', 'rcode="NOERROR"', 'transport="udp"']):
                return float(m.group(2))
        return 0.0

    any_before, a_before = count("ANY"), count("A")
    for _ in range(3):
        srv.query(NGINX, "ANY")
    wait_for(lambda: count("ANY") == any_before + 3, what="ANY counted")
    assert count("A") == a_before


def test_hinfo_where_a_name_owns_only_other_types() -> None:
    """Pure: a name owning only an NS RRset (no A, AAAA, SRV) gets the HINFO placeholder,
    shared across queries (nothing built per query)."""
    zone = Zone("svc-global.", ZoneOptions(ttl=7))
    responder = Responder([zone])
    responder.ready = True
    name = to_wire("only-ns.svc-global.")
    responder.answers[name + struct.pack("!HH", NS, 1)] = Answer(0, NS, ())
    responder.names[name] = zone
    replies = [responder.respond(query("only-ns.svc-global", ANY, qid=i)) for i in (1, 2)]
    assert replies[0] is not None and replies[1] is not None
    msg = parse(replies[0])
    assert [r.rdtype for r in msg.answer] == [HINFO] and msg.answer[0].ttl == 7
    assert replies[0][2:] == replies[1][2:]
    assert responder.udp_counts[(ANY, 0)] == 2
