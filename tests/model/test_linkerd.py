"""The Linkerd data model on the demo topology and on hand-made edge cases, without sockets."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from dnsside.core.assembly import ClusterView, GlobalService, assemble
from dnsside.core.diagnosis import NO_REMOTE_ENDPOINTS, Exclusion
from dnsside.core.members import Member
from dnsside.model.linkerd import (
    FEDERATED_CLUSTER,
    LinkRecord,
    ObjectError,
    Role,
    ServiceRecord,
    SliceRecord,
    Via,
    parse_link,
    parse_object,
    parse_service,
    parse_slice,
)
from dnsside.model.probes import probe_url
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]


def records() -> list[ServiceRecord | SliceRecord | LinkRecord]:
    out = []
    for i, obj in enumerate(ITEMS):
        r = parse_object(obj, f"demo[{i}]")
        assert r is not None
        out.append(r)
    return out


LINKED = frozenset(r.target_cluster for r in records() if isinstance(r, LinkRecord))


def build(namespace: str, name: str, **kw: Any) -> GlobalService | None:
    """As the index assembles it: the demo's Links say which clusters are linked."""
    kw.setdefault("linked_clusters", LINKED)
    recs = records()
    services = {r.name: r for r in recs if isinstance(r, ServiceRecord) and r.namespace == namespace}
    slices = [r for r in recs if isinstance(r, SliceRecord) and r.namespace == namespace]

    def slices_of(svc: str) -> list[SliceRecord]:
        return [s for s in slices if s.service_name == svc]

    local = services.get(name)
    mirrors = [
        (s, slices_of(s.name)) for s in services.values()
        if s.role is not Role.LOCAL and s.original == name
    ]
    return assemble(namespace, name, local, slices_of(name) if local else [], mirrors,
                    ClusterView(cluster_name=kw.pop("cluster_name", "east"), **kw))


def by_name(gs: GlobalService) -> dict[tuple[str, str | None], Member]:
    return {(m.cluster, m.hostname): m for m in gs.members}


def test_roles_of_every_demo_service() -> None:
    roles = {(r.namespace, r.name): (r.role, r.original, r.cluster, r.hostname)
             for r in records() if isinstance(r, ServiceRecord)}
    assert roles[("default", "nginx-svc")] == (Role.LOCAL, "nginx-svc", "", "")
    assert roles[("default", "nginx-svc-west")] == (Role.HEADLESS_ROOT, "nginx-svc", "west", "")
    assert roles[("default", "nginx-set-2-west")] == (
        Role.POD_MIRROR, "nginx-svc", "west", "nginx-set-2")
    assert roles[("default", "web-west")] == (Role.CLUSTER_MIRROR, "web", "west", "")
    assert roles[("default", "web-north")][0] is Role.CLUSTER_MIRROR
    assert roles[("default", "web-federated")][:2] == (Role.FEDERATED, "web")
    assert roles[("linkerd-multicluster", "probe-west")] == (Role.GATEWAY_PROBE, "", "west", "")
    assert roles[("default", "payments-federated")][:3] == (Role.FEDERATED, "payments", "")
    assert roles[("db", "kafka-south")] == (Role.CLUSTER_MIRROR, "kafka", "south", "")
    assert LINKED == {"west", "north", "south"}
    assert roles[("default", "metrics")] == (Role.LOCAL, "metrics", "", "")


def test_nginx_members_local_west_and_north() -> None:
    gs = build("default", "nginx-svc")
    assert gs is not None
    members = by_name(gs)
    assert set(members) == {
        ("east", "nginx-set-0"), ("east", "nginx-set-1"),
        ("west", "nginx-set-0"), ("west", "nginx-set-1"), ("west", "nginx-set-2"),
        ("north", "nginx-set-0"), ("north", "nginx-set-1"),
    }
    assert members[("east", "nginx-set-0")].addresses == ("10.42.1.10",)
    assert members[("east", "nginx-set-0")].local
    # Per-pod mirror: address is the mirror's ClusterIP, not the gateway's.
    assert members[("west", "nginx-set-2")].addresses == ("10.43.245.244",)
    assert members[("west", "nginx-set-2")].ready
    assert members[("west", "nginx-set-2")].ports[0].port == 80
    # North's gateway probe is failing: its per-pod mirror slices are not ready.
    assert not members[("north", "nginx-set-0")].ready
    assert "gateway" in members[("north", "nginx-set-0")].why_not_ready


def test_cockroach_local_not_ready_endpoint_and_ports() -> None:
    gs = build("db", "cockroachdb")
    assert gs is not None
    members = by_name(gs)
    assert not members[("east", "cockroachdb-2")].ready
    assert members[("east", "cockroachdb-0")].ready
    assert {p.name: p.port for p in members[("east", "cockroachdb-0")].ports} == {
        "grpc": 26257, "http": 8080}
    # Mirrored members use the mirror Service's ports, not the gateway's 4143.
    assert {p.port for p in members[("west", "cockroachdb-1")].ports} == {26257, 8080}
    assert sum(m.ready for m in gs.members) == 5


def test_web_cluster_level_members() -> None:
    gs = build("default", "web")
    assert gs is not None
    members = by_name(gs)
    assert set(members) == {("east", None), ("west", None), ("north", None), ("south", None),
                            ("federated", None)}
    assert members[("federated", None)].addresses == ("10.43.100.9",)
    assert members[("federated", None)].ready  # no endpoints: meshed clients only
    assert members[("federated", None)].via is Via.FEDERATED
    assert members[("north", None)].via is Via.REMOTE_DISCOVERY
    # An empty remote service: the gateway mirror's slices were deleted by Kubernetes.
    assert not members[("south", None)].ready
    assert members[("south", None)].why_not_ready == NO_REMOTE_ENDPOINTS
    assert not gs.headless
    assert members[("east", None)].addresses == ("10.43.0.50",)
    assert members[("west", None)].ready  # gateway mode: slice ready
    assert members[("north", None)].ready  # remote discovery: no endpoints, always ready
    assert members[("north", None)].addresses == ("10.43.100.8",)


def test_not_global_services() -> None:
    assert build("default", "metrics") is None  # no mirror, not exported
    assert build("default", "kubernetes") is None
    assert build("default", "web-federated") is None
    assert build("default", "nginx-svc-west") is None  # a mirror is never a global service


def test_no_local() -> None:
    gs = build("default", "nginx-svc", include_local=False)
    assert gs is not None
    assert all(not m.local for m in gs.members)
    assert {m.cluster for m in gs.members} == {"west", "north"}
    assert gs.headless


def _pod_mirror(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-set-0-west"))
    for path, value in changes.items():
        target = obj
        *parents, leaf = path.split(".")
        for p in parents:
            target = target[p]
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return obj


def test_pod_mirror_falls_back_to_names_without_annotation() -> None:
    obj = _pod_mirror(**{"metadata.annotations": None})
    svc = parse_service(obj)
    assert (svc.hostname, svc.original) == ("nginx-set-0", "nginx-svc")


def test_endpoints_without_hostname_are_named_by_their_dashed_address() -> None:
    """As Kubernetes DNS names them (and the MCS conformance suite expects): the address
    with dashes, one member per address, even when targetRef names the pod; a dual-stack
    pod without a hostname is two names. An endpoint with a hostname keeps it."""
    svc = parse_service(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc"))
    sl = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc-b060a"))
    del sl["endpoints"][0]["hostname"]  # targetRef.name is still there: not used
    del sl["endpoints"][1]["hostname"]
    del sl["endpoints"][1]["targetRef"]
    sl["endpoints"][1]["conditions"] = {}  # nil ready counts as ready
    v6 = copy.deepcopy(sl)
    v6["metadata"]["name"] = "nginx-svc-v6"
    v6["addressType"] = "IPv6"
    v6["endpoints"] = [{**sl["endpoints"][0], "addresses": ["fd00:42::20:5"]}]
    gs = assemble("default", "nginx-svc", svc, [parse_slice(sl), parse_slice(v6)], [],
                  ClusterView("east"))
    assert gs is not None
    assert {(m.hostname, m.addresses, m.ready) for m in gs.members} == {
        ("10-42-1-10", ("10.42.1.10",), True), ("10-42-1-11", ("10.42.1.11",), True),
        ("fd00-42--20-5", ("fd00:42::20:5",), True)}


def test_dual_stack_local_pod_merges_across_slices() -> None:
    svc = parse_service(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc"))
    v4 = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc-b060a"))
    v6 = copy.deepcopy(v4)
    v6["metadata"]["name"] = "nginx-svc-v6"
    v6["addressType"] = "IPv6"
    v6["endpoints"][0]["addresses"] = ["fd00:42::10"]
    v6["endpoints"][1]["addresses"] = ["fd00:42::11"]
    gs = assemble("default", "nginx-svc", svc, [parse_slice(v4), parse_slice(v6)], [],
                  ClusterView("east"))
    assert gs is not None
    assert {m.hostname: m.addresses for m in gs.members} == {
        "nginx-set-0": ("10.42.1.10", "fd00:42::10"),
        "nginx-set-1": ("10.42.1.11", "fd00:42::11"),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metadata": "oops"}, "has no metadata"),
        ({"metadata.name": None}, "metadata.name"),
        ({"spec.clusterIPs": "10.0.0.1"}, "clusterIPs must be a list"),
        ({"spec.clusterIPs": ["not-an-ip"]}, "not an IP address"),
        ({"spec.ports": [{"name": "http", "port": "80"}]}, "port must be an integer"),
        ({"metadata.labels": {"a": 1}}, "labels must map strings"),
        ({"metadata.annotations": {
            "mirror.linkerd.io/remote-svc-fq-name": "x" * 70 + ".nginx-svc.default.svc"}},
         "cannot be a DNS label"),
        ({"metadata.annotations": {
            "mirror.linkerd.io/remote-svc-fq-name": "nginx-sét-0.nginx-svc.default.svc"}},
         "cannot be a DNS label"),
    ],
)
def test_malformed_services_are_reported_with_what_and_where(change: dict[str, Any],
                                                             message: str) -> None:
    obj = _pod_mirror(**change)
    with pytest.raises(ObjectError, match=message) as info:
        parse_object(obj, "file.yaml items[4]")
    assert "file.yaml items[4]" in str(info.value)


def test_malformed_slices() -> None:
    sl = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc-b060a"))
    sl["endpoints"][0]["conditions"]["ready"] = "yes"
    with pytest.raises(ObjectError, match=r"endpoints\[0\].conditions.ready"):
        parse_slice(sl, "here")
    sl["endpoints"] = {"not": "a list"}
    with pytest.raises(ObjectError, match="endpoints must be a list"):
        parse_slice(sl)


def test_what_is_no_object_says_so() -> None:
    """Both used to pass as "a kind we don't use" (None), and the file said "kind None"."""
    with pytest.raises(ObjectError, match=r"^f.yaml items\[3\]: not a Kubernetes object: no kind$"):
        parse_object({"metadata": {"name": "x", "namespace": "n"}}, "f.yaml items[3]")
    with pytest.raises(ObjectError, match=r"^f.yaml: a List's items must be a list, got nothing$"):
        parse_object({"kind": "List"}, "f.yaml")


def test_unknown_kinds_are_not_records() -> None:
    assert parse_object({"kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}) is None
    with pytest.raises(ObjectError):
        parse_object(["not", "an", "object"], "x")


# --------------------------------------------------------------------------- Linkerd's lifecycle


def _link(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "multicluster.linkerd.io/v1alpha1", "kind": "Link",
            "metadata": {"name": "west", "namespace": "linkerd-multicluster"}, "spec": spec}


def test_links_of_every_version() -> None:
    west = next(r for r in records() if isinstance(r, LinkRecord) and r.name == "west")
    assert (west.target_cluster, west.probe_path, west.gateway_address) == (
        "west", "/ready", "172.18.0.3")
    for version in ("v1alpha1", "v1alpha2", "v1alpha3"):
        obj = dict(_link(targetClusterName="West-1", probeSpec={"path": "/health", "port": 4191}),
                   apiVersion=f"multicluster.linkerd.io/{version}")
        link = parse_object(obj)
        assert isinstance(link, LinkRecord)
        assert (link.target_cluster, link.probe_path) == ("west-1", "/health")
    # A hand-written Link without targetClusterName names its cluster by its own name.
    assert parse_link(_link()).target_cluster == "west"
    # Another group's Link is not Linkerd's.
    assert parse_object(dict(_link(), apiVersion="example.com/v1")) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"targetClusterName": "no such/cluster"}, "targetClusterName"),
        ({"probeSpec": "oops"}, "probeSpec must be an object"),
        ({"probeSpec": {"path": "ready"}}, "not a URL path"),
        ({"probeSpec": {"path": "/a b"}}, "not a URL path"),
    ],
)
def test_malformed_links(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ObjectError, match=message) as info:
        parse_object(_link(**spec), "dump.yaml items[9]")
    assert "dump.yaml items[9]: Link linkerd-multicluster/west" in str(info.value)


def _federated(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {
        "name": name, "namespace": "default", "annotations": annotations,
        "labels": {"mirror.linkerd.io/mirrored-service": "true"}},
        "spec": {"clusterIP": "10.43.7.7", "ports": [{"name": "http", "port": 80}]}}


@pytest.mark.parametrize(
    ("name", "annotations", "role", "original"),
    [
        ("api-federated", {"multicluster.linkerd.io/local-discovery": "api"}, Role.FEDERATED,
         "api"),
        ("x-federated", {"multicluster.linkerd.io/remote-discovery": "api@west,api@north"},
         Role.FEDERATED, "api"),
        ("api-federated", {}, Role.FEDERATED, "api"),
        ("strange", {}, Role.IGNORED, ""),  # a mirror dnsside cannot place
    ],
)
def test_federated_service_names_its_original(name: str, annotations: dict[str, str],
                                              role: Role, original: str) -> None:
    svc = parse_service(_federated(name, annotations))
    assert (svc.role, svc.original, svc.cluster) == (role, original, "")


def test_a_service_shared_only_through_federation() -> None:
    gs = build("default", "payments")
    assert gs is not None
    (member,) = gs.members
    assert (member.cluster, member.hostname, member.addresses, member.ready) == (
        FEDERATED_CLUSTER, None, ("10.43.100.20",), True)
    assert "meshed clients only" in member.via.value
    assert build("default", "payments", include_federated=False) == GlobalService(
        "default", "payments", (), (), False)


def test_orphans_are_excluded_and_named() -> None:
    gs = build("default", "nginx-svc")
    assert gs is not None
    assert "old" not in {m.cluster for m in gs.members}
    (orphan,) = gs.excluded
    assert (orphan.cluster, orphan.hostname, orphan.addresses) == ("old", "nginx-set-0",
                                                                   ("10.45.0.10",))
    # Linkerd still calls it ready (that is the trouble): it is left out all the same.
    assert orphan.exclusion is Exclusion.ORPHANED and orphan.ready
    assert "no Link targets cluster old" in orphan.why_not_ready
    # Links that cannot be read filter nothing: the orphan is a member like any other.
    unfiltered = build("default", "nginx-svc", linked_clusters=None)
    assert unfiltered is not None and not unfiltered.excluded
    assert ("old", "nginx-set-0") in by_name(unfiltered)
    # No Link left at all: only the local members remain.
    alone = build("default", "nginx-svc", linked_clusters=frozenset())
    assert alone is not None
    assert {m.cluster for m in alone.members} == {"east"}
    assert {m.cluster for m in alone.excluded} == {"west", "north", "old"}


def test_a_service_with_only_orphaned_mirrors_has_no_members() -> None:
    recs = [r for r in records() if isinstance(r, ServiceRecord) and r.namespace == "db"]
    mirrors = [(r, []) for r in recs if r.original == "cockroachdb" and r.role is not Role.LOCAL]
    # No local original (or one that is not exported): global only through its mirrors.
    gs = assemble("db", "cockroachdb", None, [], mirrors,
                  ClusterView("east", linked_clusters=frozenset({"south"})))
    assert gs is not None
    assert gs.members == () and len(gs.excluded) == 6 and all(m.exclusion is Exclusion.ORPHANED for m in gs.excluded)
    assert assemble("db", "cockroachdb", None, [], [], ClusterView("east")) is None


def test_failing_gateway_takes_only_gateway_routed_members_out() -> None:
    failing = frozenset({"west", "north", "south"})
    web = build("default", "web", failing_gateways=failing)
    assert web is not None
    by = by_name(web)
    assert not by[("west", None)].ready  # gateway mode
    assert "fails dnsside's probe" in by[("west", None)].why_not_ready
    assert by[("north", None)].ready  # remote discovery: never probed
    assert by[("federated", None)].ready and by[("east", None)].ready
    # Linkerd's own reason stands when Linkerd already says not ready.
    assert by[("south", None)].why_not_ready == NO_REMOTE_ENDPOINTS
    nginx = build("default", "nginx-svc", failing_gateways=frozenset({"west"}))
    assert nginx is not None
    assert {(m.cluster, m.ready) for m in nginx.members if m.cluster == "west"} == {
        ("west", False)}
    assert all(m.ready for m in nginx.members if m.local)


def test_name_clash_local_member_wins() -> None:
    gs = build("default", "nginx-svc", cluster_name="west")
    assert gs is not None
    names = [(m.cluster, m.hostname) for m in gs.members]
    assert len(names) == len(set(names))  # never two members with one name
    winners = by_name(gs)
    assert winners[("west", "nginx-set-0")].local and winners[("west", "nginx-set-1")].local
    assert not winners[("west", "nginx-set-2")].local  # no local pod of that name
    lost = [m for m in gs.excluded if m.exclusion is Exclusion.NAME_CLASH]
    assert {(m.cluster, m.hostname) for m in lost} == {("west", "nginx-set-0"),
                                                       ("west", "nginx-set-1")}
    # The same for a cluster-level member: the local ClusterIP wins.
    web = build("default", "web", cluster_name="west")
    assert web is not None
    assert by_name(web)[("west", None)].addresses == ("10.43.0.50",)


def test_headless_flag() -> None:
    for ns, name, headless in (("default", "nginx-svc", True), ("db", "cockroachdb", True),
                               ("db", "kafka", True), ("default", "web", False),
                               ("default", "payments", False)):
        gs = build(ns, name)
        assert gs is not None and gs.headless is headless, (ns, name)


def test_probe_url() -> None:
    probes = {r.cluster: r for r in records()
              if isinstance(r, ServiceRecord) and r.role is Role.GATEWAY_PROBE}
    link = parse_link(_link(probeSpec={"path": "/live"}))
    assert probe_url(probes["west"], None) == "http://10.43.200.11:4191/ready"
    assert probe_url(probes["west"], link) == "http://10.43.200.11:4191/live"
    v6 = parse_service({"kind": "Service", "metadata": {
        "name": "probe-x", "namespace": "linkerd-multicluster",
        "labels": {"mirror.linkerd.io/mirrored-gateway": "true",
                   "mirror.linkerd.io/cluster-name": "x"}},
        "spec": {"clusterIPs": ["fd00::42"], "ports": [{"name": "mc-probe", "port": 4191},
                                                      {"name": "other", "port": 1}]}})
    assert probe_url(v6, None) == "http://[fd00::42]:4191/ready"
    not_a_probe = next(r for r in records() if isinstance(r, ServiceRecord) and r.name == "web")
    assert probe_url(not_a_probe, None) is None


def test_parse_caches_stay_small_under_churn() -> None:
    """Objects churned under ever-new names (services, namespaces, ports, lone
    endpoints without a pod) leave at most a few thousand entries in the parse caches, not
    one each for the life of the process."""
    from dnsside.model import sharing

    for i in range(3 * sharing.SHARED_MAX):
        ns, name = f"churn-{i // 20}", f"app-{i}"
        parse_object({"kind": "Service", "metadata": {"name": name, "namespace": ns,
                                                      "labels": {"app": name}},
                      "spec": {"clusterIP": "10.1.0.1",
                               "ports": [{"name": "http", "port": 1024 + i % 60000}]}})
        parse_object({"kind": "EndpointSlice", "metadata": {
            "name": f"{name}-x", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 1024 + i % 60000}],
            "endpoints": [{"addresses": [f"10.9.{i // 256 % 256}.{i % 256}"]}]})
        sizes = sharing.sizes()
        assert max(sizes.values()) <= sharing.SHARED_MAX, sizes
    assert set(sizes) == {"shared", "labels", "port lists"}
    assert sharing.SHARED_MAX <= 4096
