"""The Multi-Cluster Services names (KEP-1645 `specification.md`) through real sockets.

Each test names the section of the specification it checks. The demo is served
with `--mcs-zone clusterset.local.` beside the default `svc-global.` zone; a
small topology of our own adds what the demo lacks (a headless service with a
cluster-level member, dual stack, an unnamed port, a ClusterIP service with no
federated Service, a headless service with no ready member). The issue's
"Done when" list is checked once more with dig, as an operator would.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from testkit import topology as t
from testkit.serve import Dnsside, answers, demo_server, run_cli

M = "clusterset.local"
NGINX_MCS = f"nginx-svc.default.svc.{M}"
NGINX_A = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]
NGINX_PODS = ["nginx-set-0.east", "nginx-set-1.east", "nginx-set-0.west", "nginx-set-1.west",
              "nginx-set-2.west"]
EXPORTED = {"mirror.linkerd.io/exported": "true"}


@pytest.fixture(scope="module")
def demo() -> Iterator[Dnsside]:
    with demo_server("--mcs-zone", "clusterset.local.") as srv:
        yield srv


def srv_records(msg: dns.message.Message) -> list[tuple[int, int, int, str]]:
    return sorted((rd.priority, rd.weight, rd.port, rd.target.to_text())
                  for rrset in msg.answer if rrset.rdtype == dns.rdatatype.SRV for rd in rrset)


def glue(msg: dns.message.Message) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rrset in msg.additional:
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            out.setdefault(rrset.name.to_text(), []).extend(sorted(rd.to_text() for rd in rrset))
    return out


def negative(msg: dns.message.Message, rcode: int, zone: str = M) -> None:
    """NXDOMAIN or NODATA as for --zone: no answer, the MCS zone's SOA, TTL 5, AA."""
    assert msg.rcode() == rcode, msg
    assert msg.answer == []
    assert msg.flags & dns.flags.AA
    assert [r.rdtype for r in msg.authority] == [dns.rdatatype.SOA]
    assert msg.authority[0].name.to_text() == zone + "."
    assert msg.authority[0][0].minimum == msg.authority[0].ttl


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
class TestSpecificationOnTheDemo:
    def test_2_2_schema_version_txt(self, demo: Dnsside, tcp: bool) -> None:
        msg = demo.query(f"dns-version.{M}", "TXT", tcp=tcp)
        assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
        assert [rd.to_text() for rd in msg.answer[0]] == ['"1.0.0"']
        assert msg.answer[0].ttl == 5
        negative(demo.query(f"dns-version.{M}", "A", tcp=tcp), dns.rcode.NOERROR)

    def test_2_4_1_headless_service_a_is_every_ready_endpoint(self, demo: Dnsside,
                                                              tcp: bool) -> None:
        msg = demo.query(NGINX_MCS, "A", tcp=tcp)
        assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
        assert answers(msg) == NGINX_A  # north's pods are not ready: left out
        assert answers(msg) == answers(demo.query("nginx-svc.default.svc-global", "A", tcp=tcp))
        assert msg.answer[0].ttl == 5
        negative(demo.query(NGINX_MCS, "AAAA", tcp=tcp), dns.rcode.NOERROR)  # IPv4 only

    def test_2_4_1_pod_name_per_cluster_id(self, demo: Dnsside, tcp: bool) -> None:
        pod = demo.query(f"nginx-set-0.west.{NGINX_MCS}", "A", tcp=tcp)
        assert answers(pod) == ["10.43.179.60"]
        local = demo.query(f"cockroachdb-1.east.cockroachdb.db.svc.{M}", "A", tcp=tcp)
        assert answers(local) == ["10.42.2.21"]
        # not ready (north's gateway, a local pod): no record
        negative(demo.query(f"nginx-set-0.north.{NGINX_MCS}", "A", tcp=tcp), dns.rcode.NXDOMAIN)
        negative(demo.query(f"cockroachdb-2.east.cockroachdb.db.svc.{M}", "A", tcp=tcp),
                 dns.rcode.NXDOMAIN)
        negative(demo.query(f"nginx-set-0.west.{NGINX_MCS}", "SRV", tcp=tcp), dns.rcode.NOERROR)

    def test_2_4_2_headless_srv_per_pod_targets_with_glue(self, demo: Dnsside, tcp: bool) -> None:
        # EDNS: without it the longer MCS names leave no room for glue in 512 bytes
        msg = demo.query(f"_http._tcp.{NGINX_MCS}", "SRV", tcp=tcp, edns=0)
        recs = srv_records(msg)
        assert [target for *_, target in recs] == sorted(f"{p}.{NGINX_MCS}." for p in NGINX_PODS)
        assert {(prio, weight, port) for prio, weight, port, _ in recs} == {(0, 20, 80)}
        g = glue(msg)
        assert set(g) == {target for *_, target in recs}
        assert g[f"nginx-set-0.west.{NGINX_MCS}."] == ["10.43.179.60"]
        # the same five targets as the --zone name, under the other scheme's names
        other = srv_records(demo.query("_http._tcp.nginx-svc.default.svc-global", "SRV", tcp=tcp))
        assert sorted((p, w, port, target.replace(".svc-global.", f".svc.{M}."))
                      for p, w, port, target in other) == recs

    def test_2_4_2_n_ready_endpoints_times_m_named_ports(self, demo: Dnsside, tcp: bool) -> None:
        svc = f"cockroachdb.db.svc.{M}"
        grpc = srv_records(demo.query(f"_grpc._tcp.{svc}", "SRV", tcp=tcp))
        http = srv_records(demo.query(f"_http._tcp.{svc}", "SRV", tcp=tcp))
        assert len(grpc) == len(http) == 5  # 5 ready pods in east and west
        assert {port for _, _, port, _ in grpc} == {26257}  # the Service port, never 4143
        assert {port for _, _, port, _ in http} == {8080}
        both = srv_records(demo.query(svc, "SRV", tcp=True))  # every port: 10 records
        assert {w for _, w, _, _ in both} == {10}
        assert sorted((port, target) for *_, port, target in both) == sorted(
            (port, target) for *_, port, target in grpc + http)

    def test_2_3_1_clusterip_service_answers_the_federated_clusterip(self, demo: Dnsside,
                                                                    tcp: bool) -> None:
        msg = demo.query(f"web.default.svc.{M}", "A", tcp=tcp)
        assert answers(msg) == ["10.43.100.9"]  # web-federated, not the per-cluster mirrors
        assert len(answers(demo.query("web.default.svc-global", "A", tcp=tcp))) == 4

    def test_2_3_2_clusterip_srv_targets_the_service_name(self, demo: Dnsside, tcp: bool) -> None:
        svc = f"web.default.svc.{M}."
        msg = demo.query(f"_http._tcp.web.default.svc.{M}", "SRV", tcp=tcp)
        assert srv_records(msg) == [(0, 100, 8080, svc)]
        assert glue(msg) == {svc: ["10.43.100.9"]}
        assert srv_records(demo.query(svc, "SRV", tcp=tcp)) == [(0, 100, 8080, svc)]

    def test_headless_with_a_link_without_headless_mirroring(self, demo: Dnsside,
                                                              tcp: bool) -> None:
        """db/kafka: a local pod, and south's gateway-mode mirror (headless mirroring off):
        its ClusterIP is in the service's A, as under --zone, but no SRV target."""
        kafka = f"kafka.db.svc.{M}"
        a = answers(demo.query(kafka, "A", tcp=tcp))
        assert a == answers(demo.query("kafka.db.svc-global", "A", tcp=tcp))
        assert "10.44.0.20" in a
        srv = srv_records(demo.query(f"_broker._tcp.{kafka}", "SRV", tcp=tcp))
        assert [target for *_, target in srv] == [f"kafka-0.east.{kafka}."]
        negative(demo.query(f"south.{kafka}", "A", tcp=tcp), dns.rcode.NXDOMAIN)

    def test_federated_only_service(self, demo: Dnsside, tcp: bool) -> None:
        """default/payments exists only as a federated Service: its ClusterIP is the answer."""
        payments = f"payments.default.svc.{M}"
        assert answers(demo.query(payments, "A", tcp=tcp)) == ["10.43.100.20"]
        assert answers(demo.query("payments.default.svc-global", "A", tcp=tcp)) == [
            "10.43.100.20"]

    def test_2_3_4_and_2_4_4_no_per_cluster_names(self, demo: Dnsside, tcp: bool) -> None:
        """No records at <clusterid>.<svc>: NODATA where pod names exist below it (an empty
        non-terminal, RFC 8020, as a secondary of the transferred zone answers), else
        NXDOMAIN (north's nginx pods are not ready; web is a ClusterIP service)."""
        for name, rcode in ((f"west.{NGINX_MCS}", dns.rcode.NOERROR),
                            (f"east.{NGINX_MCS}", dns.rcode.NOERROR),
                            (f"east.cockroachdb.db.svc.{M}", dns.rcode.NOERROR),
                            (f"north.{NGINX_MCS}", dns.rcode.NXDOMAIN),
                            (f"west.web.default.svc.{M}", dns.rcode.NXDOMAIN),
                            (f"federated.web.default.svc.{M}", dns.rcode.NXDOMAIN)):
            for rdtype in ("A", "AAAA", "SRV"):
                negative(demo.query(name, rdtype, tcp=tcp), rcode)

    def test_empty_non_terminals_are_nodata(self, demo: Dnsside, tcp: bool) -> None:
        for name, rdtype in [(f"svc.{M}", "A"), (f"default.svc.{M}", "A"),
                             (f"db.svc.{M}", "SRV"), (f"_tcp.{NGINX_MCS}", "SRV"),
                             (f"_tcp.web.default.svc.{M}", "A")]:
            negative(demo.query(name, rdtype, tcp=tcp), dns.rcode.NOERROR)

    def test_apex_soa_and_ns_share_the_index_serial(self, demo: Dnsside, tcp: bool) -> None:
        soa = demo.query(M, "SOA", tcp=tcp)
        assert soa.answer[0].name.to_text() == M + "." and soa.answer[0][0].minimum == 5
        assert soa.answer[0][0].serial == demo.query("svc-global", "SOA").answer[0][0].serial
        ns = demo.query(M, "NS", tcp=tcp)
        assert ns.rcode() == dns.rcode.NOERROR and ns.answer[0].rdtype == dns.rdatatype.NS

    def test_nxdomain_for_everything_else(self, demo: Dnsside, tcp: bool) -> None:
        for name, rdtype in [
            (f"nginx-svc.default.{M}", "A"),  # the svc label is part of the name
            (f"metrics.default.svc.{M}", "A"),  # not exported, not mirrored
            (f"nginx-svc-west.default.svc.{M}", "A"),  # mirrors are not names
            (f"_grpc._tcp.{NGINX_MCS}", "SRV"),  # no such port
            (f"_http._udp.{NGINX_MCS}", "SRV"),  # no such protocol
            (f"pod.{M}", "A"), (f"nope.default.svc.{M}", "A"),
            (f"x.nginx-set-0.west.{NGINX_MCS}", "A"),
        ]:
            negative(demo.query(name, rdtype, tcp=tcp), dns.rcode.NXDOMAIN)

    def test_case_is_echoed_and_edns_answered(self, demo: Dnsside, tcp: bool) -> None:
        name = "NgInX-SeT-0.WeSt.nginx-SVC.Default.SVC.ClusterSet.Local."
        msg = demo.query(name, "A", tcp=tcp, edns=0)
        assert msg.question[0].name.to_text() == name  # as sent, byte for byte
        assert answers(msg) == ["10.43.179.60"] and msg.edns == 0 and msg.payload == 1232

    def test_refused_outside_the_zones(self, demo: Dnsside, tcp: bool) -> None:
        for name in ("nginx-svc.default.svc.cluster.local", "local", "other.local"):
            msg = demo.query(name, "A", tcp=tcp)
            assert msg.rcode() == dns.rcode.REFUSED and not msg.answer


# --------------------------------------------------------------------------- more shapes


def shapes(tmp: Path) -> Path:
    """shop/cart: headless, east pods (cart-1 not ready), west per-pod (dual stack), north a
    gateway-mode ClusterIP mirror (headless mirroring off); an unnamed port.
    shop/api: ClusterIP, local + a west gateway mirror, no federated Service.
    shop/ghost: headless with no ready endpoint."""
    ports = [("http", 80), ("", 9000)]
    mirror = {t.MIRROR: "true", t.CLUSTER: "north"}
    west_gw = {t.MIRROR: "true", t.CLUSTER: "west"}
    objs = [
        t.service("shop", "cart", None, ports, EXPORTED),
        t.endpoint_slice("shop", "cart-abc", "cart", [
            {"addresses": ["10.42.5.1"], "hostname": "cart-0", "conditions": {"ready": True}},
            {"addresses": ["10.42.5.2"], "hostname": "cart-1", "conditions": {"ready": False}},
        ], ports),
        *t.headless_link("shop", "cart", "west", {"cart-0": ["10.43.5.1", "fd00:43::5"]}, ports),
        t.service("shop", "cart-north", ["10.43.6.1"], ports, mirror),
        t.endpoint_slice("shop", "cart-north-x1", "cart-north", [
            {"addresses": ["172.18.0.7"], "conditions": {"ready": True}}],
            [("http", 4143)], labels=mirror),
        t.service("shop", "api", ["10.43.0.70"], [("grpc", 9090), ("", 8081)], EXPORTED),
        t.endpoint_slice("shop", "api-abc", "api", [
            {"addresses": ["10.42.9.9"], "conditions": {"ready": True}}],
            [("grpc", 9090), ("", 8081)]),
        t.service("shop", "api-west", ["10.43.7.1"], [("grpc", 9090), ("", 8081)], west_gw),
        t.endpoint_slice("shop", "api-west-x1", "api-west", [
            {"addresses": ["172.18.0.3"], "conditions": {"ready": True}}],
            [("grpc", 4143)], labels=west_gw),
        t.service("shop", "ghost", None, [("http", 80)], EXPORTED),
        t.endpoint_slice("shop", "ghost-abc", "ghost", [
            {"addresses": ["10.42.6.1"], "hostname": "ghost-0", "conditions": {"ready": False}}],
            [("http", 80)]),
    ]
    return t.write(tmp / "shapes.json", objs)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsside]:
    path = shapes(tmp_path_factory.mktemp("mcs"))
    with Dnsside("--source", str(path), "--cluster-name", "east", "--ttl", "30",
                 env={"DNSSIDE_MCS_ZONE": "clusterset.local."}) as srv:  # the env form
        yield srv


CART = f"cart.shop.svc.{M}"
API = f"api.shop.svc.{M}"


def test_headless_cluster_level_member_in_the_service_a_only(shop: Dnsside) -> None:
    """A link with headless mirroring off has no pod names: its ClusterIP is in the service's
    A (every ready member's address, as for --zone), never an SRV target, no name of its own."""
    a = shop.query(CART, "A")
    assert answers(a) == ["10.42.5.1", "10.43.5.1", "10.43.6.1"]
    assert a.answer[0].ttl == 30  # --ttl applies to the MCS zone too
    srv = shop.query(f"_http._tcp.{CART}", "SRV")
    assert [target for *_, target in srv_records(srv)] == [
        f"cart-0.east.{CART}.", f"cart-0.west.{CART}."]
    negative(shop.query(f"north.{CART}", "A"), dns.rcode.NXDOMAIN)
    assert answers(shop.query("north.cart.shop.svc-global", "A")) == ["10.43.6.1"]


def test_2_4_1_dual_stack_pod_has_a_and_aaaa(shop: Dnsside) -> None:
    assert answers(shop.query(CART, "AAAA"), "AAAA") == ["fd00:43::5"]
    pod = f"cart-0.west.{CART}"
    assert answers(shop.query(pod, "A")) == ["10.43.5.1"]
    assert answers(shop.query(pod, "AAAA"), "AAAA") == ["fd00:43::5"]
    g = glue(shop.query(f"_http._tcp.{CART}", "SRV"))
    assert g[pod + "."] == ["10.43.5.1", "fd00:43::5"]
    negative(shop.query(f"cart-0.east.{CART}", "AAAA"), dns.rcode.NOERROR)
    negative(shop.query(f"cart-1.east.{CART}", "A"), dns.rcode.NXDOMAIN)  # not ready


def test_unnamed_ports_have_no_srv_name(shop: Dnsside) -> None:
    """§2.3.2 / §2.4.2: "Unnamed ports do not have an SRV record" (`_<port>._<proto>`);
    `<svc>.<ns>.svc.M SRV` lists every port, as for --zone, CoreDNS and Lighthouse."""
    everything = srv_records(shop.query(CART, "SRV"))
    assert sorted({port for _, _, port, _ in everything}) == [80, 9000]
    assert len(everything) == 4  # two pods x two ports
    assert {port for _, _, port, _ in srv_records(shop.query(f"_http._tcp.{CART}", "SRV"))} == {
        80}
    api = srv_records(shop.query(API, "SRV"))
    assert api == [(0, 50, 8081, API + "."), (0, 50, 9090, API + ".")]


def test_2_3_clusterip_without_federated_answers_every_member(shop: Dnsside) -> None:
    """No federated Service: every cluster's ClusterIP stands in for the clusterset IP."""
    assert answers(shop.query(API, "A")) == ["10.43.0.70", "10.43.7.1"]
    msg = shop.query(f"_grpc._tcp.{API}", "SRV")
    assert srv_records(msg) == [(0, 100, 9090, API + ".")]
    assert glue(msg) == {API + ".": ["10.43.0.70", "10.43.7.1"]}
    negative(shop.query(f"east.{API}", "A"), dns.rcode.NXDOMAIN)


def test_2_4_1_headless_with_no_ready_endpoint_is_nxdomain(shop: Dnsside) -> None:
    for rdtype in ("A", "AAAA", "SRV"):
        negative(shop.query(f"ghost.shop.svc.{M}", rdtype), dns.rcode.NXDOMAIN)
    negative(shop.query(f"ghost-0.east.ghost.shop.svc.{M}", "A"), dns.rcode.NXDOMAIN)


def test_publish_not_ready_applies_to_the_mcs_names(tmp_path: Path) -> None:
    with Dnsside("--source", str(shapes(tmp_path)), "--cluster-name", "east",
                 "--mcs-zone", M, "--publish-not-ready") as srv:
        assert answers(srv.query(f"ghost.shop.svc.{M}", "A")) == ["10.42.6.1"]
        assert answers(srv.query(f"cart-1.east.{CART}", "A")) == ["10.42.5.2"]


def test_overlapping_zones_are_refused_at_start() -> None:
    for args, other in [(["--zone", "svc.clusterset.local.", "--mcs-zone", M], "--zone"),
                        (["--zone", "local.", "--mcs-zone", M], "--zone"),
                        (["--mcs-zone", M, "--mcs-zone", "svc.clusterset.local"], "--mcs-zone")]:
        result = run_cli(["serve", "--source", "examples/demo-east.yaml", *args])
        assert result.returncode == 2
        assert "overlaps " + other in result.stderr, result.stderr


def test_explain_says_why_an_mcs_name_answers_what_it_does() -> None:
    import json

    base = ["explain", "-o", "json", "--source", "examples/demo-east.yaml", "--cluster-name", "east",
            "--mcs-zone", M]
    west = json.loads(run_cli([*base, f"west.{NGINX_MCS}"]).stdout)
    assert west["rcode"] == "NOERROR" and not west["answer"] and "per-cluster" in west["naming"]
    north = json.loads(run_cli([*base, f"north.{NGINX_MCS}"]).stdout)
    assert north["rcode"] == "NXDOMAIN" and "per-cluster" in north["naming"]
    web = json.loads(run_cli([*base, f"web.default.svc.{M}"]).stdout)
    assert web["answer"] and "federated" in web["naming"]
    served = [m["cluster"] for m in web["members"] if m["status"] == "in the answer"]
    assert served == ["federated"]


# --------------------------------------------------------------------------- dig: Done when


def dig(srv: Dnsside, name: str, rdtype: str) -> tuple[str, list[list[str]], list[list[str]]]:
    """(status, answer RRs, additional RRs) from dig's text, each RR as its fields."""
    out = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), "+time=3", "+tries=1",
                          "+norec", "+noall", "+comments", "+answer", "+additional", name,
                          rdtype], capture_output=True, text=True, timeout=30).stdout
    status = re.search(r"status: (\w+)", out)
    assert status, out
    sections: dict[str, list[list[str]]] = {"ANSWER": [], "ADDITIONAL": []}
    current = ""
    for line in out.splitlines():
        header = re.match(r";; (\w+) SECTION:", line)
        if header:
            current = header.group(1)
        elif line and not line.startswith(";") and current in sections:
            sections[current].append(line.split())
    return status.group(1), sections["ANSWER"], sections["ADDITIONAL"]


def test_done_when_through_dig(demo: Dnsside) -> None:
    status, mcs, _ = dig(demo, NGINX_MCS, "A")
    _, zone, _ = dig(demo, "nginx-svc.default.svc-global", "A")
    assert status == "NOERROR" and sorted(rr[4] for rr in mcs) == sorted(rr[4] for rr in zone)
    assert sorted(rr[4] for rr in mcs) == NGINX_A

    status, pod, _ = dig(demo, f"nginx-set-0.west.{NGINX_MCS}", "A")
    assert status == "NOERROR" and [rr[4] for rr in pod] == ["10.43.179.60"]

    status, srv, extra = dig(demo, f"_http._tcp.{NGINX_MCS}", "SRV")
    targets = sorted(rr[7] for rr in srv)
    assert status == "NOERROR" and targets == sorted(f"{p}.{NGINX_MCS}." for p in NGINX_PODS)
    assert sorted(rr[0] for rr in extra if rr[3] == "A") == targets  # glue for each target

    status, txt, _ = dig(demo, f"dns-version.{M}", "TXT")
    assert status == "NOERROR" and [rr[3:] for rr in txt] == [["TXT", '"1.0.0"']]

    status, ent, _ = dig(demo, f"west.{NGINX_MCS}", "A")  # pod names below: NODATA
    assert status == "NOERROR" and ent == []
    status, nx, _ = dig(demo, f"north.{NGINX_MCS}", "A")
    assert status == "NXDOMAIN" and nx == []

    status, nodata, _ = dig(demo, f"default.svc.{M}", "A")
    assert status == "NOERROR" and nodata == []
