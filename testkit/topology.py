"""Build small Linkerd topologies (Kubernetes objects as dicts) for tests.

The demo file covers the shapes Linkerd writes; these builders add what it
lacks (IPv6, extra links) without hand-writing YAML in every test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIRROR = "mirror.linkerd.io/mirrored-service"
CLUSTER = "mirror.linkerd.io/cluster-name"
HEADLESS = "mirror.linkerd.io/headless-mirror-svc-name"
FQ = "mirror.linkerd.io/remote-svc-fq-name"


def service(ns: str, name: str, ips: list[str] | None, ports: list[tuple[str, int]],
            labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            ) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"clusterIP": (ips or ["None"])[0], "clusterIPs": ips or ["None"],
                 "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]},
    }


def endpoint_slice(ns: str, name: str, service_name: str, endpoints: list[dict[str, Any]],
                   ports: list[tuple[str, int]], address_type: str = "IPv4",
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"kubernetes.io/service-name": service_name, **(labels or {})}},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports],
    }


def headless_link(ns: str, svc: str, cluster: str, pods: dict[str, list[str]],
                  ports: list[tuple[str, int]], ready: bool = True) -> list[dict[str, Any]]:
    """What the service mirror writes for one linked cluster of a headless service."""
    labels = {MIRROR: "true", CLUSTER: cluster}
    root = f"{svc}-{cluster}"
    objs = [service(ns, root, None, ports, labels, {FQ: f"{svc}.{ns}.svc.cluster.local"})]
    for host, ips in pods.items():
        name = f"{host}-{cluster}"
        objs.append(service(ns, name, ips, ports, {**labels, HEADLESS: root},
                            {FQ: f"{host}.{svc}.{ns}.svc.cluster.local"}))
        objs.append(endpoint_slice(ns, f"{name}-abcde", name, [
            {"addresses": ["172.18.0.9"], "conditions": {"ready": ready}}],
            [(n, 4143) for n, _ in ports], labels={**labels, HEADLESS: root}))
    return objs


def dual_stack_pg() -> list[dict[str, Any]]:
    """A dual-stack headless service `db/pg`, exported: local pg-0 with an IPv4 and an
    IPv6 slice (the IPv6 endpoint's readiness unset, which means ready), and west's
    mirror of its pg-0 with one address of each family."""
    ports = [("pg", 5432)]
    return [
        service("db", "pg", None, ports, {"mirror.linkerd.io/exported": "true"}),
        endpoint_slice("db", "pg-v4", "pg", [
            {"addresses": ["10.42.0.5"], "hostname": "pg-0", "conditions": {"ready": True}}],
            ports),
        endpoint_slice("db", "pg-v6", "pg", [
            {"addresses": ["fd00:42::5"], "hostname": "pg-0", "conditions": {}}],
            ports, address_type="IPv6"),
        *headless_link("db", "pg", "west", {"pg-0": ["10.43.0.7", "fd00:43::7"]}, ports),
    ]

def write(path: Path, objects: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path
