"""Linkerd's lifecycle in the index, without sockets: Links, orphans, failing gateways,
federated members, name clashes and the configuration warnings."""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from typing import Any, get_args, get_type_hints

import dns.message
import dns.rcode
import pytest
import yaml

from dnsside.core.diagnosis import Exclusion, Notice
from dnsside.core.index import HANDLERS, Index, IndexOptions
from dnsside.core.links import TRANSITIONS, LinkInput, LinkPhase, Links
from dnsside.core.store import OBJECT_EVENTS
from dnsside.dns.zone import ZoneOptions
from dnsside.model.events import (
    Delete,
    Event,
    Gateway,
    GatewayState,
    Kind,
    LinksUnavailable,
    LinkWatch,
    Remote,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import (
    LinkRecord,
    Record,
    ServiceRecord,
    SliceRecord,
    parse_object,
)
from dnsside.model.probes import probe_targets
from dnsside.serving.reporting import IndexReporter
from dnsside.telemetry import metrics
from testkit.inprocess import ask_name, empty_index
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

ALL = frozenset({Kind.SERVICE, Kind.SLICE, Kind.LINK})
ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]
NGINX = "nginx-svc.default.svc-global"
WEST_NGINX = {"10.43.179.60", "10.43.218.18", "10.43.245.244"}


def records(*, links: bool = True) -> tuple[Record, ...]:
    out = []
    for o in ITEMS:
        r = parse_object(o)
        assert r is not None
        if links or not isinstance(r, LinkRecord):
            out.append(r)
    return tuple(out)


def link(name: str) -> LinkRecord:
    found = next(r for r in records() if isinstance(r, LinkRecord) and r.name == name)
    assert isinstance(found, LinkRecord)
    return found


def reported_index(cluster_name: str = "east", **options: Any) -> Index:
    # With the server's reporter: these tests read its log lines and metrics too.
    return empty_index(IndexOptions(cluster_name=cluster_name, **options),
                       observer=IndexReporter())


# Every question over TCP: the whole answer, never truncated.
ask = functools.partial(ask_name, transport="tcp")


@pytest.fixture
def index() -> Index:
    idx = reported_index()
    idx.apply([Replace(ALL, records()), Synced()])
    return idx


def addrs(idx: Index, name: str) -> set[str]:
    return {rd.to_text() for rrset in ask(idx, name).answer for rd in rrset}


def srv_targets(idx: Index, name: str) -> list[str]:
    return sorted(rd.target.to_text() for rrset in ask(idx, name, "SRV").answer for rd in rrset)


def gauge(name: str, **labels: str) -> float | None:
    value = metrics.REGISTRY.get_sample_value(name, labels or None)
    return value


# --------------------------------------------------------------------------- Links and orphans


def test_orphaned_cluster_is_in_no_answer_and_counted(index: Index) -> None:
    assert "10.45.0.10" not in addrs(index, NGINX)
    assert ask(index, "old.nginx-svc.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    assert ask(index, "nginx-set-0.old.nginx-svc.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    assert not any(".old." in t for t in srv_targets(index, "_http._tcp." + NGINX))
    assert gauge("dnsside_orphaned_mirrors", cluster="old") == 1
    assert gauge("dnsside_links_readable") == 1


def test_orphans_stay_out_even_with_publish_not_ready() -> None:
    """An orphan keeps Linkerd's readiness (ready: its mirror still says so), and neither
    that nor --publish-not-ready puts it back in an answer."""
    idx = reported_index(zone=ZoneOptions(publish_not_ready=True))
    idx.apply([Replace(ALL, records()), Synced()])
    assert "10.45.0.10" not in addrs(idx, NGINX)
    assert ask(idx, "nginx-set-0.old.nginx-svc.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    gs = idx.assemble(("default", "nginx-svc"))
    assert gs is not None
    assert [(m.cluster, m.ready) for m in gs.excluded] == [("old", True)]


def test_link_deleted_then_recreated(index: Index, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dnsside.index")
    west = link("west")
    changed = index.apply([Delete(Kind.LINK, west.namespace, west.name)])
    # Everything with a west mirror was rebuilt, nothing else.
    assert changed == {("default", "nginx-svc"), ("db", "cockroachdb"), ("default", "web")}
    assert not WEST_NGINX & addrs(index, NGINX)
    assert ask(index, "west.web.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    assert gauge("dnsside_orphaned_mirrors", cluster="west") == 7  # 3 nginx, 3 cockroach, web
    orphan_lines = [r.getMessage() for r in caplog.records if "orphans" in r.getMessage()]
    assert len(orphan_lines) == 1 and orphan_lines[0].startswith("cluster west: 7 mirrors")
    assert "link west gone" in caplog.text
    index.apply([Upsert(west)])
    assert WEST_NGINX <= addrs(index, NGINX)
    assert gauge("dnsside_orphaned_mirrors", cluster="west") == 0
    # An unrelated change never logs the orphans again.
    index.apply([Delete(Kind.LINK, west.namespace, west.name)])
    index.apply([Upsert(west)])
    assert len([r for r in caplog.records if "cluster west: 7 mirrors" in r.getMessage()]) == 2


def test_link_by_target_cluster_name_not_by_its_own_name(index: Index) -> None:
    west = link("west")
    renamed = LinkRecord(west.namespace, "hand-written", "west", "/ready")
    index.apply([Delete(Kind.LINK, west.namespace, west.name), Upsert(renamed)])
    assert WEST_NGINX <= addrs(index, NGINX)


def test_links_never_listed_filter_nothing_and_never_empty_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dnsside.index")
    idx = reported_index()
    idx.apply([Replace(ALL - {Kind.LINK}, records(links=False)),
               LinksUnavailable("cannot list Links (v1alpha3): forbidden"), Synced()])
    assert "10.45.0.10" in addrs(idx, NGINX)  # the orphan is served: nothing is filtered
    assert addrs(idx, NGINX) >= WEST_NGINX
    assert gauge("dnsside_links_readable") == 0
    assert "Links cannot be read: cannot list Links (v1alpha3): forbidden" in caplog.text
    assert "cannot be read" in idx.links.describe()
    # A synced Link view filters.
    idx.apply([Replace(frozenset({Kind.LINK}), tuple(r for r in records()
                                                     if isinstance(r, LinkRecord)))])
    assert "10.45.0.10" not in addrs(idx, NGINX)
    assert gauge("dnsside_links_readable") == 1


def test_a_listed_link_set_stands_through_every_fault(
    index: Index, caplog: pytest.LogCaptureFixture
) -> None:
    """Once listed, Links change only by a newer complete list or a watch event: a watch
    that fails, a 403 that appears later, a relist that keeps failing change nothing."""
    caplog.set_level(logging.INFO, logger="dnsside.index")
    west = link("west")
    index.apply([Delete(Kind.LINK, west.namespace, west.name)])  # unlinked, mirrors stay
    unlinked = addrs(index, NGINX)
    assert not unlinked & WEST_NGINX
    assert ask(index, "nginx-set-0.west.nginx-svc.default.svc-global").rcode() == (
        dns.rcode.NXDOMAIN)
    for fault in (LinkWatch("watch links failed (http-500): injected failure"),
                  LinkWatch("410 Expired: relisting Links"),
                  LinksUnavailable("watching Links failed: HTTP 403 Forbidden"),
                  LinksUnavailable("cannot list Links (v1alpha3): forbidden")):
        assert index.apply([fault]) == set()
        assert addrs(index, NGINX) == unlinked
        assert ask(index, "nginx-set-0.west.nginx-svc.default.svc-global").rcode() == (
            dns.rcode.NXDOMAIN)
        assert index.links.linked() == {"north", "south"}
        assert gauge("dnsside_links_readable") == 1
        assert gauge("dnsside_links_watch_up") == 0
    down = [r.getMessage() for r in caplog.records if "Link watch down" in r.getMessage()]
    assert len(down) == 1 and "the last complete list of 2 Links (north, south) stands" in down[0]
    described = index.links.describe(now=index.links.complete_at + 42)
    assert "the Link watch is down (cannot list Links (v1alpha3): forbidden)" in described
    assert "last known complete 42 s ago stands" in described
    # The relist that finally succeeds is the truth, and applies what changed meanwhile:
    # south was unlinked while the watch was down, west linked again.
    links = tuple(r for r in records() if isinstance(r, LinkRecord) and r.name != "south")
    index.apply([Replace(frozenset({Kind.LINK}), links)])
    assert index.links.linked() == {"west", "north"}
    assert addrs(index, NGINX) >= WEST_NGINX
    assert ask(index, "kafka.db.svc-global").rcode() == dns.rcode.NOERROR
    assert gauge("dnsside_links_watch_up") == 1
    assert index.links.describe() == "2 read (north, west)"
    # A watch event says the watch follows again, too.
    index.apply([LinkWatch("watch links failed (dropped)")])
    index.apply([Upsert(link("south"))])
    assert gauge("dnsside_links_watch_up") == 1 and "down" not in index.links.describe()


def test_a_dump_without_links_filters_nothing() -> None:
    idx = reported_index()
    idx.apply([Replace(ALL - {Kind.LINK}, records(links=False)),
               LinksUnavailable("the file has no Link objects"), Synced()])
    assert "10.45.0.10" in addrs(idx, NGINX)
    assert idx.links.linked() is None


def test_no_link_at_all_leaves_only_the_local_cluster() -> None:
    idx = reported_index()
    idx.apply([Replace(ALL, records(links=False)), Synced()])
    assert addrs(idx, NGINX) == {"10.42.1.10", "10.42.1.11"}
    assert ask(idx, "payments.default.svc-global").rcode() == dns.rcode.NOERROR  # federated


# --------------------------------------------------------------------------- gateway probe


def test_failing_gateway_leaves_every_answer_and_comes_back(index: Index) -> None:
    serial = index.publisher.serial
    index.apply([GatewayState("west", Gateway.ALIVE)])
    assert index.publisher.serial == serial  # alive changes nothing Linkerd did not say
    index.apply([GatewayState("west", Gateway.FAILING, "connection refused")])
    assert not WEST_NGINX & addrs(index, NGINX)
    assert not any(".west." in t for t in srv_targets(index, "_http._tcp." + NGINX))
    assert ask(index, "nginx-set-0.west.nginx-svc.default.svc-global").rcode() == (
        dns.rcode.NXDOMAIN)
    web = addrs(index, "web.default.svc-global")
    assert "10.43.100.7" not in web  # west's gateway-mode mirror
    # Remote-discovery, federated and local members never move.
    assert {"10.43.100.8", "10.43.100.9", "10.43.0.50"} <= web
    assert {"10.42.1.10", "10.42.1.11"} <= addrs(index, NGINX)
    index.apply([GatewayState("west", Gateway.ALIVE)])
    assert WEST_NGINX <= addrs(index, NGINX)
    assert "10.43.100.7" in addrs(index, "web.default.svc-global")


def test_never_answered_gateway_is_not_acted_on(index: Index) -> None:
    before = {name: addrs(index, name) for name in (NGINX, "kafka.db.svc-global")}
    changed = index.apply([GatewayState("south", Gateway.UNREACHED, "timed out"),
                           GatewayState("west", Gateway.UNREACHED, "timed out")])
    assert changed == set()
    assert {name: addrs(index, name) for name in before} == before
    assert index.gateways["south"] == (Gateway.UNREACHED, "timed out")
    index.apply([GatewayState("south", None)])  # no longer probed
    assert "south" not in index.gateways


def probed(index: Index) -> dict[str, str]:
    """Where the server's prober probes: the rule over what the index's view shows."""
    return probe_targets(index.local.probe_services(), index.links.values(),
                         index.links.linked())


def test_probe_targets_follow_links_and_probe_services(index: Index) -> None:
    assert probed(index) == {
        "west": "http://10.43.200.11:4191/ready",
        "north": "http://10.43.200.10:4191/ready",
        "south": "http://10.43.200.12:4191/ready",
    }
    west = link("west")
    index.apply([Upsert(LinkRecord(west.namespace, west.name, "west", "/live"))])
    assert probed(index)["west"] == "http://10.43.200.11:4191/live"
    index.apply([Delete(Kind.LINK, west.namespace, west.name)])
    assert "west" not in probed(index)  # an unlinked cluster is not probed
    index.apply([Delete(Kind.SERVICE, "linkerd-multicluster", "probe-north")])
    assert set(probed(index)) == {"south"}
    index.apply([LinksUnavailable("forbidden")])  # listed before: the list stands
    assert set(probed(index)) == {"south"}
    never = reported_index()  # never listed: every probe Service (answers only get shorter)
    never.apply([Replace(ALL - {Kind.LINK}, records(links=False)),
                 LinksUnavailable("forbidden"), Synced()])
    assert set(probed(never)) == {"west", "north", "south"}


# --------------------------------------------------------------------------- federated


def test_federated_members_and_no_federated() -> None:
    with_fed = reported_index()
    with_fed.apply([Replace(ALL, records()), Synced()])
    assert addrs(with_fed, "payments.default.svc-global") == {"10.43.100.20"}
    assert addrs(with_fed, "federated.web.default.svc-global") == {"10.43.100.9"}
    without = reported_index(include_federated=False)
    without.apply([Replace(ALL, records()), Synced()])
    assert ask(without, "payments.default.svc-global").rcode() == dns.rcode.NXDOMAIN
    assert "10.43.100.9" not in addrs(without, "web.default.svc-global")


# --------------------------------------------------------------------------- mistakes


def test_cluster_name_clash_one_record_per_name(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dnsside.index")
    idx = reported_index(cluster_name="west")
    idx.apply([Replace(ALL, records()), Synced()])
    targets = srv_targets(idx, "_http._tcp." + NGINX)
    assert len(targets) == len(set(targets)) == 3  # west's nginx-set-0/1 are the local pods
    assert addrs(idx, "nginx-set-0.west.nginx-svc.default.svc-global") == {"10.42.1.10"}
    # The glue agrees with the answer.
    srv = ask(idx, "_http._tcp." + NGINX, "SRV")
    glue = {(rrset.name.to_text(), rd.to_text()) for rrset in srv.additional for rd in rrset}
    assert ("nginx-set-0.west." + NGINX + ".", "10.42.1.10") in glue
    assert ("nginx-set-0.west." + NGINX + ".", "10.43.179.60") not in glue
    assert "cluster-name-clash" in idx.warnings
    assert gauge("dnsside_config_warning", warning="cluster-name-clash") == 1
    # nginx-set-0/1, cockroachdb-0/1/2 and web's cluster-level member lost to local ones.
    assert gauge("dnsside_name_clashes", cluster="west") == 6
    assert "--cluster-name west is also the cluster name of mirrors" in caplog.text
    assert any(r.getMessage().startswith("cluster west: 6 members have the name of a local")
               for r in caplog.records)


def test_default_cluster_name_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dnsside.index")
    idx = reported_index(cluster_name="local")
    idx.apply([Replace(ALL, records()), Synced()])
    assert "default-cluster-name" in idx.warnings
    assert gauge("dnsside_config_warning", warning="default-cluster-name") == 1
    assert "--cluster-name is still the default 'local'" in caplog.text
    fine = reported_index()
    fine.apply([Replace(ALL, records()), Synced()])
    assert fine.warnings == {}
    assert gauge("dnsside_config_warning", warning="default-cluster-name") == 0


def test_mirrors_without_any_slice_warn() -> None:
    mirror_slices = {r.name for r in records() if isinstance(r, SliceRecord) and any(
        isinstance(s, ServiceRecord) and s.name == r.service_name and s.cluster
        for s in records())}
    without = tuple(r for r in records() if not (isinstance(r, SliceRecord)
                                                  and r.name in mirror_slices))
    idx = reported_index()
    idx.apply([Replace(ALL, without), Synced()])
    assert "no-mirror-slices" in idx.warnings
    assert "EndpointSliceMirroring controller off" in idx.warnings["no-mirror-slices"]
    # Every gateway-routed member is then not ready: only local, remote-discovery and
    # federated members answer.
    assert addrs(idx, "web.default.svc-global") == {"10.43.0.50", "10.43.100.8", "10.43.100.9"}


def test_a_gone_cluster_leaves_no_counts_or_label_sets(index: Index) -> None:
    """A cluster that comes and goes (Link deleted, then its mirrors) leaves no
    key in the index's counters and no series in the per-cluster gauges, so clusters and
    Links churned for weeks cost nothing once gone; a cluster still known keeps its series
    (test_link_deleted_then_recreated)."""
    west = link("west")
    assert gauge("dnsside_members", cluster="west", ready="true")
    index.apply([Delete(Kind.LINK, west.namespace, west.name)])
    assert gauge("dnsside_orphaned_mirrors", cluster="west") == 7
    assert not gauge("dnsside_members", cluster="west", ready="true")
    mirrors = [r for r in records() if isinstance(r, ServiceRecord) and r.cluster == "west"]
    assert mirrors
    index.apply([Delete(Kind.SERVICE, r.namespace, r.name) for r in mirrors])
    assert gauge("dnsside_orphaned_mirrors", cluster="west") is None
    assert gauge("dnsside_members", cluster="west", ready="true") is None
    assert "west" not in {c for c, _ in index.counts.member_counts()}
    assert "west" not in index.counts.exclusion_counts(Exclusion.ORPHANED)
    assert "west" not in index.counts.exclusion_counts(Exclusion.NAME_CLASH)
    assert gauge("dnsside_members", cluster="north", ready="false") == 5  # others untouched
    index.apply([Upsert(west), *(Upsert(r) for r in mirrors)])
    assert gauge("dnsside_members", cluster="west", ready="true")
    assert not gauge("dnsside_orphaned_mirrors", cluster="west")


def test_every_link_phase_has_a_move_for_every_input() -> None:
    """The Link state machine is total: no (phase, input) pair is left to chance."""
    assert set(TRANSITIONS) == {(p, i) for p in LinkPhase for i in LinkInput}


def test_every_event_type_has_its_handler() -> None:
    """Dispatched once, by the table: one handler per type (none dispatching again on the
    type), and a linked cluster's object event by its own table."""
    assert set(HANDLERS) == set(get_args(Event))
    assert len(set(HANDLERS.values())) == len(HANDLERS), HANDLERS
    assert set(OBJECT_EVENTS) == set(get_args(get_type_hints(Remote)["event"]))


def test_links_tell_each_change_once() -> None:
    links = Links("linkerd-multicluster", lambda: 1000.0)  # the clock is the caller's
    told = links.unavailable("403")
    assert told is not None and told.notice is Notice.LINKS_UNREADABLE
    assert links.unavailable("403") is None  # the same reason: told already
    assert links.watch("a watch error") is None  # before a list the watch means nothing
    assert links.describe() == "cannot be read (403): orphaned mirrors are not filtered"
    told = links.unavailable("no CRD")
    assert told is not None and told.text.startswith("Links cannot be read: no CRD;")
    assert links.describe() == "cannot be read (no CRD): orphaned mirrors are not filtered"
    links.replace([])
    told = links.listed()
    assert told is not None and told.notice is Notice.LINKS_READABLE and links.readable
    told = links.watch("timeout")
    assert told is not None and told.notice is Notice.LINK_WATCH_DOWN
    assert links.unavailable("500") is None and links.watch_down == "500"  # the newest reason
    told = links.watch("")
    assert told is not None and told.notice is Notice.LINK_WATCH_UP
    assert links.phase is LinkPhase.FOLLOWING and not links.watch_down


# --------------------------------------------------------------------------- which Links count


def refusals(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and text in r.getMessage()]


def test_a_link_outside_the_links_namespace_counts_for_nothing(
        index: Index, caplog: pytest.LogCaptureFixture) -> None:
    """A dump (or any source) holding a Link elsewhere: it un-orphans nothing, steals no
    cluster, and is told once, counted and explained."""
    caplog.set_level(logging.INFO, logger="dnsside.index")
    assert "10.45.0.10" not in addrs(index, NGINX)  # cluster old's orphan
    west = link("west")
    shadows = [LinkRecord("aaa", "old-shadow", "old", "/ready", created="2020-01-01T00:00:00Z"),
               replace(west, namespace="aaa", name="west-shadow", probe_path="/evil",
                       created="2020-01-01T00:00:00Z")]
    for shadow in shadows:
        index.apply([Upsert(shadow)])
    assert "10.45.0.10" not in addrs(index, NGINX)
    assert probed(index)["west"].endswith("/ready")
    assert [lk.name for lk in index.links.values() if lk.target_cluster == "west"] == ["west"]
    index.apply([Upsert(west)])  # an unrelated change: told again never
    told = refusals(caplog, "is ignored: only Links in linkerd-multicluster")
    assert [t.split(" (")[0] for t in told] == ["Link aaa/old-shadow", "Link aaa/west-shadow"]
    assert gauge("dnsside_links_refused", reason="outside-namespace") == 2
    assert "Link aaa/west-shadow (cluster west) is ignored" in index.links.describe()
    index.apply([Delete(Kind.LINK, "aaa", "old-shadow")])
    assert gauge("dnsside_links_refused", reason="outside-namespace") == 1


def test_a_second_link_for_a_cluster_is_refused_and_the_first_keeps_it(
        index: Index, caplog: pytest.LogCaptureFixture) -> None:
    """Of two Links in the links namespace for one cluster, the one created first keeps it
    (then by name): a newer one never takes it, whatever its name, through updates of
    either and a full relist (a restart)."""
    caplog.set_level(logging.INFO, logger="dnsside.index")
    west = link("west")
    newer = replace(west, name="zzz-west", probe_path="/evil", created="2026-11-02T00:00:00Z")
    older_by_name = replace(west, name="aaa-west", probe_path="/evil-too")
    index.apply([Upsert(newer)])
    assert probed(index)["west"].endswith("/ready")
    index.apply([Upsert(replace(west, gateway_address="172.18.0.9"))])  # the first, updated
    assert probed(index)["west"].endswith("/ready")
    told = refusals(caplog, "Link linkerd-multicluster/zzz-west is refused")
    assert len(told) == 1, told
    assert "cluster west is linked by Link linkerd-multicluster/west, created first" in told[0]
    assert gauge("dnsside_links_refused", reason="duplicate") == 1
    # The same age: the name decides, so it is the same after a restart too.
    index.apply([Upsert(older_by_name)])
    assert probed(index)["west"].endswith("/evil-too")
    told = refusals(caplog, "Link linkerd-multicluster/west is refused: cluster west is "
                    "linked by Link linkerd-multicluster/aaa-west")
    assert len(told) == 1, told
    again = reported_index()
    again.apply([Replace(ALL, (*records(), newer, older_by_name)), Synced()])
    assert probed(again) == probed(index)
    assert WEST_NGINX <= addrs(index, NGINX)
