"""unbound in front of dnsside: the CoreDNS forward-stub-zone path with a real resolver.

The test writes an unbound.conf with a stub zone for svc-global pointing at
dnsside, QNAME minimisation on (so unbound walks through the empty
non-terminals, where an NXDOMAIN would break resolution: RFC 8020),
`harden-below-nxdomain` and 0x20 (`use-caps-for-id`, so unbound checks that the
question comes back as sent), and runs it on a free port. Answers through
unbound must equal the direct ones. Upstream once over UDP (with truncation and
the retry over TCP for a large answer) and once with `tcp-upstream: yes`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
import yaml

from testkit.rawdns import bulk_objects
from testkit.resolvers import Unbound, same_answer
from testkit.serve import DEMO, Dnsside, answers, expect_udp_io, wait_for

NGINX = "nginx-svc.default.svc-global"


@pytest.fixture(scope="module")
def dnsside(tmp_path_factory: pytest.TempPathFactory, udp_io: str) -> Iterator[Dnsside]:
    """The demo plus `big.bulk` (120 addresses: truncated over UDP, so unbound retries on TCP)."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    with Dnsside("--source", str(path), "--cluster-name", "east", "--query-log") as s:
        yield expect_udp_io(s, udp_io)


@pytest.fixture(scope="module", params=["udp", "tcp-upstream"])
def unbound(request: pytest.FixtureRequest, dnsside: Dnsside,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Unbound]:
    u = Unbound(tmp_path_factory.mktemp("unbound"), "127.0.0.1", dnsside.port,
                tcp_upstream=request.param == "tcp-upstream")
    u.start()
    yield u
    u.stop()


DEMO_NAMES = [
    (NGINX, "A"),
    (NGINX, "SRV"),
    ("_http._tcp.nginx-svc.default.svc-global", "SRV"),
    ("east.nginx-svc.default.svc-global", "A"),
    ("nginx-set-2.west.nginx-svc.default.svc-global", "A"),
    ("cockroachdb.db.svc-global", "A"),
    ("cockroachdb.db.svc-global", "SRV"),  # 774 bytes: needs EDNS, which unbound sends
    ("_grpc._tcp.cockroachdb.db.svc-global", "SRV"),
    ("cockroachdb-1.west.cockroachdb.db.svc-global", "A"),
    ("web.default.svc-global", "A"),
    ("svc-global", "SOA"),
    ("svc-global", "NS"),
]


@pytest.mark.parametrize(("name", "rdtype"), DEMO_NAMES)
def test_demo_names_resolve_through_unbound(
    dnsside: Dnsside, unbound: Unbound, name: str, rdtype: str
) -> None:
    via = same_answer(dnsside, unbound, name, rdtype)
    assert via.rcode() == dns.rcode.NOERROR and via.answer


def test_large_answer_truncated_then_retried_over_tcp(dnsside: Dnsside, unbound: Unbound) -> None:
    direct_udp = dnsside.query("big.bulk.svc-global", "A", edns=0, payload=1232)
    if not unbound.tcp_upstream:
        assert direct_udp.flags & dns.flags.TC  # over 1232 bytes: unbound must use TCP
    via = same_answer(dnsside, unbound, "big.bulk.svc-global", "A")
    assert len(answers(via)) == 120
    assert len(answers(same_answer(dnsside, unbound, "big.bulk.svc-global", "SRV"), "SRV")) == 120


@pytest.mark.parametrize(
    ("name", "rdtype"),
    [("nope.svc-global", "A"), ("metrics.default.svc-global", "A"),
     ("_grpc._tcp.nginx-svc.default.svc-global", "SRV"),
     ("x.nginx-set-0.east.nginx-svc.default.svc-global", "A"),
     ("deep.below.nope.svc-global", "AAAA")],
)
def test_nxdomain_propagates(dnsside: Dnsside, unbound: Unbound, name: str, rdtype: str) -> None:
    via = same_answer(dnsside, unbound, name, rdtype)
    assert via.rcode() == dns.rcode.NXDOMAIN


@pytest.mark.parametrize(
    ("name", "rdtype"),
    [("default.svc-global", "A"), ("db.svc-global", "A"),
     ("_tcp.nginx-svc.default.svc-global", "SRV"), (NGINX, "AAAA"), (NGINX, "TXT")],
)
def test_nodata_propagates(dnsside: Dnsside, unbound: Unbound, name: str, rdtype: str) -> None:
    via = same_answer(dnsside, unbound, name, rdtype)
    assert via.rcode() == dns.rcode.NOERROR and not via.answer


@pytest.mark.parametrize(
    ("ent", "below"),
    [
        (("default.svc-global", "A"), (NGINX, "A")),
        (("db.svc-global", "SRV"), ("cockroachdb-0.east.cockroachdb.db.svc-global", "A")),
        (("_tcp.nginx-svc.default.svc-global", "A"),
         ("_http._tcp.nginx-svc.default.svc-global", "SRV")),
        (("_tcp.cockroachdb.db.svc-global", "SRV"),
         ("_grpc._tcp.cockroachdb.db.svc-global", "SRV")),
    ],
)
def test_names_below_an_empty_non_terminal_resolve_after_it_was_asked(
    dnsside: Dnsside, unbound: Unbound, ent: tuple[str, str], below: tuple[str, str]
) -> None:
    """The cached NODATA for the ENT must not prune what lies below it (RFC 8020)."""
    assert unbound.query(*ent).rcode() == dns.rcode.NOERROR
    via = same_answer(dnsside, unbound, *below)
    assert via.rcode() == dns.rcode.NOERROR and via.answer


def test_mixed_case_through_unbound(dnsside: Dnsside, unbound: Unbound) -> None:
    via = unbound.query("NgInX-SvC.DeFaUlT.SvC-GlObAl", "A")
    assert via.rcode() == dns.rcode.NOERROR
    assert answers(via) == answers(dnsside.query(NGINX, "A"))


def test_unbound_logged_no_errors(unbound: Unbound) -> None:
    """No 0x20 mismatch, no FORMERR, no failed lookups towards dnsside."""
    text = unbound.log.read_text()
    for bad in ("error", "0x20", "FORMERR", "failed", "SERVFAIL"):
        assert bad not in text, text


def test_unbound_walks_the_empty_non_terminals_in_mixed_case(
    dnsside: Dnsside, unbound: Unbound
) -> None:
    """dnsside's query log shows the minimised queries (one label at a time, RFC 9156) and
    the random case of each (0x20), which unbound accepted since the answers came back."""
    name = "_grpc._tcp.cockroachdb.db.svc-global"
    assert unbound.query(name, "SRV").answer

    def asked() -> set[str]:
        return {line.split()[6].lower() for line in list(dnsside.lines)
                if "dnsside.query: udp" in line or "dnsside.query: tcp" in line}

    walk = {"db.svc-global.", "cockroachdb.db.svc-global.", "_tcp.cockroachdb.db.svc-global.",
            name + "."}
    wait_for(lambda: walk <= asked(), 10, f"minimised queries for {sorted(walk)}")
    names = [line.split()[6] for line in list(dnsside.lines) if "dnsside.query:" in line]
    assert any(n != n.lower() and n != n.upper() for n in names), "unbound sent 0x20 case"
