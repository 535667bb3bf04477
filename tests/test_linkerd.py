"""The Linkerd data model on the demo topology and on hand-made edge cases, without sockets."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from support import DEMO

from dnsside.linkerd import (
    GlobalService,
    Member,
    ObjectError,
    Role,
    ServiceRecord,
    SliceRecord,
    assemble,
    parse_object,
    parse_service,
    parse_slice,
)

ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]


def records() -> list[ServiceRecord | SliceRecord]:
    out = []
    for i, obj in enumerate(ITEMS):
        r = parse_object(obj, f"demo[{i}]")
        assert r is not None
        out.append(r)
    return out


def build(namespace: str, name: str, **kw: Any) -> GlobalService | None:
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
                    cluster_name=kw.pop("cluster_name", "east"), **kw)


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
    assert roles[("linkerd-multicluster", "probe-gateway-west")] == (
        Role.GATEWAY_PROBE, "", "west", "")
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
    assert set(members) == {("east", None), ("west", None), ("north", None), ("federated", None)}
    assert members[("federated", None)].addresses == ("10.43.100.9",)
    assert members[("federated", None)].ready  # no endpoints: meshed clients only
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


def test_local_hostname_fallbacks() -> None:
    svc = parse_service(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc"))
    sl = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc-b060a"))
    del sl["endpoints"][0]["hostname"]  # → targetRef.name
    del sl["endpoints"][1]["hostname"]
    del sl["endpoints"][1]["targetRef"]  # → dashed IP
    sl["endpoints"][1]["conditions"] = {}  # nil ready counts as ready
    gs = assemble("default", "nginx-svc", svc, [parse_slice(sl)], [], cluster_name="east")
    assert gs is not None
    assert {(m.hostname, m.ready) for m in gs.members} == {("nginx-set-0", True),
                                                           ("10-42-1-11", True)}


def test_dual_stack_local_pod_merges_across_slices() -> None:
    svc = parse_service(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc"))
    v4 = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc-b060a"))
    v6 = copy.deepcopy(v4)
    v6["metadata"]["name"] = "nginx-svc-v6"
    v6["addressType"] = "IPv6"
    v6["endpoints"][0]["addresses"] = ["fd00:42::10"]
    v6["endpoints"][1]["addresses"] = ["fd00:42::11"]
    gs = assemble("default", "nginx-svc", svc, [parse_slice(v4), parse_slice(v6)], [],
                  cluster_name="east")
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


def test_unknown_kinds_are_not_records() -> None:
    assert parse_object({"kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}) is None
    with pytest.raises(ObjectError):
        parse_object(["not", "an", "object"], "x")
