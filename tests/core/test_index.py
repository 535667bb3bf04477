"""The index applies events incrementally and its answers follow, without sockets."""

from __future__ import annotations

import copy
from typing import Any

import dns.message
import dns.rcode
import pytest
import yaml

from dnsside.core.build import make_index
from dnsside.core.index import Index, IndexOptions
from dnsside.model.events import (
    Delete,
    Kind,
    Replace,
    SourceError,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import (
    Record,
    ServiceRecord,
    SliceRecord,
    parse_object,
)
from dnsside.serving.reporting import IndexReporter
from testkit import objects
from testkit.inprocess import ask_name, empty_index, synced_index
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

BOTH = frozenset({Kind.SERVICE, Kind.SLICE})
ALL = BOTH | {Kind.LINK}  # a dump with Links: mirrors of unlinked clusters are orphans
ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]


def demo_records() -> tuple[Record, ...]:
    out = []
    for obj in ITEMS:
        r = parse_object(obj)
        assert r is not None
        out.append(r)
    return tuple(out)


def obj(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == name))


def rec(o: dict[str, Any]) -> Record:
    r = parse_object(o)
    assert r is not None
    return r


@pytest.fixture
def index() -> Index:
    return synced_index(demo_records(), IndexOptions(cluster_name="east"), kinds=ALL,
                        observer=IndexReporter())  # the server's log lines


def addrs(idx: Index, name: str) -> list[str]:
    return sorted(rd.to_text() for rrset in ask_name(idx, name).answer for rd in rrset)


def test_the_index_reads_only_the_clock_it_is_given() -> None:
    """The caller owns the clock: the serial before the sync is the given clock's second,
    the first version (zones transferred) the given clock's second at the sync."""
    now = [1_900_000_000.25]
    idx = make_index(IndexOptions(transfer_history=4), clock=lambda: now[0])
    soa = ask_name(idx, "svc-global", "SOA")  # SERVFAIL before the sync: the serial is the zone's
    assert idx.publisher.serial == 1_900_000_000 and soa.rcode() == dns.rcode.SERVFAIL
    now[0] += 7
    idx.apply([Replace(BOTH, demo_records()), Synced()])
    assert ask_name(idx, "svc-global", "SOA").answer[0][0].serial == 1_900_000_007
    assert idx.publisher.cut_serial == 1_900_000_007


def test_servfail_until_synced() -> None:
    idx = empty_index()
    idx.apply([Replace(BOTH, demo_records())])
    assert ask_name(idx, "nginx-svc.default.svc-global").rcode() == dns.rcode.SERVFAIL
    assert ask_name(idx, "example.com").rcode() == dns.rcode.REFUSED
    idx.apply([Synced()])
    assert ask_name(idx, "nginx-svc.default.svc-global").rcode() == dns.rcode.NOERROR


def test_gateway_recovers_and_serial_moves(index: Index) -> None:
    """A change is pending until the serving side cuts a version; the SOA then says it."""
    serial = index.publisher.serial
    index.publisher.cut(serial + 1)
    assert not index.publisher.pending
    assert "10.43.61.5" not in addrs(index, "nginx-svc.default.svc-global")
    sl = obj("nginx-set-0-north-bffce")
    sl["endpoints"][0]["conditions"]["ready"] = True
    changed = index.apply([Upsert(rec(sl))])
    assert changed == {("default", "nginx-svc")}
    assert "10.43.61.5" in addrs(index, "nginx-svc.default.svc-global")
    assert addrs(index, "north.nginx-svc.default.svc-global") == ["10.43.61.5"]
    assert index.publisher.pending and index.publisher.serial == serial + 1
    index.publisher.cut(serial + 2)
    soa = ask_name(index, "svc-global", "SOA").answer[0][0]
    assert soa.serial == index.publisher.serial == serial + 2 and not index.publisher.pending


def test_unrelated_change_touches_nothing(index: Index) -> None:
    index.publisher.cut(index.publisher.serial + 1)
    m = obj("metrics")
    m["spec"]["ports"][0]["port"] = 9091
    assert index.apply([Upsert(rec(m))]) == set()
    assert not index.publisher.pending


def test_per_pod_mirror_goes_and_comes_back(index: Index) -> None:
    index.apply([Delete(Kind.SERVICE, "default", "nginx-set-2-west")])
    assert "10.43.245.244" not in addrs(index, "nginx-svc.default.svc-global")
    assert ask_name(index, "nginx-set-2.west.nginx-svc.default.svc-global").rcode() == \
        dns.rcode.NXDOMAIN
    index.apply([Upsert(rec(obj("nginx-set-2-west")))])
    assert addrs(index, "nginx-set-2.west.nginx-svc.default.svc-global") == ["10.43.245.244"]


def test_link_removed_then_added(index: Index, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="dnsside.index")
    west = [r for r in demo_records()
            if isinstance(r, ServiceRecord) and r.cluster == "west" and r.namespace == "default"]
    index.apply([Delete(Kind.SERVICE, r.namespace, r.name) for r in west])
    assert addrs(index, "nginx-svc.default.svc-global") == ["10.42.1.10", "10.42.1.11"]
    assert ask_name(index, "west.web.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    index.apply([Upsert(r) for r in west])
    assert len(addrs(index, "nginx-svc.default.svc-global")) == 5
    west_db = [r for r in demo_records() if isinstance(r, ServiceRecord) and r.cluster == "west"]
    index.apply([Delete(Kind.SERVICE, r.namespace, r.name) for r in west_db])
    assert "link west gone: no members left" in caplog.text
    index.apply([Upsert(r) for r in west_db])
    assert "link west seen: 7 members" in caplog.text


def test_last_member_gone_makes_names_and_namespace_vanish(index: Index) -> None:
    for name in ("cockroachdb", "cockroachdb-west", "cockroachdb-north", "kafka", "kafka-south",
                 *(f"cockroachdb-{i}-{c}" for i in range(3) for c in ("west", "north"))):
        index.apply([Delete(Kind.SERVICE, "db", name)])
    assert ("db", "cockroachdb") not in index.global_services
    assert ask_name(index, "db.svc-global").rcode() == dns.rcode.NXDOMAIN
    assert ask_name(index, "_grpc._tcp.cockroachdb.db.svc-global", "SRV").rcode() == \
        dns.rcode.NXDOMAIN
    assert ask_name(index, "default.svc-global").rcode() == dns.rcode.NOERROR  # others remain


def test_slice_before_its_service(index: Index) -> None:
    new_slice = rec(obj("nginx-set-0-west-ba6e2"))
    assert isinstance(new_slice, SliceRecord)
    svc = obj("nginx-set-0-west")
    svc["metadata"]["name"] = "nginx-set-3-west"
    svc["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"] = (
        "nginx-set-3.nginx-svc.default.svc.cluster.local")
    svc["spec"]["clusterIPs"] = ["10.43.1.3"]
    sl = obj("nginx-set-0-west-ba6e2")
    sl["metadata"]["name"] = "nginx-set-3-west-xyz"
    sl["metadata"]["labels"]["kubernetes.io/service-name"] = "nginx-set-3-west"
    index.apply([Upsert(rec(sl))])
    index.apply([Upsert(rec(svc))])
    assert addrs(index, "nginx-set-3.west.nginx-svc.default.svc-global") == ["10.43.1.3"]


def test_replace_diffs_and_drops_what_is_missing(index: Index) -> None:
    keep = tuple(r for r in demo_records()
                 if not (isinstance(r, ServiceRecord) and r.name == "nginx-set-1-west"))
    changed = index.apply([Replace(BOTH, keep)])
    assert changed == {("default", "nginx-svc")}
    assert "10.43.218.18" not in addrs(index, "nginx-svc.default.svc-global")
    # A Replace of one kind leaves the other kind alone.
    index.apply([Replace(frozenset({Kind.SLICE}), ())])
    assert index.local.services and not index.local.slices
    # No slice, nothing ready... except remote-discovery and federated mirrors, which have no
    # endpoints at all.
    assert ask_name(index, "nginx-svc.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    assert addrs(index, "web.default.svc-global") == ["10.43.100.8", "10.43.100.9"]


def test_mirror_changing_its_original_moves_between_services(index: Index) -> None:
    svc = obj("web-west")
    svc["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"] = (
        "api.default.svc.cluster.local")
    changed = index.apply([Upsert(rec(svc))])
    assert changed == {("default", "web"), ("default", "api")}
    assert addrs(index, "api.default.svc-global") == ["10.43.100.7"]
    assert "10.43.100.7" not in addrs(index, "web.default.svc-global")


def test_source_error_keeps_serving(index: Index) -> None:
    before = addrs(index, "nginx-svc.default.svc-global")
    assert index.apply([SourceError("the API server is down")]) == set()
    assert addrs(index, "nginx-svc.default.svc-global") == before


def test_huge_rrset_is_capped_to_fit_a_tcp_message() -> None:
    from dnsside.dns.wire import TCP_LIMIT

    objs: list[ServiceRecord | SliceRecord] = []
    port = {"name": "p", "port": 1}
    objs.append(rec(objects.service("x", "big", None, [port], {objects.EXPORTED: "true"})))
    eps = [objects.endpoint(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", None, f"h{i}")
           for i in range(6000)]
    objs.append(rec(objects.endpoint_slice("x", "big-1", "big", eps, [port])))
    idx = empty_index()
    idx.apply([Replace(BOTH, tuple(objs)), Synced()])
    for rdtype in ("A", "SRV"):
        reply = idx.responder.respond(dns.message.make_query("big.x.svc-global", rdtype).to_wire(),
                                      udp=False)
        assert reply is not None and len(reply) <= TCP_LIMIT
        msg = dns.message.from_wire(reply)
        assert 1000 < sum(len(r) for r in msg.answer) < 6000
    udp = idx.responder.respond(dns.message.make_query("big.x.svc-global", "A").to_wire())
    assert udp is not None and len(udp) <= 512 and dns.message.from_wire(udp).flags & dns.flags.TC
