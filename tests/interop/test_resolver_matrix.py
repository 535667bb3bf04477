"""The resolver matrix: one question list, asked of dnsside directly and through every
resolver a cluster or a workstation puts in front of it.

unbound (stub zone, strict: QNAME minimisation strict, harden-below-nxdomain, 0x20,
`stub-prime: yes`), dnsmasq, knot-resolver (`policy.STUB`), BIND as a forwarder,
BIND `type stub` (learns the zone's NS and glue from dnsside and follows them),
BIND `type static-stub` and PowerDNS Recursor (`forward-zones`); testkit/resolvers.py
starts each from a config it writes, once for the module. Every answer through a
resolver must equal the direct one (over TCP, complete): same rcode (so NXDOMAIN
and NODATA stay apart), same answer RRsets as rdata sets.

The zone: the demo, `big.bulk` (120 addresses, too big for UDP: every resolver
must fetch it over TCP) and `pg.db`, a dual-stack service (AAAA).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
import yaml

from testkit import topology as t
from testkit.rawdns import bulk_objects
from testkit.resolvers import KINDS, Resolver, make, serve_on_port_53
from testkit.serve import DEMO, Dnsside

NGINX = "nginx-svc.default.svc-global"
ROACH = "cockroachdb.db.svc-global"
PG = "pg.db.svc-global"
BIG = "big.bulk.svc-global"

QUESTIONS = [
    ("a", NGINX, "A"),
    ("a-dual-stack", PG, "A"),
    ("aaaa", PG, "AAAA"),
    ("srv-service", NGINX, "SRV"),
    ("srv-service-774-bytes", ROACH, "SRV"),
    ("srv-port", "_http._tcp." + NGINX, "SRV"),
    ("srv-port-grpc", "_grpc._tcp." + ROACH, "SRV"),
    ("cluster", "west." + NGINX, "A"),
    ("cluster-clusterip", "west.web.default.svc-global", "A"),
    ("member", "nginx-set-2.west." + NGINX, "A"),
    ("member-aaaa", "pg-0.west." + PG, "AAAA"),
    ("soa", "svc-global", "SOA"),
    ("ns", "svc-global", "NS"),
    ("ns-address", "svc-global", "A"),
    ("ent-namespace", "default.svc-global", "A"),
    ("ent-proto", "_tcp." + NGINX, "SRV"),
    ("nodata-type", NGINX, "AAAA"),
    ("nxdomain", "nope.svc-global", "A"),
    ("nxdomain-below-nxdomain", "deep.below.nope.svc-global", "A"),
    ("nxdomain-below-member", "x.nginx-set-0.east." + NGINX, "A"),
    ("mixed-case", "NgInX-SvC.DeFaUlT.SvC-GlObAl", "A"),
    ("mixed-case-srv", "_HTTP._Tcp.NGINX-svc.default.SVC-GLOBAL", "SRV"),
    ("too-big-for-udp-a", BIG, "A"),
    ("too-big-for-udp-srv", BIG, "SRV"),
]


def zone_objects() -> list[dict[str, object]]:
    items: list[dict[str, object]] = yaml.safe_load(DEMO.read_text())["items"]
    items += bulk_objects("big", "bulk", 120, 99)
    items += t.dual_stack_pg()
    return items


@pytest.fixture(scope="module")
def dnsside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsside]:
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": zone_objects()}))
    with serve_on_port_53("--source", str(path), "--cluster-name", "east") as s:
        yield s


@pytest.fixture(scope="module", params=KINDS)
def resolver(request: pytest.FixtureRequest, dnsside: Dnsside,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Resolver]:
    r = make(request.param, tmp_path_factory.mktemp(request.param), dnsside.host)
    r.start()
    yield r
    r.stop()


_direct: dict[tuple[str, str], dns.message.Message] = {}


def direct(dnsside: Dnsside, name: str, rdtype: str) -> dns.message.Message:
    """dnsside's own complete answer (TCP), asked once per question."""
    key = (name.lower(), rdtype)
    if key not in _direct:
        _direct[key] = dnsside.query(name.lower(), rdtype, tcp=True)
    return _direct[key]


def outcome(msg: dns.message.Message) -> tuple[str, str, set[tuple[str, str]]]:
    """(rcode, kind of answer, answer rdata set): what the matrix compares."""
    rrs = {(dns.rdatatype.to_text(rrset.rdtype), rd.to_text().lower())
           for rrset in msg.answer for rd in rrset}
    rcode = dns.rcode.to_text(msg.rcode())
    kind = "data" if rrs else ("NODATA" if msg.rcode() == dns.rcode.NOERROR else rcode)
    return rcode, kind, rrs


@pytest.mark.parametrize(("name", "rdtype"), [(n, r) for _, n, r in QUESTIONS],
                         ids=[i for i, _, _ in QUESTIONS])
def test_matrix(dnsside: Dnsside, resolver: Resolver, name: str, rdtype: str) -> None:
    want = outcome(direct(dnsside, name, rdtype))
    try:
        via = resolver.query(name, rdtype, timeout=10.0)
    except dns.exception.Timeout:
        raise AssertionError(f"{resolver.kind}: no answer\n{resolver.log_text()[-3000:]}") from None
    assert via.flags & dns.flags.RA, f"{resolver.kind} answered as a resolver"
    got = outcome(via)
    assert got[:2] == want[:2], (
        f"{resolver.kind}: {name} {rdtype}: {got[:2]} != {want[:2]}\n"
        f"{resolver.log_text()[-3000:]}")
    assert got[2] == want[2], (
        f"{resolver.kind}: {name} {rdtype}: missing {sorted(want[2] - got[2])[:5]}, "
        f"extra {sorted(got[2] - want[2])[:5]}")


def test_the_matrix_asks_what_it_says(dnsside: Dnsside) -> None:
    """The question list covers what it claims: the big answers do not fit UDP, the
    negative ones are what their names say, the NS target has an address."""
    for rdtype, count in (("A", 120), ("SRV", 120)):
        udp = dnsside.query(BIG, rdtype, edns=0, payload=1232)
        assert udp.flags & dns.flags.TC
        assert len(outcome(direct(dnsside, BIG, rdtype))[2]) == count
    kinds = {i: outcome(direct(dnsside, n, r))[1] for i, n, r in QUESTIONS}
    assert {i for i, k in kinds.items() if k == "NODATA"} == {
        "ent-namespace", "ent-proto", "nodata-type"}
    assert {i for i, k in kinds.items() if k == "NXDOMAIN"} == {
        "nxdomain", "nxdomain-below-nxdomain", "nxdomain-below-member"}
    assert outcome(direct(dnsside, "svc-global", "A"))[2] == {("A", dnsside.host)}
    assert outcome(direct(dnsside, "svc-global", "NS"))[2] == {("NS", "svc-global.")}


@pytest.mark.parametrize("resolver", ["bind-stub"], indirect=True)
def test_bind_stub_learned_the_ns_and_its_glue(dnsside: Dnsside, resolver: Resolver) -> None:
    """BIND `type stub` stores what it learned from dnsside: the NS and its address."""
    stub = subprocess.run(
        ["named-compilezone", "-f", "text", "-F", "text", "-o", "-", "svc-global",
         str(resolver.tmp / "stub.db")], capture_output=True, text=True, timeout=30)
    assert stub.returncode == 0, stub.stdout + stub.stderr
    records = {tuple(line.split()[2:]) for line in stub.stdout.splitlines()}
    assert ("IN", "NS", "svc-global.") in records and ("IN", "A", dnsside.host) in records
    for bad in ("loop detected", "has no address records", "lame"):
        assert bad not in resolver.log_text()


def test_resolver_sockets_stay_on_loopback(resolver: Resolver) -> None:
    """Every socket the resolver holds now, after the whole list, is bound to and
    connected to loopback only (the network rule; a snapshot, see docs/protocol.md
    for the tcpdump check)."""
    assert resolver.proc is not None
    out = subprocess.run(["ss", "-tunapH"], capture_output=True, text=True, timeout=30).stdout
    mine = [line for line in out.splitlines() if f"pid={resolver.proc.pid}," in line]
    assert mine, out
    for line in mine:
        local, peer = line.split()[4:6]
        for address in (local, peer):
            host = re.sub(r"%\S+$", "", address.rsplit(":", 1)[0].strip("[]"))
            assert host in ("*", "0.0.0.0", "::") or host.startswith(("127.", "::ffff:127.")) \
                or host == "::1", f"{resolver.kind}: {line}"
