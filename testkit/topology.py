"""Small Linkerd topologies for tests, made of testkit/objects.py's objects.

The demo file covers the shapes Linkerd writes; these builders add what it
lacks (IPv6, extra links) without hand-writing YAML in every test. ``service`` and
``endpoint_slice`` are testkit.objects' own, re-exported for the tests that build
single objects next to a topology.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testkit.objects import (
    CLUSTER,
    EXPORTED,
    FQ,
    HEADLESS,
    MIRROR,
    endpoint,
    endpoint_slice,
    mirror_labels,
    service,
)

__all__ = ["CLUSTER", "FQ", "HEADLESS", "MIRROR", "dual_stack_pg", "endpoint_slice",
           "headless_link", "service", "write"]


def headless_link(ns: str, svc: str, cluster: str, pods: dict[str, list[str]],
                  ports: list[tuple[str, int]], ready: bool = True) -> list[dict[str, Any]]:
    """What the service mirror writes for one linked cluster of a headless service."""
    labels = mirror_labels(cluster)
    root = f"{svc}-{cluster}"
    objs = [service(ns, root, None, ports, labels, {FQ: f"{svc}.{ns}.svc.cluster.local"})]
    for host, ips in pods.items():
        name = f"{host}-{cluster}"
        objs.append(service(ns, name, ips, ports, {**labels, HEADLESS: root},
                            {FQ: f"{host}.{svc}.{ns}.svc.cluster.local"}))
        objs.append(endpoint_slice(ns, f"{name}-abcde", name, [endpoint("172.18.0.9", ready)],
                                   [(n, 4143) for n, _ in ports],
                                   labels={**labels, HEADLESS: root}))
    return objs


def dual_stack_pg() -> list[dict[str, Any]]:
    """A dual-stack headless service `db/pg`, exported: local pg-0 with an IPv4 and an
    IPv6 slice (the IPv6 endpoint's readiness unset, which means ready), and west's
    mirror of its pg-0 with one address of each family."""
    ports = [("pg", 5432)]
    return [
        service("db", "pg", None, ports, {EXPORTED: "true"}),
        endpoint_slice("db", "pg-v4", "pg", [endpoint("10.42.0.5", True, "pg-0")], ports),
        # conditions present but empty, as some controllers leave them
        endpoint_slice("db", "pg-v6", "pg", [
            {"addresses": ["fd00:42::5"], "hostname": "pg-0", "conditions": {}}],
            ports, address_type="IPv6"),
        *headless_link("db", "pg", "west", {"pg-0": ["10.43.0.7", "fd00:43::7"]}, ports),
    ]


def write(path: Path, objects: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path
