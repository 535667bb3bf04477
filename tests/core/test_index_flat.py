"""--flat-network in the index, without sockets: a linked cluster's own objects become
members by their pods' addresses, in every answer form, and leave out that cluster's
mirrors; its watch's states and a deleted Link behave as the issue says."""

from __future__ import annotations

import functools
import logging
from typing import Any

import dns.message
import dns.rcode
import pytest

from dnsside.core.diagnosis import Exclusion
from dnsside.core.explain import Explainer, render
from dnsside.core.index import Index, IndexOptions
from dnsside.dns.zone import ZoneOptions
from dnsside.model.events import (
    Delete,
    Gateway,
    GatewayState,
    Kind,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import (
    LinkRecord,
    Record,
    ServiceRecord,
    parse_endpoints,
    parse_link,
    parse_object,
    parse_remote_service,
    parse_slice,
)
from dnsside.model.selectors import LabelSelector, parse_label_selector
from dnsside.serving.reporting import IndexReporter
from dnsside.telemetry import metrics
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    local_objects,
    service,
    v1_endpoints,
    west_objects,
)
from testkit.inprocess import ask_name, empty_index

pytestmark = pytest.mark.quick

ALL = frozenset({Kind.SERVICE, Kind.SLICE, Kind.LINK})
REMOTE_KINDS = frozenset({Kind.SERVICE, Kind.SLICE})
SELECTOR = LabelSelector(tuple(REMOTE_DISCOVERY_LABELS.items()))
DB = "db.data.svc-global"


def local_records() -> tuple[Record, ...]:
    out = []
    for obj in local_objects():
        record = parse_object(obj)
        assert record is not None
        out.append(record)
    return tuple(out)


def remote_records(objects: list[dict[str, Any]], cluster: str = "west") -> tuple[Record, ...]:
    out: list[Record] = []
    for obj in objects:
        if obj["kind"] == "Service":
            found = parse_remote_service(obj, "test", cluster, SELECTOR)
            if found is not None:
                out.append(found)
        elif obj["kind"] == "Endpoints":
            out.append(parse_endpoints(obj))
        else:
            out.append(parse_slice(obj))
    return tuple(out)


def reported_index(*, mcs: tuple[str, ...] = (), **options: Any) -> Index:
    return empty_index(IndexOptions(cluster_name="east", **options), mcs_zones=mcs,
                       observer=IndexReporter())


# Every question over TCP: the whole answer, never truncated.
ask = functools.partial(ask_name, transport="tcp")


def west_synced(idx: Index, objects: list[dict[str, Any]] | None = None) -> None:
    idx.apply([Remote("west", Replace(REMOTE_KINDS, remote_records(
        west_objects() if objects is None else objects))),
        RemoteStatus("west", RemoteState.SYNCED, "", "linkerd-multicluster/cluster-credentials-west")])


@pytest.fixture
def index() -> Index:
    idx = reported_index()
    idx.apply([Replace(ALL, local_records()), Synced()])
    return idx


def addrs(idx: Index, name: str, rdtype: str = "A") -> set[str]:
    return {rd.to_text() for rrset in ask(idx, name, rdtype).answer for rd in rrset}


# --------------------------------------------------------------------------- parsing


def test_the_remote_discovery_selector_is_read_as_linkerd_reads_it() -> None:
    assert not LabelSelector().matches({"anything": "x"})  # empty selects nothing
    assert not parse_label_selector(None, "Link").matches({})
    assert not parse_label_selector({}, "Link").matches({"a": "b"})
    sel = parse_label_selector({"matchLabels": {"a": "b"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["db", "cache"]},
        {"key": "skip", "operator": "DoesNotExist"}]}, "Link")
    assert sel.matches({"a": "b", "tier": "db"})
    assert not sel.matches({"a": "b", "tier": "web"})
    assert not sel.matches({"a": "b", "tier": "db", "skip": ""})
    assert not sel.matches({"tier": "db"})
    assert str(sel) == "a=b,tier in (db,cache),!skip"


def test_a_link_keeps_its_secret_and_selector_and_survives_a_bad_selector() -> None:
    good = parse_link(local_objects()[2])
    assert good.credentials_secret == "cluster-credentials-west"
    assert good.remote_selector.matches(REMOTE_DISCOVERY_LABELS)
    broken = dict(local_objects()[2])
    broken["spec"] = {**broken["spec"], "remoteDiscoverySelector": {"matchExpressions": [
        {"key": "a", "operator": "Near"}]}}
    bad = parse_link(broken)
    assert bad.target_cluster == "west"  # the Link stands: its mirrors are not orphans
    assert not bad.remote_selector.matches(REMOTE_DISCOVERY_LABELS)
    assert "operator 'Near'" in bad.selector_error


def test_only_selected_headless_services_that_are_not_mirrors_are_served_directly() -> None:
    kept = {r.name for r in remote_records(west_objects()) if isinstance(r, ServiceRecord)}
    assert kept == {"db"}  # not private (unselected), web (ClusterIP), db-north (a mirror)


def test_v1_endpoints_read_as_one_slice_with_readiness_and_hostnames() -> None:
    s = parse_endpoints(v1_endpoints("db", [("10.244.1.5", "db-0")],
                                     [("10.244.1.6", "db-1")]))
    assert s.service_name == "db" and s.name == "db"
    assert [(e.addresses, e.ready, e.hostname) for e in s.endpoints] == [
        (("10.244.1.5",), True, "db-0"), (("10.244.1.6",), False, "db-1")]
    assert [p.name for p in s.ports] == ["grpc", "http"]


# --------------------------------------------------------------------------- answers


def test_before_the_first_remote_sync_only_the_mirrors_answer(index: Index) -> None:
    # The remote-discovery mirror stands for west until west's own pods are known.
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11", "10.96.50.1"}
    index.apply([RemoteStatus("west", RemoteState.CONNECTING, "", "s")])
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11", "10.96.50.1"}


def test_remote_pods_answer_by_their_own_addresses_and_replace_the_mirror(index: Index) -> None:
    west_synced(index)
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11", "10.244.1.5"}  # db-1 not ready
    assert addrs(index, "db-0.west.db.data.svc-global") == {"10.244.1.5"}
    assert ask(index, "db-1.west.db.data.svc-global").rcode() == dns.rcode.NXDOMAIN
    srv = ask(index, "_grpc._tcp.db.data.svc-global", "SRV")
    targets = sorted(rd.target.to_text() for rrset in srv.answer for rd in rrset)
    assert targets == ["db-0.east.db.data.svc-global.", "db-0.west.db.data.svc-global.",
                       "db-1.east.db.data.svc-global."]
    glue = {rrset.name.to_text(): {rd.to_text() for rd in rrset} for rrset in srv.additional
            if rrset.rdtype == 1}
    assert glue["db-0.west.db.data.svc-global."] == {"10.244.1.5"}
    gs = index.global_services[("data", "db")]
    left_out = [(m.cluster, m.exclusion.value if m.exclusion else None) for m in gs.excluded]
    assert left_out == [("west", "served-flat")]
    assert index.counts.member_counts()[("west", True)] == 1
    assert index.counts.member_counts()[("west", False)] == 1


def test_a_hostname_less_endpoint_is_named_by_its_dashed_address(index: Index) -> None:
    west_synced(index, [service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
                        endpoint_slice("db-1", "db", [endpoint("10.244.1.5", pod="db-0")]),
                        endpoint_slice("db-2", "db", [endpoint("fd00::5")],
                                       address_type="IPv6")])
    assert addrs(index, "10-244-1-5.west.db.data.svc-global") == {"10.244.1.5"}
    assert addrs(index, "fd00--5.west.db.data.svc-global", "AAAA") == {"fd00::5"}
    assert "fd00::5" in addrs(index, DB, "AAAA")


def test_publish_not_ready_and_local_first_priorities_apply_to_remote_pods() -> None:
    idx = reported_index(zone=ZoneOptions(publish_not_ready=True, srv_priority="local-first"))
    idx.apply([Replace(ALL, local_records()), Synced()])
    west_synced(idx)
    assert addrs(idx, "db-1.west.db.data.svc-global") == {"10.244.1.6"}
    srv = ask(idx, "_grpc._tcp.db.data.svc-global", "SRV")
    prio = {rd.target.to_text(): rd.priority for rrset in srv.answer for rd in rrset}
    assert prio["db-0.east.db.data.svc-global."] == 0
    assert prio["db-0.west.db.data.svc-global."] > 0


def test_mcs_names_include_remote_pods() -> None:
    idx = reported_index(mcs=("clusterset.local.",))
    idx.apply([Replace(ALL, local_records()), Synced()])
    west_synced(idx)
    assert addrs(idx, "db-0.west.db.data.svc.clusterset.local") == {"10.244.1.5"}
    assert "10.244.1.5" in addrs(idx, "db.data.svc.clusterset.local")


def test_a_global_service_may_exist_through_remote_pods_alone(index: Index) -> None:
    assert ask(index, "cache.data.svc-global").rcode() == dns.rcode.NXDOMAIN
    west_synced(index, [*west_objects(), service("cache", labels=dict(REMOTE_DISCOVERY_LABELS)),
                        endpoint_slice("cache-1", "cache", [endpoint("10.244.2.1", "cache-0")])])
    assert addrs(index, "cache.data.svc-global") == {"10.244.2.1"}


def test_remote_changes_follow_and_an_unselected_service_goes(index: Index) -> None:
    west_synced(index)
    index.apply([Remote("west", Upsert(parse_slice(endpoint_slice(
        "db-x1y2z", "db", [endpoint("10.244.1.5", "db-0"), endpoint("10.244.1.6", "db-1")]))))])
    assert {"10.244.1.5", "10.244.1.6"} <= addrs(index, DB)
    index.apply([Remote("west", Delete(Kind.SERVICE, "data", "db"))])  # label removed
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11", "10.96.50.1"}  # the mirror again


def gauge(name: str, cluster: str) -> float | None:
    """The series as /metrics exports it (None when it does not exist: reading it through
    ``.labels()`` would create it at 0 and hide a missing ``set``)."""
    return metrics.REGISTRY.get_sample_value(name, {"cluster": cluster})


def test_a_lost_remote_keeps_its_members_and_says_so_once(
        index: Index, caplog: pytest.LogCaptureFixture) -> None:
    west_synced(index)
    caplog.set_level(logging.INFO, "dnsside.index")
    metrics.REMOTE_SYNCED.labels(cluster="west").set(-1)  # a value no state gives
    for detail in ("watch services failed (connection)", "watch endpointslices failed"):
        index.apply([RemoteStatus("west", RemoteState.LOST, detail, "ns/s")])
    assert "10.244.1.5" in addrs(index, DB)
    lost = [r for r in caplog.records if "its API is lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING
    assert gauge("dnsside_remote_synced", "west") == 0
    index.apply([RemoteStatus("west", RemoteState.SYNCED, "", "ns/s")])
    assert gauge("dnsside_remote_synced", "west") == 1
    assert any("watched directly again" in r.getMessage() for r in caplog.records)


def test_credentials_trouble_is_one_warning_and_a_metric(
        index: Index, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "dnsside.index")
    metrics.REMOTE_CREDENTIALS_VALID.labels(cluster="west").set(-1)  # a value no state gives
    for _ in range(3):
        index.apply([RemoteStatus("west", RemoteState.CREDENTIALS,
                                  "Secret linkerd-multicluster/cluster-credentials-west does "
                                  "not exist", "linkerd-multicluster/cluster-credentials-west")])
    told = [r for r in caplog.records if "cannot use Secret" in r.getMessage()]
    assert len(told) == 1
    assert "linkerd-multicluster/cluster-credentials-west does not exist" in told[0].getMessage()
    assert gauge("dnsside_remote_credentials_valid", "west") == 0
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11", "10.96.50.1"}  # nothing else moved


def test_a_deleted_link_removes_its_members_at_once_and_late_events_are_ignored(
        index: Index) -> None:
    west_synced(index)
    index.apply([Delete(Kind.LINK, "linkerd-multicluster", "west")])
    # Its mirror is an orphan now, and its pods are gone with the Link.
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11"}
    assert "west" not in index.flat.clusters and "west" not in index.flat.status
    index.apply([Remote("west", Upsert(parse_slice(endpoint_slice(
        "db-x1y2z", "db", [endpoint("10.244.1.7", "db-2")]))))])
    assert addrs(index, DB) == {"10.42.0.10", "10.42.0.11"}
    exported = {labels["cluster"] for m in metrics.REGISTRY.collect()
                if m.name == "dnsside_remote_synced" for _, labels, _ in
                ((s.name, s.labels, s.value) for s in m.samples)}
    assert "west" not in exported  # its series went with it


def test_explain_says_flat_network_and_the_watch_state(index: Index) -> None:
    west_synced(index)
    report = Explainer(index).explain(DB)
    west = [m for m in report["members"] if m["cluster"] == "west"]
    served = next(m for m in west if m["status"] == "in the answer")
    assert served["via"] == "flat network (pod IP)"
    assert served["from"] == "EndpointSlice data/db-x1y2z in cluster west"
    mirror = next(m for m in west if m["hostname"] is None)
    assert "served by their own addresses on the flat network" in mirror["status"]
    assert report["flat_network"]["west"].startswith("synced (Secret linkerd-multicluster/")
    text = render(report)
    assert "Flat network:    cluster west: synced" in text
    assert "flat network (pod IP)" in text


def test_link_record_defaults_keep_the_file_source_working() -> None:
    assert LinkRecord("ns", "l", "west", "/ready").remote_selector.matches({}) is False


def test_per_pod_mirrors_of_a_cluster_served_directly_are_left_out_too() -> None:
    from testkit import topology as t

    idx = reported_index()
    gateway_mode = [parse_object(o) for o in t.headless_link(
        "data", "db", "west", {"db-0": ["10.96.88.12"], "db-1": ["10.96.88.13"]},
        [("grpc", 26257), ("http", 8080)])]
    idx.apply([Replace(ALL, (*local_records(), *(r for r in gateway_mode if r))), Synced()])
    assert {"10.96.88.12", "10.96.88.13"} <= addrs(idx, DB)
    west_synced(idx)
    assert addrs(idx, DB) == {"10.42.0.10", "10.42.0.11", "10.244.1.5"}
    assert addrs(idx, "db-0.west.db.data.svc-global") == {"10.244.1.5"}
    left_out = {m.source for m in idx.global_services[("data", "db")].excluded
                if m.exclusion is Exclusion.SERVED_FLAT}
    # (gateway mode's root mirror `db-west` took the remote-discovery mirror's name: it
    # is never a member itself)
    assert left_out == {"db-0-west", "db-1-west"}


def test_the_gateway_probe_does_not_apply_to_pods_served_directly(index: Index) -> None:
    west_synced(index)
    index.apply([GatewayState("west", Gateway.FAILING, "connection refused")])
    assert "10.244.1.5" in addrs(index, DB)
    member = next(m for m in index.global_services[("data", "db")].members
                  if m.cluster == "west" and m.hostname == "db-0")
    assert member.ready and not member.via.through_gateway
