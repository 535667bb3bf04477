"""Kubernetes objects for --flat-network tests: a local cluster `east` linked to `west`
(and `north`), each running the same StatefulSet `db` in namespace `data`.

What Linkerd leaves behind is written as `linkerd multicluster link` and the service
mirror write it: the Link with its credentials Secret name and
``remoteDiscoverySelector`` ``mirror.linkerd.io/exported=remote-discovery``, and, with
headless mirroring off, one ClusterIP remote-discovery mirror ``db-west`` with no
endpoints.
"""

from __future__ import annotations

from typing import Any

from testkit import objects
from testkit.objects import EXPORTED

REMOTE_DISCOVERY_LABELS = {EXPORTED: "remote-discovery"}
DB_PORTS = objects.ports([("grpc", 26257), ("http", 8080)])

# The builders below are testkit.objects' with this fixture's defaults: namespace
# `data`, the StatefulSet's ports, west's gateway and credentials Secret.


def service(name: str, namespace: str = "data", *, labels: dict[str, str] | None = None,
            headless: bool = True, cluster_ip: str = "10.96.0.10",
            ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return objects.service(namespace, name, None if headless else [cluster_ip],
                           DB_PORTS if ports is None else ports, labels)


def endpoint(ip: str, hostname: str | None = None, ready: bool | None = True,
             pod: str | None = None) -> dict[str, Any]:
    return objects.endpoint(ip, ready, hostname, pod=pod, namespace="data")


def endpoint_slice(name: str, service_name: str, endpoints: list[dict[str, Any]],
                   namespace: str = "data", address_type: str = "IPv4",
                   ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return objects.endpoint_slice(namespace, name, service_name, endpoints,
                                  DB_PORTS if ports is None else ports, address_type)


def v1_endpoints(name: str, ready: list[tuple[str, str | None]],
                 not_ready: list[tuple[str, str | None]] | None = None,
                 namespace: str = "data") -> dict[str, Any]:
    return objects.v1_endpoints(namespace, name, ready, not_ready or (), DB_PORTS)


def link(cluster: str, *, secret: str | None = None,
         selector: dict[str, Any] | None = None) -> dict[str, Any]:
    return objects.link(
        cluster, "172.18.0.3",
        credentials=f"cluster-credentials-{cluster}" if secret is None else secret,
        selector={"matchLabels": {EXPORTED: "true"}},
        remote_discovery_selector={"matchLabels": REMOTE_DISCOVERY_LABELS}
        if selector is None else selector)


def remote_discovery_mirror(svc: str, cluster: str, ip: str, namespace: str = "data",
                            ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ClusterIP mirror Linkerd leaves for a headless service exported for remote
    discovery with headless mirroring off: no endpoints, meshed clients only."""
    labels = objects.mirror_labels(cluster, objects.remote_discovery_labels(cluster, svc))
    return objects.service(namespace, f"{svc}-{cluster}", [ip],
                           DB_PORTS if ports is None else ports, labels)


def local_objects() -> list[dict[str, Any]]:
    """east: its own db (exported for remote discovery), the Link to west and the
    remote-discovery mirror of west's db."""
    return [
        service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("db-abcde", "db", [endpoint("10.42.0.10", "db-0"),
                                          endpoint("10.42.0.11", "db-1")]),
        link("west"),
        remote_discovery_mirror("db", "west", "10.96.50.1"),
    ]


def west_objects() -> list[dict[str, Any]]:
    """west: the same StatefulSet (db-0 ready, db-1 not), a service that is not exported,
    a ClusterIP one that is (not headless: never served directly) and one of Linkerd's
    own mirrors there (of a third cluster: never served either)."""
    return [
        service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("db-x1y2z", "db", [endpoint("10.244.1.5", "db-0"),
                                          endpoint("10.244.1.6", "db-1", ready=False)]),
        service("private", labels={}),
        endpoint_slice("private-aaaaa", "private", [endpoint("10.244.1.9", "p-0")]),
        service("web", labels=dict(REMOTE_DISCOVERY_LABELS), headless=False,
                cluster_ip="10.97.0.7"),
        endpoint_slice("web-bbbbb", "web", [endpoint("10.244.1.20")]),
        service("db-north", labels=objects.mirror_labels("north", REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("db-north-ccccc", "db-north", [endpoint("10.250.0.1", "db-0")]),
    ]
