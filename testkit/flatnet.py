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

EXPORTED = "mirror.linkerd.io/exported"
REMOTE_DISCOVERY_LABELS = {EXPORTED: "remote-discovery"}
DB_PORTS = [{"name": "grpc", "port": 26257, "protocol": "TCP"},
            {"name": "http", "port": 8080, "protocol": "TCP"}]


def service(name: str, namespace: str = "data", *, labels: dict[str, str] | None = None,
            headless: bool = True, cluster_ip: str = "10.96.0.10",
            ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": DB_PORTS if ports is None else ports,
                            "clusterIP": "None" if headless else cluster_ip}
    if not headless:
        spec["clusterIPs"] = [cluster_ip]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec}


def endpoint(ip: str, hostname: str | None = None, ready: bool | None = True,
             pod: str | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"addresses": [ip]}
    if ready is not None:
        e["conditions"] = {"ready": ready}
    if hostname is not None:
        e["hostname"] = hostname
    if pod is not None:
        e["targetRef"] = {"kind": "Pod", "name": pod, "namespace": "data"}
    return e


def endpoint_slice(name: str, service_name: str, endpoints: list[dict[str, Any]],
                   namespace: str = "data", address_type: str = "IPv4",
                   ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": address_type, "endpoints": endpoints,
            "ports": DB_PORTS if ports is None else ports}


def v1_endpoints(name: str, ready: list[tuple[str, str | None]],
                 not_ready: list[tuple[str, str | None]] = (),  # type: ignore[assignment]
                 namespace: str = "data") -> dict[str, Any]:
    """A core/v1 Endpoints object: (ip, hostname) pairs, ready and not ready."""
    def addresses(pairs: Any) -> list[dict[str, Any]]:
        return [{"ip": ip, **({"hostname": h} if h else {})} for ip, h in pairs]

    subset: dict[str, Any] = {"addresses": addresses(ready), "ports": DB_PORTS}
    if not_ready:
        subset["notReadyAddresses"] = addresses(not_ready)
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": name, "namespace": namespace}, "subsets": [subset]}


def link(cluster: str, *, secret: str | None = None,
         selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "targetClusterName": cluster, "clusterCredentialsSecret":
            f"cluster-credentials-{cluster}" if secret is None else secret,
        "gatewayAddress": "172.18.0.3", "probeSpec": {"path": "/ready", "port": "4191"},
        "selector": {"matchLabels": {EXPORTED: "true"}},
        "remoteDiscoverySelector": {"matchLabels": REMOTE_DISCOVERY_LABELS}
        if selector is None else selector,
    }
    return {"apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
            "metadata": {"name": cluster, "namespace": "linkerd-multicluster"}, "spec": spec}


def remote_discovery_mirror(svc: str, cluster: str, ip: str, namespace: str = "data",
                            ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ClusterIP mirror Linkerd leaves for a headless service exported for remote
    discovery with headless mirroring off: no endpoints, meshed clients only."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{svc}-{cluster}", "namespace": namespace,
                         "labels": {"mirror.linkerd.io/mirrored-service": "true",
                                    "mirror.linkerd.io/cluster-name": cluster,
                                    "multicluster.linkerd.io/remote-discovery": cluster,
                                    "multicluster.linkerd.io/remote-service": svc}},
            "spec": {"clusterIP": ip, "clusterIPs": [ip],
                     "ports": DB_PORTS if ports is None else ports}}


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
        {**service("db-north", labels={**REMOTE_DISCOVERY_LABELS,
                                       "mirror.linkerd.io/mirrored-service": "true",
                                       "mirror.linkerd.io/cluster-name": "north"})},
        endpoint_slice("db-north-ccccc", "db-north", [endpoint("10.250.0.1", "db-0")]),
    ]
