"""The Linkerd multicluster data model: Kubernetes objects in, slim records out.

This is the only module that knows what Linkerd's service mirror leaves in a
cluster: root headless mirrors, per-pod mirrors, gateway and remote-discovery
ClusterIP mirrors, federated Services, gateway probe Services and Links (how
they add up to a global service is :mod:`dnsside.core.assembly`). It does no I/O:
sources hand it decoded JSON objects and tests call it directly.

One global service ``(namespace, name)`` is
assembled from objects with *other* names: ``<svc>-<cluster>`` root mirrors,
``<pod>-<cluster>`` per-pod mirrors and the slices of each. Every record
therefore carries the key of the global service it contributes to
(:attr:`ServiceRecord.original`), computed once when the object is parsed, so
the index can find what an event touches without scanning. Values that recur across
thousands of objects are shared, and repeated checks remembered, by
:mod:`dnsside.model.sharing`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from sys import intern
from typing import Any, TypeGuard

from dnsside.dns.names import is_dns_label  # Kubernetes names and hostnames: RFC 1123 labels
from dnsside.model.addresses import normal_ip
from dnsside.model.endpoints import (
    Endpoint,
    EndpointRow,
    Endpoints,
    pack_rows,
)
from dnsside.model.locality import LocalityAnnotation, parse_locality
from dnsside.model.selectors import LabelSelector, SelectorError, parse_label_selector
from dnsside.model.sharing import Memo, is_label, share

# Label and annotation keys written by linkerd2's service mirror (2.14 → 2.18+).
MIRRORED_SERVICE = "mirror.linkerd.io/mirrored-service"
CLUSTER_NAME = "mirror.linkerd.io/cluster-name"
HEADLESS_MIRROR_SVC_NAME = "mirror.linkerd.io/headless-mirror-svc-name"
MIRRORED_GATEWAY = "mirror.linkerd.io/mirrored-gateway"
EXPORTED = "mirror.linkerd.io/exported"
REMOTE_DISCOVERY = "multicluster.linkerd.io/remote-discovery"  # label; on federated: annotation
LOCAL_DISCOVERY = "multicluster.linkerd.io/local-discovery"  # annotation of federated services
REMOTE_SVC_FQ_NAME = "mirror.linkerd.io/remote-svc-fq-name"
SERVICE_NAME = "kubernetes.io/service-name"
PROBE_PORT_NAME = "mc-probe"  # the port of the gateway probe Service
# dnsside's own annotation, read on a local Service only (never on a mirror: Linkerd copies
# a remote Service's annotations onto its mirrors, and each cluster decides for itself).
LOCALITY = "dnsside.io/locality"
DEFAULT_PROBE_PATH = "/ready"  # what `linkerd multicluster link` writes into probeSpec.path

# The cluster name of the member a federated Service contributes: it stands for every
# cluster at once, so it is not a link's name (a Link named "federated" would clash, and
# is reported as a clash like any other).
FEDERATED_CLUSTER = "federated"
FEDERATED_SUFFIX = "-federated"

# links.multicluster.linkerd.io: every version Linkerd has served, newest first.
LINK_GROUP = "multicluster.linkerd.io"
LINK_VERSIONS = ("v1alpha3", "v1alpha2", "v1alpha1")


class ObjectError(ValueError):
    """An object that cannot be read: the message says which object and which field."""


class Role(enum.Enum):
    """What a Service is to dnsside."""

    LOCAL = "local"  # not a mirror: may be the original of a global service
    HEADLESS_ROOT = "headless-root"  # `<svc>-<cluster>`, clusterIP None
    POD_MIRROR = "pod-mirror"  # `<pod>-<cluster>`, one per remote pod
    CLUSTER_MIRROR = "cluster-mirror"  # gateway or remote-discovery ClusterIP mirror
    FEDERATED = "federated"  # `<svc>-federated` (2.17+): one ClusterIP for every cluster
    FLAT = "flat"  # a linked cluster's headless Service, watched directly (--flat-network)
    GATEWAY_PROBE = "gateway-probe"  # `probe-gateway-<cluster>` / `probe-<link>`: probe target
    IGNORED = "ignored"  # a mirror dnsside cannot place: never a member


class Via(enum.Enum):
    """How a member's address reaches its pods, which says who can use it and what can fail."""

    LOCAL_ENDPOINT = "local endpoint"
    LOCAL_SERVICE = "local ClusterIP"
    POD_MIRROR = "per-pod mirror, through the gateway"
    GATEWAY_MIRROR = "gateway-mode mirror, through the gateway"
    REMOTE_DISCOVERY = "remote-discovery mirror: reachable by meshed clients only"
    FEDERATED = "federated service: reachable by meshed clients only"
    FLAT_NETWORK = "flat network (pod IP)"

    @property
    def local(self) -> bool:
        return self in (Via.LOCAL_ENDPOINT, Via.LOCAL_SERVICE)

    @property
    def through_gateway(self) -> bool:
        """Members whose readiness also depends on their link's gateway (and so on the probe)."""
        return self in (Via.POD_MIRROR, Via.GATEWAY_MIRROR)


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    port: int
    protocol: str  # upper case, as Kubernetes spells it: TCP, UDP, SCTP


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """The few fields of a core/v1 Service that the model needs."""

    namespace: str
    name: str
    role: Role
    original: str  # name of the global service this belongs to ("" when IGNORED)
    cluster: str  # link name for mirrors, "" for LOCAL
    hostname: str  # POD_MIRROR only: the remote pod's hostname
    cluster_ips: tuple[str, ...]  # empty when headless
    ports: tuple[Port, ...]
    exported: bool = False  # LOCAL only: carries mirror.linkerd.io/exported
    remote_discovery: bool = False  # CLUSTER_MIRROR only: no endpoints, always ready
    locality: LocalityAnnotation | None = None  # LOCAL only: dnsside.io/locality, if set

    @property
    def headless(self) -> bool:
        return not self.cluster_ips


@dataclass(frozen=True, slots=True)
class SliceRecord:
    """The few fields of a discovery.k8s.io/v1 EndpointSlice that the model needs."""

    namespace: str
    name: str
    service_name: str
    endpoints: Sequence[Endpoint]  # Endpoints when parsed (packed), any sequence works
    ports: tuple[Port, ...]

    @property
    def has_ready_endpoint(self) -> bool:
        endpoints = self.endpoints
        if type(endpoints) is Endpoints:
            return endpoints.ready
        return any(e.ready for e in endpoints)


@dataclass(frozen=True, slots=True)
class LinkRecord:
    """The few fields of a links.multicluster.linkerd.io Link that the model needs.

    Mirrors name their cluster with ``spec.targetClusterName``, not with the Link's
    own name (the CLI makes them equal; a hand-written Link may not).
    """

    namespace: str
    name: str
    target_cluster: str
    probe_path: str  # spec.probeSpec.path, else /ready
    gateway_address: str = ""  # spec.gatewayAddress, for humans
    credentials_secret: str = ""  # spec.clusterCredentialsSecret, in the Link's namespace
    remote_selector: LabelSelector = LabelSelector()  # spec.remoteDiscoverySelector
    selector_error: str = ""  # why remoteDiscoverySelector could not be read (selects nothing)
    created: str = ""  # creationTimestamp: of two Links for one cluster the older keeps it


Record = ServiceRecord | SliceRecord | LinkRecord


# --------------------------------------------------------------------------- parsing


def parse_object(obj: Any, where: str = "") -> Record | None:
    """Turn one decoded Kubernetes object into a record; None for kinds we don't use.

    Raises ObjectError naming the object and field when the object is malformed.
    """
    if not isinstance(obj, Mapping):
        raise ObjectError(f"{where}: expected an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        # Every object kubectl prints says its kind: without one this is not an object
        # at all (a hand-written file, a wrong indent), which "kind None" would hide.
        raise ObjectError(f"{where}: not a Kubernetes object: no kind"
                          + ("" if kind is None else f" (kind is {type(kind).__name__})"))
    if kind == "List" or (kind.endswith("List") and "items" in obj):
        # A List is unpacked before it gets here: it came whole because its items were not.
        items = obj.get("items")
        got = "nothing" if items is None else type(items).__name__
        raise ObjectError(f"{where}: a List's items must be a list, got {got}")
    if kind == "Service":
        return parse_service(obj, where)
    if kind == "EndpointSlice":
        return parse_slice(obj, where)
    if kind == "Link" and str(obj.get("apiVersion", "")).startswith(LINK_GROUP + "/"):
        return parse_link(obj, where)
    return None


def _is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, Mapping)  # the ABC check is slow


def _ident(kind: str, namespace: str, name: str, where: str) -> str:
    """How an error names an object (built only when there is an error)."""
    return f"{where}: {kind} {namespace}/{name}" if where else f"{kind} {namespace}/{name}"


def _meta(obj: Mapping[str, Any], kind: str, where: str) -> tuple[str, str, Mapping[str, Any]]:
    meta = obj.get("metadata")
    if not _is_map(meta):
        raise ObjectError(f"{where}: {kind} has no metadata")
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise ObjectError(f"{where}: {kind} metadata.name is missing or not a string")
    if not isinstance(namespace, str) or not namespace:
        raise ObjectError(f"{where}: {kind} {name}: metadata.namespace is missing or not a string")
    return namespace, name, meta


def _str_map(meta: Mapping[str, Any], field: str, ident: Any) -> Mapping[str, str]:
    """``meta[field]`` when it maps strings to strings. ``ident()`` names the object."""
    value = meta.get(field)
    if value is None:
        return {}
    if _is_map(value):
        try:  # str.join checks that every key and every value is a string, in C
            "".join(value)
            "".join(value.values())
            return value
        except TypeError:
            pass
    raise ObjectError(f"{ident()}: metadata.{field} must map strings to strings")


# Port lists by their raw (name, port, protocol)s: thousands of Services and slices have
# the same few, and validating and building them was a tenth of the sync's CPU.
_PORT_LISTS: Memo[tuple[Any, ...], tuple[Port, ...]] = Memo("port lists")


def _ports(raw: Any, ident: Any, field: str) -> tuple[Port, ...]:
    """The ports of ``raw`` (spec.ports or a slice's ports); ``ident()`` names the object."""
    if raw is None:
        return ()
    if type(raw) is list:
        key: list[Any] = [field]
        for p in raw:
            if type(p) is not dict or type(p.get("port")) is not int:
                break  # not the plain case (a nil port, a bool...): the full check
            key.append((p.get("name"), p["port"], p.get("protocol")))
        else:
            try:
                found = _PORT_LISTS.get(tuple(key))
            except TypeError:  # a name or protocol that is no string: the full check says so
                found = None
            if found is not None:
                return found
            return _PORT_LISTS.put(tuple(key), _check_ports(raw, ident(), field))
    return _check_ports(raw, ident(), field)


def _check_ports(raw: Any, ident: str, field: str) -> tuple[Port, ...]:
    if not isinstance(raw, list):
        raise ObjectError(f"{ident}: {field} must be a list")
    ports = []
    for i, p in enumerate(raw):
        if not _is_map(p):
            raise ObjectError(f"{ident}: {field}[{i}] must be an object")
        number, name, protocol = p.get("port"), p.get("name") or "", p.get("protocol") or "TCP"
        if number is None and field == "ports":  # EndpointSlice: nil port means "all ports"
            continue
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
            raise ObjectError(f"{ident}: {field}[{i}].port must be an integer 1-65535")
        if not isinstance(name, str) or not isinstance(protocol, str):
            raise ObjectError(f"{ident}: {field}[{i}].name/protocol must be strings")
        ports.append(share(Port(intern(name.lower()), number, intern(protocol.upper()))))
    return share(tuple(ports))


def _strip_cluster(name: str, cluster: str) -> str:
    suffix = "-" + cluster
    return name[: -len(suffix)] if cluster and name.endswith(suffix) else name


def _fq_labels(annotations: Mapping[str, str]) -> list[str]:
    fq = annotations.get(REMOTE_SVC_FQ_NAME, "")
    return [label for label in fq.split(".") if label]


def _str_list(raw: Any) -> bool:
    """A list of strings (str.join checks the items, in C)."""
    if type(raw) is not list:
        return False
    try:
        "".join(raw)
    except TypeError:
        return False
    return True


def _cluster_ips(spec: Mapping[str, Any], ident: Any) -> tuple[str, ...]:
    raw = spec.get("clusterIPs")
    if raw is None:
        single = spec.get("clusterIP")
        raw = [single] if single else []
    if not _str_list(raw):
        raise ObjectError(f"{ident()}: spec.clusterIPs must be a list of strings")
    ips = []
    for ip in raw:
        if ip in ("None", ""):
            continue
        try:
            ips.append(normal_ip(ip))
        except ValueError:
            raise ObjectError(f"{ident()}: spec.clusterIPs has {ip!r}, not an IP address"
                              ) from None
    return tuple(ips)


def parse_service(obj: Mapping[str, Any], where: str = "") -> ServiceRecord:
    namespace, name, meta = _meta(obj, "Service", where)

    def ident() -> str:
        return _ident("Service", namespace, name, where)

    labels = _str_map(meta, "labels", ident)
    annotations = _str_map(meta, "annotations", ident)
    spec = obj.get("spec")
    if not _is_map(spec):
        raise ObjectError(f"{ident()}: spec is missing or not an object")
    ips = _cluster_ips(spec, ident)
    ports = _ports(spec.get("ports"), ident, "spec.ports")
    cluster = labels.get(CLUSTER_NAME, "")
    fq = _fq_labels(annotations)

    role, original, hostname, remote_discovery = Role.LOCAL, name, "", False
    if labels.get(MIRRORED_GATEWAY) == "true":
        role, original = Role.GATEWAY_PROBE, ""
    elif labels.get(MIRRORED_SERVICE) == "true":
        if not cluster:  # federated service: a mirror of no single cluster
            original = _federated_original(name, annotations)
            role = Role.FEDERATED if original and ips else Role.IGNORED
        elif HEADLESS_MIRROR_SVC_NAME in labels:
            role = Role.POD_MIRROR
            root = labels[HEADLESS_MIRROR_SVC_NAME]
            hostname = fq[0] if len(fq) >= 2 else _strip_cluster(name, cluster)
            original = fq[1] if len(fq) >= 2 else _strip_cluster(root, cluster)
        else:
            role = Role.HEADLESS_ROOT if not ips else Role.CLUSTER_MIRROR
            original = fq[0] if fq else _strip_cluster(name, cluster)
            remote_discovery = REMOTE_DISCOVERY in labels
    exported = role is Role.LOCAL and labels.get(EXPORTED, "false") != "false"
    written = annotations.get(LOCALITY) if role is Role.LOCAL else None

    if role is not Role.IGNORED:  # a probe Service names its cluster: check that too
        # Namespaces and names are lower case in Kubernetes; an upper-case one (an API that
        # validates nothing) would publish the same names as its lower-case twin.
        for what, value in (("namespace", namespace), ("service", original),
                            ("cluster", cluster.lower())):
            if value and not is_label(value):
                raise ObjectError(f"{ident()}: {what} {value!r} cannot be a DNS label")
        if hostname and not is_dns_label(hostname.lower()):  # one per pod: not worth caching
            raise ObjectError(f"{ident()}: hostname {hostname!r} cannot be a DNS label")
    original, cluster, hostname = original.lower(), cluster.lower(), hostname.lower()
    return ServiceRecord(
        namespace=intern(namespace),
        name=name,
        role=role,
        original=intern(original),
        cluster=intern(cluster),
        hostname=intern(hostname),  # the same pod's in every link: one string
        cluster_ips=ips,
        ports=ports,
        exported=exported,
        remote_discovery=remote_discovery,
        locality=parse_locality(written) if written is not None else None,
    )


def parse_remote_service(obj: Mapping[str, Any], where: str, cluster: str,
                         selector: LabelSelector) -> ServiceRecord | None:
    """A linked cluster's Service as read from that cluster's API (``--flat-network``):
    its record when it is served directly (headless, selected by the Link's
    ``remoteDiscoverySelector``, not itself a mirror there), else None: for the source, a
    deletion. Raises ObjectError, like every parser, for a malformed object."""
    record = parse_service(obj, where)
    if not record.headless or record.role is not Role.LOCAL:
        return None
    labels = obj["metadata"].get("labels") or {}  # parse_service checked its shape
    if labels.get(MIRRORED_SERVICE) == "true" or not selector.matches(labels):
        return None
    # Nothing of its own annotations counts here: dnsside.io/locality is the local Service's.
    return replace(record, role=Role.FLAT, cluster=cluster, exported=False, locality=None)


def _federated_original(name: str, annotations: Mapping[str, str]) -> str:
    """The service a ``<svc>-federated`` Service federates: its local-discovery annotation
    (``<svc>``), else the first ``<svc>@<cluster>`` of remote-discovery, else the name less
    ``-federated``; "" when none applies."""
    local = annotations.get(LOCAL_DISCOVERY, "").strip()
    if local:
        return local
    for entry in annotations.get(REMOTE_DISCOVERY, "").split(","):
        svc, at, _cluster = entry.strip().partition("@")
        if svc and at:
            return svc
    return name[: -len(FEDERATED_SUFFIX)] if name.endswith(FEDERATED_SUFFIX) else ""


def parse_link(obj: Mapping[str, Any], where: str = "") -> LinkRecord:
    """A Link of any served version (v1alpha1-3 share every field read here)."""
    namespace, name, meta = _meta(obj, "Link", where)
    ident = f"Link {namespace}/{name}"
    ident = f"{where}: {ident}" if where else ident
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ObjectError(f"{ident}: spec must be an object")
    target = spec.get("targetClusterName") or name
    if not isinstance(target, str) or not is_dns_label(target.lower()):
        raise ObjectError(f"{ident}: spec.targetClusterName {target!r} cannot be a DNS label")
    probe = spec.get("probeSpec") or {}
    if not isinstance(probe, Mapping):
        raise ObjectError(f"{ident}: spec.probeSpec must be an object")
    path = probe.get("path") or DEFAULT_PROBE_PATH
    if not isinstance(path, str) or not path.startswith("/") or any(c in path for c in " \r\n"):
        raise ObjectError(f"{ident}: spec.probeSpec.path {path!r} is not a URL path")
    gateway = spec.get("gatewayAddress") or ""
    secret = spec.get("clusterCredentialsSecret") or ""
    if not isinstance(secret, str):
        raise ObjectError(f"{ident}: spec.clusterCredentialsSecret must be a string")
    # A malformed selector must not cost the whole Link (its cluster's mirrors would all
    # become orphans): it selects nothing, and says why.
    selector, selector_error = LabelSelector(), ""
    try:
        selector = parse_label_selector(spec.get("remoteDiscoverySelector"), ident)
    except SelectorError as exc:
        selector_error = str(exc)
    return LinkRecord(
        namespace=intern(namespace),
        name=name,
        target_cluster=intern(target.lower()),
        probe_path=path,
        gateway_address=gateway if isinstance(gateway, str) else "",
        credentials_secret=secret,
        remote_selector=selector,
        selector_error=selector_error,
        created=_timestamp(meta.get("creationTimestamp")),
    )


_RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")  # sorts as text


def _timestamp(value: Any) -> str:
    """A creationTimestamp as the API server writes it, "" for anything else."""
    return value if isinstance(value, str) and _RFC3339_UTC.fullmatch(value) else ""


def parse_slice(obj: Mapping[str, Any], where: str = "") -> SliceRecord:
    namespace, name, meta = _meta(obj, "EndpointSlice", where)

    def ident() -> str:
        return _ident("EndpointSlice", namespace, name, where)

    labels = _str_map(meta, "labels", ident)
    service_name = labels.get(SERVICE_NAME, "")
    address_type = obj.get("addressType", "IPv4")
    raw_endpoints = obj.get("endpoints") or []
    if type(raw_endpoints) is not list:
        raise ObjectError(f"{ident()}: endpoints must be a list")
    endpoints: Sequence[Endpoint] = ()
    if address_type in ("IPv4", "IPv6") and raw_endpoints:  # FQDN: no addresses to serve
        endpoints = _packed_endpoints(raw_endpoints, ident)
    return SliceRecord(
        namespace=intern(namespace),
        name=name,
        service_name=service_name,
        endpoints=endpoints,
        ports=_ports(obj.get("ports"), ident, "ports"),
    )



def _packed_endpoints(raw: list[Any], ident: Any) -> Sequence[Endpoint]:
    rows = [_endpoint(e, ident, i) for i, e in enumerate(raw)]
    packed = pack_rows(rows)
    if packed is None:
        return tuple(Endpoint(*row) for row in rows)
    # A per-pod mirror slice holds one gateway endpoint, the same in all of them.
    if len(rows) == 1 and rows[0][2] is None and rows[0][3] is None:
        return share(packed)
    return packed


def _endpoint(e: Any, ident: Any, i: int) -> EndpointRow:
    if not _is_map(e):
        raise ObjectError(f"{ident()}: endpoints[{i}] must be an object")
    raw = e.get("addresses") or []
    if not _str_list(raw):
        raise ObjectError(f"{ident()}: endpoints[{i}].addresses must be a list of strings")
    try:
        addresses = tuple([normal_ip(a) for a in raw])
    except ValueError:
        raise ObjectError(f"{ident()}: endpoints[{i}].addresses: {raw!r} has a value that is "
                          "not an IP address") from None
    conditions = e.get("conditions") or {}
    if not _is_map(conditions):
        raise ObjectError(f"{ident()}: endpoints[{i}].conditions must be an object")
    ready = conditions.get("ready")
    if ready is not None and type(ready) is not bool:
        raise ObjectError(f"{ident()}: endpoints[{i}].conditions.ready must be a boolean")
    hostname = e.get("hostname")
    if hostname is not None and not isinstance(hostname, str):
        raise ObjectError(f"{ident()}: endpoints[{i}].hostname must be a string")
    ref = e.get("targetRef")
    pod_name = ref.get("name") if ref and _is_map(ref) and ref.get("kind") == "Pod" else None
    # A nil ready condition counts as ready.
    return (addresses, ready is not False, hostname or None,
            pod_name if isinstance(pod_name, str) else None)


def parse_endpoints(obj: Mapping[str, Any], where: str = "") -> SliceRecord:
    """A core/v1 Endpoints object as one slice of its Service (same name): what a linked
    cluster older than Linkerd 2.14 lets its remote-access account read instead of
    EndpointSlices. ``addresses`` are ready, ``notReadyAddresses`` not; the ports of every
    subset are the slice's (a headless StatefulSet Service has one subset)."""
    namespace, name, _ = _meta(obj, "Endpoints", where)

    def ident() -> str:
        return _ident("Endpoints", namespace, name, where)

    subsets = obj.get("subsets") or []
    if type(subsets) is not list:
        raise ObjectError(f"{ident()}: subsets must be a list")
    rows: list[EndpointRow] = []
    ports: list[Port] = []
    for i, subset in enumerate(subsets):
        if not _is_map(subset):
            raise ObjectError(f"{ident()}: subsets[{i}] must be an object")
        for field, ready in (("addresses", True), ("notReadyAddresses", False)):
            for j, address in enumerate(subset.get(field) or []):
                if not _is_map(address) or not isinstance(address.get("ip"), str):
                    raise ObjectError(f"{ident()}: subsets[{i}].{field}[{j}].ip is missing")
                try:
                    ip = normal_ip(address["ip"])
                except ValueError:
                    raise ObjectError(f"{ident()}: subsets[{i}].{field}[{j}].ip "
                                      f"{address['ip']!r} is not an IP address") from None
                hostname = address.get("hostname")
                ref = address.get("targetRef")
                pod = ref.get("name") if _is_map(ref) and ref.get("kind") == "Pod" else None
                rows.append(((ip,), ready, hostname if isinstance(hostname, str) and hostname
                             else None, pod if isinstance(pod, str) else None))
        ports.extend(p for p in _ports(subset.get("ports"), ident, f"subsets[{i}].ports")
                     if p not in ports)
    packed = pack_rows(rows)
    return SliceRecord(
        namespace=intern(namespace),
        name=name,
        service_name=name,
        endpoints=tuple(Endpoint(*row) for row in rows) if packed is None else packed,
        ports=share(tuple(ports)),
    )
