"""Every row of the names table (docs/names.md) on the demo data, through a real socket, over UDP and TCP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from testkit import topology as t
from testkit.serve import Dnsside, answers, demo_server, expect_udp_io

NGINX = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]


@pytest.fixture(scope="module")
def demo(udp_io: str) -> Iterator[Dnsside]:
    with demo_server() as srv:
        yield expect_udp_io(srv, udp_io)


def srv_records(msg: dns.message.Message) -> list[tuple[int, int, int, str]]:
    return sorted(
        (rd.priority, rd.weight, rd.port, rd.target.to_text())
        for rrset in msg.answer if rrset.rdtype == dns.rdatatype.SRV for rd in rrset
    )


def glue(msg: dns.message.Message) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rrset in msg.additional:
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            out.setdefault(rrset.name.to_text(), []).extend(rd.to_text() for rd in rrset)
    return out


def negative(msg: dns.message.Message, rcode: int) -> None:
    assert msg.rcode() == rcode
    assert msg.answer == []
    assert [r.rdtype for r in msg.authority] == [dns.rdatatype.SOA]
    assert msg.authority[0].name.to_text() == "svc-global."
    assert msg.authority[0].ttl == 5


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
class TestDemoRows:
    def test_service_a_all_clusters(self, demo: Dnsside, tcp: bool) -> None:
        msg = demo.query("nginx-svc.default.svc-global", "A", tcp=tcp)
        assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
        assert answers(msg) == sorted(NGINX)
        assert msg.answer[0].ttl == 5

    def test_cluster_a(self, demo: Dnsside, tcp: bool) -> None:
        west = demo.query("west.nginx-svc.default.svc-global", "A", tcp=tcp)
        assert answers(west) == ["10.43.179.60", "10.43.218.18", "10.43.245.244"]
        east = demo.query("east.nginx-svc.default.svc-global", "A", tcp=tcp)
        assert answers(east) == ["10.42.1.10", "10.42.1.11"]
        # north has members, none ready: NXDOMAIN
        negative(demo.query("north.nginx-svc.default.svc-global", "A", tcp=tcp), dns.rcode.NXDOMAIN)

    def test_member_a(self, demo: Dnsside, tcp: bool) -> None:
        msg = demo.query("nginx-set-2.west.nginx-svc.default.svc-global", "A", tcp=tcp)
        assert answers(msg) == ["10.43.245.244"]
        not_ready = demo.query("cockroachdb-2.east.cockroachdb.db.svc-global", "A", tcp=tcp)
        negative(not_ready, dns.rcode.NXDOMAIN)

    def test_srv_port(self, demo: Dnsside, tcp: bool) -> None:
        # With EDNS: the glue of a rotating answer spells out each target's labels below
        # the service name (docs/protocol.md), which takes the 5 targets' glue past 512 B.
        msg = demo.query("_http._tcp.nginx-svc.default.svc-global", "SRV", tcp=tcp, edns=0)
        recs = srv_records(msg)
        assert len(recs) == 5
        assert {(p, w, port) for p, w, port, _ in recs} == {(0, 20, 80)}
        targets = {target for *_, target in recs}
        assert "nginx-set-0.west.nginx-svc.default.svc-global." in targets
        assert "nginx-set-1.east.nginx-svc.default.svc-global." in targets
        g = glue(msg)
        assert set(g) == targets
        assert g["nginx-set-0.west.nginx-svc.default.svc-global."] == ["10.43.179.60"]

    def test_srv_case_insensitive_port_and_proto(self, demo: Dnsside, tcp: bool) -> None:
        msg = demo.query("_HTTP._Tcp.nginx-svc.default.svc-global", "SRV", tcp=tcp)
        assert len(srv_records(msg)) == 5

    def test_srv_all_ports_and_cluster_level_targets(self, demo: Dnsside, tcp: bool) -> None:
        msg = demo.query("cockroachdb.db.svc-global", "SRV", tcp=True)
        recs = srv_records(msg)
        assert len(recs) == 10  # 5 ready members x 2 ports
        assert {w for _, w, _, _ in recs} == {10}
        assert {port for _, _, port, _ in recs} == {26257, 8080}
        web = srv_records(demo.query("_http._tcp.web.default.svc-global", "SRV", tcp=tcp))
        assert web == sorted((0, 25, 8080, f"{c}.web.default.svc-global.")
                             for c in ("east", "west", "north", "federated"))

    def test_srv_local_port_comes_from_the_slice(self, demo: Dnsside, tcp: bool) -> None:
        recs = srv_records(demo.query("_grpc._tcp.cockroachdb.db.svc-global", "SRV", tcp=tcp))
        assert {port for _, _, port, _ in recs} == {26257}  # never the gateway's 4143

    def test_apex_soa_and_ns(self, demo: Dnsside, tcp: bool) -> None:
        soa = demo.query("svc-global", "SOA", tcp=tcp)
        assert soa.answer[0].rdtype == dns.rdatatype.SOA
        assert soa.answer[0][0].minimum == 5
        ns = demo.query("svc-global", "NS", tcp=tcp)
        assert [rd.to_text() for rd in ns.answer[0]] == ["svc-global."]
        assert [(rr.name.to_text(), rd.to_text()) for rr in ns.additional for rd in rr] == [
            ("svc-global.", "127.0.0.1")], "glue: the apex's address, the --listen address"

    def test_nodata_for_empty_non_terminals_and_missing_types(self, demo: Dnsside,
                                                              tcp: bool) -> None:
        for name, rdtype in [
            ("default.svc-global", "A"),
            ("_tcp.nginx-svc.default.svc-global", "SRV"),
            ("_http._tcp.nginx-svc.default.svc-global", "A"),
            ("nginx-svc.default.svc-global", "AAAA"),
            ("nginx-set-0.west.nginx-svc.default.svc-global", "SRV"),
        ]:
            negative(demo.query(name, rdtype, tcp=tcp), dns.rcode.NOERROR)

    def test_nxdomain(self, demo: Dnsside, tcp: bool) -> None:
        for name, rdtype in [
            ("metrics.default.svc-global", "A"),
            ("nginx-svc-west.default.svc-global", "A"),  # mirrors are not names
            ("_grpc._tcp.nginx-svc.default.svc-global", "SRV"),  # no such port
            ("_http._udp.nginx-svc.default.svc-global", "SRV"),  # no such protocol
            ("nope.svc-global", "A"),
            ("a.b.nginx-set-0.west.nginx-svc.default.svc-global", "A"),
        ]:
            negative(demo.query(name, rdtype, tcp=tcp), dns.rcode.NXDOMAIN)

    def test_refused_outside_the_zone(self, demo: Dnsside, tcp: bool) -> None:
        msg = demo.query("example.com", "A", tcp=tcp)
        assert msg.rcode() == dns.rcode.REFUSED and not msg.answer

    def test_soa_serial_is_stable_without_changes(self, demo: Dnsside, tcp: bool) -> None:
        one = demo.query("svc-global", "SOA", tcp=tcp).answer[0][0].serial
        two = demo.query("default.svc-global", "A", tcp=tcp).authority[0][0].serial
        assert one == two


def test_publish_not_ready() -> None:
    with demo_server("--publish-not-ready") as srv:
        north = srv.query("north.nginx-svc.default.svc-global", "A")
        assert answers(north) == ["10.43.61.5", "10.43.61.6"]
        assert len(answers(srv.query("nginx-svc.default.svc-global"))) == 7
        member = srv.query("cockroachdb-2.east.cockroachdb.db.svc-global")
        assert answers(member) == ["10.42.2.22"]


def test_no_local_and_local_first() -> None:
    with demo_server("--no-local") as srv:
        assert answers(srv.query("nginx-svc.default.svc-global")) == NGINX[2:]
        negative(srv.query("east.nginx-svc.default.svc-global"), dns.rcode.NXDOMAIN)
    with demo_server("--srv-priority", "local-first") as srv:
        recs = srv_records(srv.query("_http._tcp.nginx-svc.default.svc-global", "SRV"))
        assert [(p, w) for p, w, _, target in recs if ".east." in target] == [(0, 50), (0, 50)]
        assert [(p, w) for p, w, _, target in recs if ".west." in target] == [(10, 33)] * 3


def test_several_zones_and_ttl() -> None:
    with demo_server("--zone", "svc-global.", "--zone", "global.example.", "--ttl", "30") as srv:
        a = srv.query("nginx-svc.default.global.example", "A")
        assert answers(a) == sorted(NGINX) and a.answer[0].ttl == 30
        srv_msg = srv.query("_http._tcp.nginx-svc.default.global.example", "SRV")
        assert all(rd.target.to_text().endswith(".global.example.")
                   for rrset in srv_msg.answer for rd in rrset)
        nx = srv.query("nope.default.global.example", "A")
        assert nx.rcode() == dns.rcode.NXDOMAIN
        assert nx.authority[0].name.to_text() == "global.example."
        assert nx.authority[0][0].minimum == 30
        assert answers(srv.query("nginx-svc.default.svc-global", "A")) == sorted(NGINX)


def test_aaaa_dual_stack_and_ipv6_listen(tmp_path: Path) -> None:
    objs = [
        *t.dual_stack_pg(),
        *t.headless_link("db", "pg", "south", {"pg-0": ["fd00:44::7"]}, [("pg", 5432)]),
    ]
    path = t.write(tmp_path / "dual.json", objs)
    with Dnsside("--source", str(path), "--cluster-name", "east", listen="[::1]:0") as srv:
        assert srv.host == "::1"
        assert answers(srv.query("pg.db.svc-global", "AAAA"), "AAAA") == [
            "fd00:42::5", "fd00:43::7", "fd00:44::7"]
        assert answers(srv.query("pg.db.svc-global", "A")) == ["10.42.0.5", "10.43.0.7"]
        south = srv.query("south.pg.db.svc-global", "A")
        negative(south, dns.rcode.NOERROR)  # exists, IPv6 only: NODATA
        msg = srv.query("_pg._tcp.pg.db.svc-global", "SRV")
        g = glue(msg)
        assert g["pg-0.west.pg.db.svc-global."] == ["10.43.0.7", "fd00:43::7"]
        assert g["pg-0.south.pg.db.svc-global."] == ["fd00:44::7"]
