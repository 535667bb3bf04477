"""unbound in front of the KEP-1645 names: a stub zone for clusterset.local (and svc-global).

The resolver is unbound with its defaults where they matter here (QNAME
minimisation on, relaxed), plus 0x20 and `harden-below-nxdomain`; root hints
point at loopback only and nothing is validated, so it never leaves 127.0.0.1.
Every name the MCS names promise must resolve through it exactly as dnsside
answers it directly.

The one name that owns no record although the specification's grammar has it,
`<clusterid>.<svc>.<ns>.svc.M`, is an empty non-terminal where pod names exist below
it: NODATA (RFC 8020), not NXDOMAIN. So even unbound in strict QNAME-minimisation
mode (`qname-minimisation-strict: yes`, `harden-below-nxdomain: yes`), used here,
walks from it down to the pod's own name
(`test_pod_names_resolve_through_the_cluster_label` checks that it does and gets the pod).
"""

from __future__ import annotations

from collections.abc import Iterator

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from testkit.resolvers import ZONE, Unbound, same_answer
from testkit.serve import Dnsside, answers, demo_server, wait_for

M = "clusterset.local"
NGINX = f"nginx-svc.default.svc.{M}"


@pytest.fixture(scope="module")
def dnsside() -> Iterator[Dnsside]:
    with demo_server("--mcs-zone", "clusterset.local.", "--query-log") as srv:
        yield srv


@pytest.fixture(scope="module")
def unbound(dnsside: Dnsside, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Unbound]:
    # Strict QNAME minimisation: see the module docstring.
    u = Unbound(tmp_path_factory.mktemp("unbound-mcs"), "127.0.0.1", dnsside.port,
                zones=(M, ZONE), strict=True)
    u.start()
    yield u
    u.stop()


def test_done_when_through_unbound(dnsside: Dnsside, unbound: Unbound) -> None:
    a = same_answer(dnsside, unbound, NGINX, "A")
    assert answers(a) == answers(unbound.query("nginx-svc.default.svc-global", "A"))
    assert len(answers(a)) == 5

    pod = same_answer(dnsside, unbound, f"nginx-set-0.west.{NGINX}", "A")
    assert answers(pod) == ["10.43.179.60"]

    srv = same_answer(dnsside, unbound, f"_http._tcp.{NGINX}", "SRV")
    targets = sorted(rd.target.to_text() for rd in srv.answer[0])
    assert len(targets) == 5 and all(t.endswith(f".{NGINX}.") for t in targets)
    for target in targets:  # each target resolves to its glue through the resolver too
        assert answers(same_answer(dnsside, unbound, target, "A"))

    txt = same_answer(dnsside, unbound, f"dns-version.{M}", "TXT")
    assert [rd.to_text() for rd in txt.answer[0]] == ['"1.0.0"']

    ent = same_answer(dnsside, unbound, f"west.{NGINX}", "A")  # pod names below it
    assert ent.rcode() == dns.rcode.NOERROR and not ent.answer
    nx = same_answer(dnsside, unbound, f"north.{NGINX}", "A")  # none ready: nothing below
    assert nx.rcode() == dns.rcode.NXDOMAIN

    nodata = same_answer(dnsside, unbound, f"default.svc.{M}", "A")
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer


@pytest.mark.parametrize(("name", "rdtype"), [
    (f"web.default.svc.{M}", "A"), (f"_http._tcp.web.default.svc.{M}", "SRV"),
    (f"cockroachdb.db.svc.{M}", "SRV"), (f"_grpc._tcp.cockroachdb.db.svc.{M}", "SRV"),
    (f"cockroachdb-1.east.cockroachdb.db.svc.{M}", "A"), (M, "SOA"), (M, "NS"),
    (f"svc.{M}", "A"), (f"_tcp.{NGINX}", "SRV"), (NGINX, "AAAA"),
    (f"metrics.default.svc.{M}", "A"), (f"east.web.default.svc.{M}", "A"),
])
def test_names_agree_through_unbound(dnsside: Dnsside, unbound: Unbound, name: str,
                                     rdtype: str) -> None:
    same_answer(dnsside, unbound, name, rdtype)


def test_pod_names_resolve_through_the_cluster_label(dnsside: Dnsside,
                                                    unbound: Unbound) -> None:
    """A cold lookup of a pod name: unbound's strict minimised walk asks
    `<clusterid>.<svc>...`, gets NODATA (an empty non-terminal), and goes on to the full
    name, which answers."""
    svc = f"cockroachdb.db.svc.{M}"
    name = f"cockroachdb-2.west.{svc}"  # asked by no other test: not in unbound's cache
    assert answers(unbound.query(name, "A")) == ["10.43.90.3"]

    def asked() -> list[str]:
        return [line.split()[6].lower() for line in list(dnsside.lines)
                if "dnsside.query:" in line]

    wait_for(lambda: name + "." in asked(), 10, f"the full query for {name}")
    assert f"west.{svc}." in asked()  # the minimised step, NODATA


def test_unbound_logged_no_errors(unbound: Unbound) -> None:
    text = unbound.log.read_text()
    for bad in ("error", "0x20", "FORMERR", "failed", "SERVFAIL"):
        assert bad not in text, text
