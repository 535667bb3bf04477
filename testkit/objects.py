"""The Kubernetes and Linkerd objects tests and benchmarks feed dnsside, as plain dicts.

One builder per kind (Service, EndpointSlice and its endpoints, core/v1 Endpoints,
Link) and the label sets Linkerd's service mirror writes; the topologies of
testkit/topology.py, testkit/flatnet.py, bench/topology.py and bench/soak.py are
made of these. By default an object carries only what dnsside reads, which keeps a
test's fixture short; ``filled_in=True`` adds what the API server and the
controllers fill in on a real cluster (a Service's targetPort, type and IP families,
an endpoint's serving and terminating), so that a benchmark's topology looks like
``kubectl get -o json`` and costs what a real one costs to parse. Identity
(uid, resourceVersion, creationTimestamp, generateName, ownerReferences) is added
only when asked for: the generators draw uids from their own seeded random source.

Ports are ``(name, port)`` pairs; a dict is taken as it is, so a hostile test can
pass a malformed one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LINK_NS = "linkerd-multicluster"
SERVICE_NAME = "kubernetes.io/service-name"
EXPORTED = "mirror.linkerd.io/exported"
MIRROR = "mirror.linkerd.io/mirrored-service"
CLUSTER = "mirror.linkerd.io/cluster-name"
HEADLESS = "mirror.linkerd.io/headless-mirror-svc-name"
FQ = "mirror.linkerd.io/remote-svc-fq-name"
REMOTE_DISCOVERY = "multicluster.linkerd.io/remote-discovery"
REMOTE_SERVICE = "multicluster.linkerd.io/remote-service"
# The managed-by label of a slice: the mirroring controller copies a mirror Service's
# Endpoints into slices, the slice controller writes those of a Service with a selector.
MIRRORING_CONTROLLER = {"endpointslice.kubernetes.io/managed-by":
                        "endpointslicemirroring-controller.k8s.io"}
SLICE_CONTROLLER = {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}

Port = tuple[str, int] | dict[str, Any]


def ports(specs: Iterable[Port], *, target: bool = False) -> list[dict[str, Any]]:
    """Port dicts from pairs; ``target`` adds targetPort (the API server defaults it to
    the port on a Service; a slice's ports have none)."""
    out = []
    for spec in specs:
        if isinstance(spec, dict):
            out.append(dict(spec))  # a copy: a test that edits one object edits only it
            continue
        name, port = spec
        p: dict[str, Any] = {"name": name, "port": port, "protocol": "TCP"}
        if target:
            p["targetPort"] = port
        out.append(p)
    return out


def metadata(ns: str, name: str, *, labels: Mapping[str, str] | None = None,
             annotations: Mapping[str, str] | None = None, uid: str | None = None,
             resource_version: str | None = None, created: str | None = None
             ) -> dict[str, Any]:
    """Object metadata: labels always (possibly empty), the rest only when given."""
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if uid is not None:
        meta["uid"] = uid
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if created is not None:
        meta["creationTimestamp"] = created
    return meta


def service(ns: str, name: str, ips: list[str] | None, port_specs: Iterable[Port],
            labels: Mapping[str, str] | None = None,
            annotations: Mapping[str, str] | None = None, *,
            selector: Mapping[str, str] | None = None, filled_in: bool = False,
            uid: str | None = None, resource_version: str | None = None,
            created: str | None = None) -> dict[str, Any]:
    """A Service: ``ips`` its clusterIPs (dual-stack when there are two), None headless.

    ``filled_in`` adds targetPort, the type and the IP families the API server derives
    from the addresses (a headless Service is IPv4 single-stack)."""
    cluster_ips = list(ips or ["None"])
    spec: dict[str, Any] = {"ports": ports(port_specs, target=filled_in),
                            "clusterIP": cluster_ips[0], "clusterIPs": cluster_ips}
    if filled_in:
        families = ["IPv6" if ":" in ip else "IPv4" for ip in ips or ["0.0.0.0"]]
        spec.update({"type": "ClusterIP", "ipFamilies": families,
                     "ipFamilyPolicy": "PreferDualStack" if len(families) > 1 else "SingleStack",
                     "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"})
    if selector:
        spec["selector"] = dict(selector)
    meta = metadata(ns, name, labels=labels, annotations=annotations, uid=uid,
                    resource_version=resource_version, created=created)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def endpoint(address: str, ready: bool | None = True, hostname: str | None = None, *,
             pod: str | None = None, namespace: str | None = None,
             pod_uid: str | None = None, filled_in: bool = False) -> dict[str, Any]:
    """One endpoint of a slice. ``ready=None`` leaves the condition out (which means
    ready); ``filled_in`` adds serving (as ready) and terminating (false), as the slice
    controller writes them; ``pod`` a targetRef to that pod."""
    e: dict[str, Any] = {"addresses": [address]}
    if filled_in:
        e["conditions"] = {"ready": ready, "serving": ready, "terminating": False}
    elif ready is not None:
        e["conditions"] = {"ready": ready}
    if hostname:
        e["hostname"] = hostname
    if pod:
        ref: dict[str, Any] = {"kind": "Pod", "name": pod}
        if namespace is not None:
            ref["namespace"] = namespace
        if pod_uid is not None:
            ref["uid"] = pod_uid
        e["targetRef"] = ref
    return e


def endpoint_slice(ns: str, name: str, service_name: str, endpoints: list[dict[str, Any]],
                   port_specs: Iterable[Port], address_type: str = "IPv4",
                   labels: Mapping[str, str] | None = None, *,
                   generated: bool = False, owner: Mapping[str, Any] | None = None,
                   uid: str | None = None, resource_version: str | None = None,
                   created: str | None = None) -> dict[str, Any]:
    """An EndpointSlice of ``service_name``. ``labels`` may override the service-name
    label (hostile tests do); ``generated`` records generateName ``<service>-``, which
    ``name`` should then start with; ``owner`` (the Service object) makes the Service its
    controlling owner, as the slice controller does."""
    meta = metadata(ns, name, labels={SERVICE_NAME: service_name, **(labels or {})},
                    uid=uid, resource_version=resource_version, created=created)
    if generated:
        meta["generateName"] = f"{service_name}-"
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Service",
                                    "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True,
                                    "blockOwnerDeletion": True}]
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
            "addressType": address_type, "endpoints": endpoints,
            "ports": ports(port_specs)}


def v1_endpoints(ns: str, name: str, ready: Iterable[tuple[str, str | None]],
                 not_ready: Iterable[tuple[str, str | None]] = (),
                 port_specs: Iterable[Port] = ()) -> dict[str, Any]:
    """A core/v1 Endpoints object with one subset: (ip, hostname) pairs, ready and not."""
    def addresses(pairs: Iterable[tuple[str, str | None]]) -> list[dict[str, Any]]:
        return [{"ip": ip, **({"hostname": h} if h else {})} for ip, h in pairs]

    subset: dict[str, Any] = {"addresses": addresses(ready), "ports": ports(port_specs)}
    unready = addresses(not_ready)
    if unready:
        subset["notReadyAddresses"] = unready
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": name, "namespace": ns}, "subsets": [subset]}


def link(cluster: str, gateway: str, *, probe: Mapping[str, str] | None = None,
         credentials: str | None = None, selector: Mapping[str, Any] | None = None,
         remote_discovery_selector: Mapping[str, Any] | None = None,
         extra_spec: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
         uid: str | None = None, resource_version: str | None = None,
         created: str | None = None) -> dict[str, Any]:
    """A Link to ``cluster`` (in linkerd-multicluster, named after the cluster).

    ``probe`` is the probeSpec (default path /ready on port 4191); ``credentials`` the
    name of the kubeconfig Secret a flat network reads; the selectors and ``extra_spec``
    (gatewayPort, targetClusterDomain) appear only when given. Labels are left out when
    none are given, as `linkerd multicluster link` leaves them."""
    spec: dict[str, Any] = {"targetClusterName": cluster, "gatewayAddress": gateway,
                            "probeSpec": dict(probe or {"path": "/ready", "port": "4191"})}
    if credentials is not None:
        spec["clusterCredentialsSecret"] = credentials
    if selector is not None:
        spec["selector"] = dict(selector)
    if remote_discovery_selector is not None:
        spec["remoteDiscoverySelector"] = dict(remote_discovery_selector)
    spec.update(extra_spec or {})
    meta = metadata(LINK_NS, cluster, labels=labels, uid=uid,
                    resource_version=resource_version, created=created)
    if not labels:
        del meta["labels"]
    return {"apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
            "metadata": meta, "spec": spec}


def mirror_labels(cluster: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels the service mirror puts on every mirror of ``cluster``'s services."""
    return {MIRROR: "true", CLUSTER: cluster, **(extra or {})}


def remote_discovery_labels(cluster: str, service_name: str) -> dict[str, str]:
    """What marks a mirror as remote-discovery (flat network): no endpoints of its own."""
    return {REMOTE_DISCOVERY: cluster, REMOTE_SERVICE: service_name}
