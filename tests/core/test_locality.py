"""--locality and dnsside.io/locality: every move of a global service's own name, in both
zones, with the index applying events as a source sends them (no sockets)."""

from __future__ import annotations

import copy
import json

import dns.message
import dns.rdatatype
import pytest

from dnsside.core.diagnosis import Notice, Told
from dnsside.core.explain import Explainer, render
from dnsside.core.index import Index, IndexOptions, IndexReport
from dnsside.core.locality import Spill
from dnsside.core.view import ReportView
from dnsside.dns.zone import ZoneOptions
from dnsside.model.events import Delete, Kind, Upsert
from dnsside.model.linkerd import LOCALITY, parse_object
from dnsside.model.locality import Locality
from dnsside.serving.reporting import IndexReporter
from dnsside.telemetry import metrics
from testkit.inprocess import ask_name, synced_index
from tests.core.test_index import ITEMS, obj, rec

pytestmark = pytest.mark.quick

ALL = frozenset({Kind.SERVICE, Kind.SLICE, Kind.LINK})
MCS = "clusterset.local."
EAST = ["10.42.1.10", "10.42.1.11"]  # nginx-svc's local pods (cluster east)
WEST = ["10.43.179.60", "10.43.218.18", "10.43.245.244"]  # its ready pods in west
# The service's own names in each zone: (A name, SRV name, the zone's pod-name suffix).
ZONES = {
    "svc-global": ("nginx-svc.default.svc-global", "_http._tcp.nginx-svc.default.svc-global",
                   "nginx-svc.default.svc-global."),
    "mcs": ("nginx-svc.default.svc.clusterset.local",
            "_http._tcp.nginx-svc.default.svc.clusterset.local",
            "nginx-svc.default.svc.clusterset.local."),
}


class Heard:
    """The index's observer: what it told, and the reporter's gauges kept in step."""

    def __init__(self) -> None:
        self.told: list[Told] = []
        self.reporter = IndexReporter()

    def __call__(self, view: ReportView, report: IndexReport) -> None:
        self.told.extend(report.told)
        self.reporter(view, report)

    def of(self, notice: Notice) -> list[str]:
        return [t.text for t in self.told if t.notice is notice]


def demo_index(locality: Locality = Locality.LOCAL_FIRST, srv_priority: str = "equal",
               heard: Heard | None = None) -> Index:
    """The demo under ``locality`` and ``srv_priority``, in both zones."""
    options = IndexOptions(cluster_name="east", locality=locality,
                           zone=ZoneOptions(srv_priority=srv_priority))
    return synced_index((rec(o) for o in ITEMS), options, kinds=ALL, mcs_zones=[MCS],
                        observer=heard)


def addrs(idx: Index, name: str) -> list[str]:
    return sorted(rd.to_text() for rrset in ask_name(idx, name).answer for rd in rrset)


def srv(idx: Index, name: str) -> list[tuple[int, str]]:
    """(priority, target) of every SRV record, sorted (rotation may change the order)."""
    return sorted((rd.priority, rd.target.to_text())
                  for rrset in ask_name(idx, name, "SRV").answer
                  for rd in rrset if rd.rdtype == dns.rdatatype.SRV)


def local_ready(idx: Index, *ready: bool) -> None:
    """Set the readiness of nginx-svc's local endpoints (nginx-set-0, nginx-set-1)."""
    o = obj("nginx-svc-b060a")
    for endpoint, value in zip(o["endpoints"], ready, strict=True):
        endpoint["conditions"]["ready"] = value
    idx.apply([Upsert(rec(o))])


def annotate(idx: Index, value: str | None, name: str = "nginx-svc") -> None:
    """Set (None: remove) dnsside.io/locality on a Service of the demo."""
    o = obj(name)
    annotations = o["metadata"].setdefault("annotations", {})
    if value is None:
        annotations.pop(LOCALITY, None)
    else:
        annotations[LOCALITY] = value
    idx.apply([Upsert(rec(o))])


def hosts(zone_suffix: str, cluster: str, *pods: int) -> list[tuple[int, str]]:
    return [(0, f"nginx-set-{i}.{cluster}.{zone_suffix}") for i in pods]


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_local_first_moves_with_the_local_members(zone: str) -> None:
    """Local only while one is ready; every cluster once none is; local again when one is."""
    name, srv_name, suffix = ZONES[zone]
    idx = demo_index()
    assert addrs(idx, name) == EAST
    assert srv(idx, srv_name) == hosts(suffix, "east", 0, 1)

    local_ready(idx, False, False)  # the last local member goes unready: every cluster
    assert addrs(idx, name) == WEST
    assert srv(idx, srv_name) == sorted(hosts(suffix, "west", 0, 1, 2))

    local_ready(idx, False, True)  # one is ready again: local only, just that one
    assert addrs(idx, name) == ["10.42.1.11"]
    assert srv(idx, srv_name) == hosts(suffix, "east", 1)


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_local_service_deleted_and_back(zone: str) -> None:
    name, srv_name, suffix = ZONES[zone]
    idx = demo_index()
    idx.apply([Delete(Kind.SERVICE, "default", "nginx-svc")])
    assert addrs(idx, name) == WEST
    assert srv(idx, srv_name) == sorted(hosts(suffix, "west", 0, 1, 2))
    idx.apply([Upsert(rec(obj("nginx-svc")))])
    assert addrs(idx, name) == EAST


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_per_cluster_and_per_pod_names_are_never_filtered(zone: str) -> None:
    name, _, suffix = ZONES[zone]
    idx = demo_index()
    assert addrs(idx, name) == EAST
    assert addrs(idx, f"nginx-set-0.west.{suffix}") == ["10.43.179.60"]
    if zone == "svc-global":  # KEP-1645 has no per-cluster names
        assert addrs(idx, f"west.{suffix}") == WEST


def test_all_answers_every_cluster_whatever_the_local_members() -> None:
    idx = demo_index(Locality.ALL)
    for zone in ZONES.values():
        assert addrs(idx, zone[0]) == sorted(EAST + WEST)
    local_ready(idx, False, False)
    assert addrs(idx, ZONES["svc-global"][0]) == WEST


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_annotation_added_changed_removed(zone: str) -> None:
    name, srv_name, suffix = ZONES[zone]
    idx = demo_index(Locality.ALL)
    annotate(idx, "local-first")  # added: overrides the flag for this service only
    assert addrs(idx, name) == EAST
    assert srv(idx, srv_name) == hosts(suffix, "east", 0, 1)
    gs = idx.global_services[("default", "nginx-svc")]
    assert (gs.locality, gs.locality_from) == (Locality.LOCAL_FIRST, "annotation")
    assert idx.global_services[("default", "web")].locality is Locality.ALL
    annotate(idx, "all")  # changed
    assert addrs(idx, name) == sorted(EAST + WEST)
    annotate(idx, "local-first")
    annotate(idx, None)  # removed: the flag again
    assert addrs(idx, name) == sorted(EAST + WEST)


def test_annotation_all_overrides_flag_local_first() -> None:
    idx = demo_index(Locality.LOCAL_FIRST)
    annotate(idx, " All ")  # case and blanks aside
    assert addrs(idx, ZONES["svc-global"][0]) == sorted(EAST + WEST)


def test_annotation_on_a_mirror_is_not_read() -> None:
    """Linkerd copies a remote Service's annotations onto its mirrors: only the local
    Service decides for this cluster."""
    o = obj("nginx-set-0-west")
    o["metadata"].setdefault("annotations", {})[LOCALITY] = "local-first"
    record = parse_object(o)
    assert record is not None and getattr(record, "locality") is None
    idx = demo_index(Locality.ALL)
    idx.apply([Upsert(record)])
    assert addrs(idx, ZONES["svc-global"][0]) == sorted(EAST + WEST)


def test_annotation_on_a_linked_clusters_own_service_is_not_kept() -> None:
    """--flat-network: a linked cluster's own Service is served directly; its annotation
    is that cluster's business, not this one's."""
    from dnsside.model.linkerd import parse_remote_service
    from dnsside.model.selectors import LabelSelector

    o = obj("nginx-svc")
    o["metadata"]["annotations"] = {LOCALITY: "local-first"}
    assert getattr(rec(o), "locality") is not None  # the local Service's is read
    record = parse_remote_service(o, "west", "west",
                                  LabelSelector(match_labels=(("app", "nginx"),)))
    assert record is not None and record.locality is None


def test_unknown_value_warns_once_and_the_flag_applies() -> None:
    heard = Heard()
    idx = demo_index(Locality.LOCAL_FIRST, heard=heard)
    annotate(idx, "nearby")
    assert addrs(idx, ZONES["svc-global"][0]) == EAST  # the flag: local-first
    local_ready(idx, True, False)  # more events of the service: no second warning
    annotate(idx, "nearby")
    warnings = heard.of(Notice.LOCALITY_UNKNOWN)
    assert len(warnings) == 1, warnings
    assert "Service default/nginx-svc" in warnings[0] and "'nearby'" in warnings[0]
    assert "--locality local-first applies" in warnings[0]
    assert Notice.LOCALITY_UNKNOWN.warning
    assert metrics.REGISTRY.get_sample_value("dnsside_locality_unknown_annotations") == 1
    annotate(idx, "local-first")
    assert metrics.REGISTRY.get_sample_value("dnsside_locality_unknown_annotations") == 0
    annotate(idx, "far")  # a new unknown value is told again, once
    assert len(heard.of(Notice.LOCALITY_UNKNOWN)) == 2


def spilled_gauge(reason: Spill) -> float | None:
    return metrics.REGISTRY.get_sample_value("dnsside_locality_spilled_services",
                                             {"reason": reason.value})


def test_spill_is_counted_told_and_undone() -> None:
    heard = Heard()
    idx = demo_index(Locality.LOCAL_FIRST, heard=heard)
    # kafka, cockroachdb, web, nginx-svc have a local Service with a ready member;
    # payments runs only in linked clusters (a federated Service).
    assert idx.counts.spilled_counts() == {Spill.NO_LOCAL_SERVICE: 1}
    local_ready(idx, False, False)
    assert idx.counts.spilled_counts() == {Spill.NO_LOCAL_SERVICE: 1, Spill.NO_READY_MEMBER: 1}
    assert spilled_gauge(Spill.NO_READY_MEMBER) == 1
    assert spilled_gauge(Spill.NO_LOCAL_SERVICE) == 1
    spilled = heard.of(Notice.LOCALITY_SPILLED)
    assert spilled == ["global service default/nginx-svc: no local member ready: every "
                       "cluster answers its name until one is (locality local-first)"]
    local_ready(idx, False, False)  # nothing new: told once
    assert len(heard.of(Notice.LOCALITY_SPILLED)) == 1
    local_ready(idx, True, True)
    assert spilled_gauge(Spill.NO_READY_MEMBER) == 0
    back = heard.of(Notice.LOCALITY_LOCAL)
    assert len(back) == 1 and "a local member is ready again" in back[0]


def test_flag_all_counts_nothing_spilled() -> None:
    idx = demo_index(Locality.ALL)
    local_ready(idx, False, False)
    assert not +idx.counts.spilled_counts()


def test_with_srv_priority_local_first() -> None:
    """Under locality local-first the SRV set is the local members while one is ready (all
    priority 0: they are local); once none is, every cluster's, remote ones priority 10."""
    idx = demo_index(Locality.LOCAL_FIRST, srv_priority="local-first")
    _, srv_name, suffix = ZONES["svc-global"]
    assert srv(idx, srv_name) == hosts(suffix, "east", 0, 1)
    local_ready(idx, False, False)
    assert srv(idx, srv_name) == [(10, t) for _, t in sorted(hosts(suffix, "west", 0, 1, 2))]


def test_clusterip_service_and_its_clusterset_ip() -> None:
    """web: a local ClusterIP Service, mirrors and a federated Service. Local-first answers
    the local ClusterIP in both zones while its endpoints are ready."""
    idx = demo_index()
    assert addrs(idx, "web.default.svc-global") == ["10.43.0.50"]
    assert addrs(idx, "web.default.svc.clusterset.local") == ["10.43.0.50"]
    o = obj("web-f9b78")
    o["endpoints"][0]["conditions"]["ready"] = False
    idx.apply([Upsert(rec(o))])
    assert addrs(idx, "web.default.svc-global") == ["10.43.100.7", "10.43.100.8",
                                                    "10.43.100.9"]
    assert addrs(idx, "web.default.svc.clusterset.local") == ["10.43.100.9"]  # federated


def test_explain_names_the_locality_its_source_and_who_answers() -> None:
    idx = demo_index()
    explainer = Explainer(idx)
    report = explainer.explain("nginx-svc.default.svc-global")
    assert report["locality"] == {
        "mode": "local-first", "from": "flag --locality local-first", "answering": ["east"],
        "why": "2 local members ready in east: only the local cluster answers"}
    west = [m for m in report["members"] if m["cluster"] == "west"]
    assert west and all(m["status"].startswith("left out: locality local-first") for m in west)
    text = render(report)
    assert "Locality:        local-first, from flag --locality local-first" in text
    assert "Answering:       east: 2 local members ready in east" in text
    json.dumps(report)  # -o json takes it as is

    local_ready(idx, False, False)
    report = explainer.explain("_http._tcp.nginx-svc.default.svc-global", "SRV")
    assert report["locality"]["answering"] == ["west"]
    assert report["locality"]["why"] == "no local member ready: every cluster answers"

    annotate(idx, "all")
    report = explainer.explain("nginx-svc.default.svc.clusterset.local")
    assert report["locality"]["from"] == "annotation dnsside.io/locality on Service " \
                                         "default/nginx-svc"
    assert report["locality"]["why"] == "every cluster's members answer"

    annotate(idx, "nearby")
    report = explainer.explain("west.nginx-svc.default.svc-global")
    assert "'nearby'" in report["locality"]["from"]
    assert report["locality"]["applies"].startswith("no: this name is one cluster's")
    assert all(m["status"] == "in the answer" for m in report["members"])

    idx.apply([Delete(Kind.SERVICE, "default", "nginx-svc")])
    report = explainer.explain("nginx-svc.default.svc-global")
    assert report["locality"]["why"] == "no local Service: every cluster answers"


def test_a_service_spilled_at_the_initial_sync_is_told() -> None:
    """The initial sync tells no per-service news, but a local-first service that already
    has no ready local member is a state to hear about: told once, as a warning."""
    heard = Heard()
    items = [copy.deepcopy(o) for o in ITEMS]
    for o in items:
        if o["metadata"]["name"] == "nginx-svc-b060a":
            for endpoint in o["endpoints"]:
                endpoint["conditions"]["ready"] = False
    options = IndexOptions(cluster_name="east", locality=Locality.LOCAL_FIRST)
    idx = synced_index((rec(o) for o in items), options, kinds=ALL, observer=heard)
    assert heard.of(Notice.LOCALITY_SPILLED) == [
        "global service default/nginx-svc: no local member ready: every cluster answers its "
        "name until one is (locality local-first)"]
    assert not heard.of(Notice.LOCALITY_NO_LOCAL)  # payments runs elsewhere: no news
    assert addrs(idx, ZONES["svc-global"][0]) == WEST


def test_config_refuses_what_cannot_run() -> None:
    from dnsside.config import Config

    with pytest.raises(ValueError, match="--locality .* --no-local"):
        Config(locality="local-first", no_local=True).check()
    with pytest.raises(ValueError, match=r"--locality \(or DNSSIDE_LOCALITY\) 'nearby'"):
        Config(locality="nearby").check()  # a DNSSIDE_LOCALITY argparse never checked
    Config(locality="local-first").check()
