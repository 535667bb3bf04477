"""The KEP-1645 encoder and the index with both naming schemes, without sockets.

The encoder is fed hand-built GlobalServices (so every member shape is covered,
whatever Linkerd objects would produce it) and read back through the same
Responder the server uses. The index tests check that a change re-encodes only
the service it touches, in both zones.
"""

from __future__ import annotations

import functools

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from dnsside.core.assembly import GlobalService
from dnsside.core.encode import encode_service
from dnsside.core.index import Index, IndexOptions
from dnsside.core.members import Member
from dnsside.dns.responder import Responder
from dnsside.dns.wire import to_wire
from dnsside.dns.zone import McsZone, Zone, ZoneOptions
from dnsside.model.events import (
    Delete,
    Kind,
    Upsert,
)
from dnsside.model.linkerd import FEDERATED_CLUSTER, Port, Via
from testkit import objects
from testkit.inprocess import ask_name, synced_index
from tests.core.test_index import BOTH, demo_records, obj, rec

pytestmark = pytest.mark.quick

M = "clusterset.local."
HTTP = Port("http", 80, "TCP")
METRICS = Port("", 9100, "TCP")


def pod(cluster: str, host: str, *addresses: str, ready: bool = True,
        via: Via = Via.POD_MIRROR) -> Member:
    return Member(cluster, host, addresses, (HTTP, METRICS), ready, via, f"{host}-{cluster}")


def clusterip(cluster: str, *addresses: str, via: Via = Via.GATEWAY_MIRROR,
              ports: tuple[Port, ...] = (HTTP,)) -> Member:
    return Member(cluster, None, addresses, ports, True, via, f"x-{cluster}")


def serve(gs: GlobalService, options: ZoneOptions | None = None) -> Responder:
    """A responder holding ``gs`` in one --zone and one --mcs-zone, as the index would."""
    options = options or ZoneOptions()
    zones = [Zone("svc-global.", options), McsZone(M, options)]
    r = Responder(zones)
    out = encode_service(gs, zones, options)
    r.answers.update(out.answers)
    for name in out.names:
        r.names[name] = zones[1] if name.endswith(zones[1].wire) else zones[0]
    r.set_ready()
    return r


# Every question with EDNS, over TCP: the whole answer, never truncated.
ask = functools.partial(ask_name, transport="tcp", edns=0)


def rdata(msg: dns.message.Message, rdtype: str = "A") -> list[str]:
    t = dns.rdatatype.from_text(rdtype)
    return sorted(rd.to_text() for rrset in msg.answer if rrset.rdtype == t for rd in rrset)


def mcs_names(r: Responder) -> set[str]:
    """Every name that exists in the MCS zone: owners of an answer, and the empty
    non-terminals the responder keeps in ``names``."""
    wire = to_wire(M)
    existing = {*r.names, *(key[:-4] for key in r.answers)}
    return {dns.name.from_wire(n, 0)[0].to_text() for n in existing if n.endswith(wire)}


SVC = "db.ns.svc.clusterset.local"


def test_headless_names_are_exactly_the_specifications() -> None:
    gs = GlobalService("ns", "db", (
        pod("east", "db-0", "10.42.0.1", via=Via.LOCAL_ENDPOINT),
        pod("west", "db-0", "10.43.0.1", "fd00::1"),
        pod("west", "db-1", "10.43.0.2", ready=False),
        clusterip("north", "10.43.9.9"),  # a link with headless mirroring off
    ), excluded=(pod("gone", "db-0", "10.99.0.1"),), headless=True, local_exported=True)
    r = serve(gs)
    assert mcs_names(r) == {
        M, "svc." + M, "dns-version." + M,  # fixed names of the zone
        SVC + ".", "db-0.east." + SVC + ".", "db-0.west." + SVC + ".",
        "_tcp." + SVC + ".", "_http._tcp." + SVC + ".",
        "east." + SVC + ".", "west." + SVC + ".",  # empty non-terminals above pod names
    }  # `<ns>.svc.M` comes from the index; no not-ready pod, no north (no pod name)
    assert rdata(ask(r, SVC)) == ["10.42.0.1", "10.43.0.1", "10.43.9.9"]
    assert rdata(ask(r, SVC, "AAAA"), "AAAA") == ["fd00::1"]
    srv = ask(r, "_http._tcp." + SVC, "SRV")
    assert rdata(srv, "SRV") == [f"0 50 80 db-0.east.{SVC}.", f"0 50 80 db-0.west.{SVC}."]
    # the service SRV has every port, unnamed too, but only pod targets
    assert len(rdata(ask(r, SVC, "SRV"), "SRV")) == 4
    assert ask(r, "north." + SVC).rcode() == dns.rcode.NXDOMAIN  # nothing below it
    west = ask(r, "west." + SVC)  # KEP-1645: no records; pod names below: NODATA
    assert west.rcode() == dns.rcode.NOERROR and not west.answer
    # the excluded member is nowhere
    assert "10.99.0.1" not in rdata(ask(r, "db.ns.svc-global"))


def test_clusterip_with_federated_member_answers_only_it() -> None:
    fed_ports = (Port("http", 8080, "TCP"),)
    gs = GlobalService("ns", "db", (
        clusterip("east", "10.43.0.10", via=Via.LOCAL_SERVICE),
        clusterip("west", "10.43.0.11"),
        Member(FEDERATED_CLUSTER, None, ("10.43.0.12", "fd00::12"), fed_ports, True,
               Via.FEDERATED, "db-federated"),
    ), local_exported=True)
    r = serve(gs)
    assert rdata(ask(r, SVC)) == ["10.43.0.12"]
    assert rdata(ask(r, SVC, "AAAA"), "AAAA") == ["fd00::12"]
    srv = ask(r, "_http._tcp." + SVC, "SRV")
    assert rdata(srv, "SRV") == [f"0 100 8080 {SVC}."]  # the federated Service's port
    assert sorted(rd.to_text() for rrset in srv.additional for rd in rrset) == [
        "10.43.0.12", "fd00::12"]
    assert mcs_names(r) >= {SVC + "."}
    assert not any(n.startswith(("east.", "west.", "federated.")) for n in mcs_names(r))
    # the --zone names are untouched by the MCS choice
    assert rdata(ask(r, "db.ns.svc-global")) == ["10.43.0.10", "10.43.0.11", "10.43.0.12"]


def test_clusterip_without_federated_one_record_per_port_number() -> None:
    dns_ports = (Port("dns", 53, "UDP"), Port("dns-tcp", 53, "TCP"), METRICS)
    gs = GlobalService("ns", "db", (
        clusterip("east", "10.43.0.10", via=Via.LOCAL_SERVICE, ports=dns_ports),
        clusterip("west", "10.43.0.11", ports=dns_ports),
    ), local_exported=True)
    r = serve(gs)
    assert rdata(ask(r, SVC)) == ["10.43.0.10", "10.43.0.11"]
    # one target, so 53/UDP and 53/TCP are one record (never a duplicate RR), 9100 another
    assert rdata(ask(r, SVC, "SRV"), "SRV") == [f"0 50 53 {SVC}.", f"0 50 9100 {SVC}."]
    assert rdata(ask(r, "_dns._udp." + SVC, "SRV"), "SRV") == [f"0 100 53 {SVC}."]
    assert rdata(ask(r, "_dns-tcp._tcp." + SVC, "SRV"), "SRV") == [f"0 100 53 {SVC}."]


def test_nothing_published_means_no_names_and_flags_apply() -> None:
    gs = GlobalService("ns", "db", (pod("west", "db-0", "10.43.0.1", ready=False),),
                       headless=True)
    assert encode_service(gs, [McsZone(M, ZoneOptions())], ZoneOptions()).answers == {}
    r = serve(gs, ZoneOptions(ttl=9, publish_not_ready=True))
    msg = ask(r, f"db-0.west.{SVC}")
    assert rdata(msg) == ["10.43.0.1"] and msg.answer[0].ttl == 9


def test_local_first_priority_under_mcs_names() -> None:
    gs = GlobalService("ns", "db", (
        pod("east", "db-0", "10.42.0.1", via=Via.LOCAL_ENDPOINT),
        pod("west", "db-0", "10.43.0.1"),
    ), headless=True, local_exported=True)
    r = serve(gs, ZoneOptions(srv_priority="local-first"))
    assert rdata(ask(r, "_http._tcp." + SVC, "SRV"), "SRV") == [
        f"0 100 80 db-0.east.{SVC}.", f"10 100 80 db-0.west.{SVC}."]


def test_only_exporting_clusters_belong_to_a_clusterset_service() -> None:
    """KEP-1645 and the MCS conformance suite: a cluster whose Service is not exported is
    not in the clusterset service, even when another cluster exports one of that name.
    The svc-global zone keeps its own rule: the local original is always a member."""
    for headless, local in ((True, pod("east", "db-0", "10.42.0.1", via=Via.LOCAL_ENDPOINT)),
                            (False, clusterip("east", "10.43.0.10", via=Via.LOCAL_SERVICE))):
        remote = pod("west", "db-0", "10.43.0.1") if headless else clusterip("west", "10.43.0.11")
        for exported in (False, True):
            gs = GlobalService("ns", "db", (local, remote), headless=headless,
                               local_exported=exported)
            r = serve(gs)
            ours = local.addresses[0]
            assert (ours in rdata(ask(r, SVC))) is exported, (headless, exported)
            assert ours in rdata(ask(r, "db.ns.svc-global"))
            assert (f"db-0.east.{SVC}." in mcs_names(r)) is (exported and headless)
    # nothing exported but the local Service, which is not: no clusterset name at all
    gs = GlobalService("ns", "db", (pod("east", "db-0", "10.42.0.1", via=Via.LOCAL_ENDPOINT),),
                       headless=True)
    assert ask(serve(gs), SVC).rcode() == dns.rcode.NXDOMAIN


def test_dns_version_is_fixed_and_any_sees_it() -> None:
    r = Responder([McsZone(M, ZoneOptions())])
    r.set_ready()
    txt = ask(r, "dns-version." + M, "TXT")
    assert rdata(txt, "TXT") == ['"1.0.0"']
    assert ask(r, "dns-version." + M, "ANY").answer  # RFC 8482 HINFO: the name owns data
    assert ask(r, "svc." + M).rcode() == dns.rcode.NOERROR  # empty non-terminal
    assert ask(r, "pod." + M).rcode() == dns.rcode.NXDOMAIN


# --------------------------------------------------------------------------- the index


@pytest.fixture
def index() -> Index:
    return synced_index(demo_records(), IndexOptions(cluster_name="east"), kinds=BOTH,
                        mcs_zones=[M])


def owned_by(key: bytes, *services: str) -> bool:
    """``key`` is a question below one of ``services`` (dotted, relative to the zones)."""
    return any(to_wire(svc + suffix)[:-1] in key for svc in services
               for suffix in (".svc-global.", ".svc." + M))


def changed_keys(r: Responder, before: dict[bytes, object]) -> set[bytes]:
    """Questions whose Answer object was replaced, added or removed since ``before``;
    the zone-level ones (SOA, NS, dns-version: re-made with every serial) left out."""
    apex = {z.wire for z in r.zones} | {b"\x0bdns-version" + to_wire(M)}
    return {k for k in r.answers.keys() | before.keys()
            if r.answers.get(k) is not before.get(k) and k[:-4] not in apex}


def test_a_change_reencodes_only_its_service_in_both_zones(index: Index) -> None:
    r = index.responder
    before = dict(r.answers)
    sl = obj("nginx-set-0-north-bffce")
    sl["endpoints"][0]["conditions"]["ready"] = True
    assert index.apply([Upsert(rec(sl))]) == {("default", "nginx-svc")}
    changed = changed_keys(r, before)
    assert changed, "the gateway recovered: nginx-svc's answers must change"
    for key in changed:
        assert owned_by(key, "nginx-svc.default"), key
    for zone in ("nginx-svc.default.svc-global", "nginx-svc.default.svc." + M):
        key = to_wire(zone) + b"\x00\x01\x00\x01"
        assert key in changed and "10.43.61.5" in rdata(ask(index.responder, zone))
    assert rdata(ask(index.responder, "nginx-set-0.north.nginx-svc.default.svc." + M)) == [
        "10.43.61.5"]


def test_federated_service_going_away_switches_the_clusterset_ip(index: Index) -> None:
    web = "web.default.svc." + M
    assert rdata(ask(index.responder, web)) == ["10.43.100.9"]
    before = dict(index.responder.answers)
    index.apply([Delete(Kind.SERVICE, "default", "web-federated")])
    assert rdata(ask(index.responder, web)) == ["10.43.0.50", "10.43.100.7", "10.43.100.8"]
    changed = changed_keys(index.responder, before)
    assert changed and all(owned_by(k, "web.default") for k in changed)


def test_removing_a_namespace_last_service_removes_its_names_in_both_zones(index: Index) -> None:
    r = index.responder
    db = [to_wire("db.svc-global."), to_wire("db.svc." + M)]
    assert all(n in r.names for n in db)
    gone = [Delete(Kind.SERVICE, "db", name) for ns, name in index.local.services if ns == "db"]
    index.apply(gone)
    assert not any(n in r.names for n in db)
    assert not any(owned_by(k, "cockroachdb.db") for k in r.answers)
    assert not any(b"\x02db\x03svc" in n for n in r.names)
    assert ask(r, "db.svc." + M).rcode() == dns.rcode.NXDOMAIN
    assert ask(r, "svc." + M).rcode() == dns.rcode.NOERROR  # still there: fixed
    assert ask(r, "default.svc." + M).rcode() == dns.rcode.NOERROR


def test_hostless_dual_stack_pods_are_one_srv_record_per_address() -> None:
    """The MCS conformance suite's headless case (two dual-stack pods of a Deployment):
    four SRV records, targets named by the dashed addresses, in both zones."""
    from dnsside.core.assembly import ClusterView, assemble
    from dnsside.model.linkerd import parse_service, parse_slice

    svc = parse_service(objects.service("ns", "db", None, [{"name": "http", "port": 80}],
                                        {objects.EXPORTED: "true"}))
    slices = [parse_slice(objects.endpoint_slice(
        "ns", f"db-{family}", "db",
        [objects.endpoint(a, True, pod=pod_name, namespace="ns") for a, pod_name in pairs],
        [("http", 80)], family))
        for family, pairs in (("IPv4", (("10.42.20.5", "db-a"), ("10.42.20.6", "db-b"))),
                              ("IPv6", (("fd00:42::20:5", "db-a"), ("fd00:42::20:6", "db-b"))))]
    gs = assemble("ns", "db", svc, slices, [], ClusterView("east"))
    assert gs is not None
    r = serve(gs)
    for srv_name, base in ((f"_http._tcp.{SVC}", f"east.{SVC}"), ("_http._tcp.db.ns.svc-global",
                                                        "east.db.ns.svc-global")):
        targets = sorted(rd.split()[-1] for rd in rdata(ask(r, srv_name, "SRV"), "SRV"))
        assert targets == [f"{host}.{base}." for host in (
            "10-42-20-5", "10-42-20-6", "fd00-42--20-5", "fd00-42--20-6")], targets
    assert rdata(ask(r, f"fd00-42--20-5.east.{SVC}", "AAAA"), "AAAA") == ["fd00:42::20:5"]
    assert rdata(ask(r, f"10-42-20-5.east.{SVC}", "AAAA"), "AAAA") == []
