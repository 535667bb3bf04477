"""The Linkerd multicluster data model: Kubernetes objects in, global services out.

This is the only module that knows what Linkerd's service mirror leaves in a
cluster (SPEC §1) and how that adds up to a global service (SPEC §2). It does
no I/O: sources hand it decoded JSON objects, the index hands it the records it
keeps, and tests call it directly.

The tricky thing here is that one global service ``(namespace, name)`` is
assembled from objects with *other* names: ``<svc>-<cluster>`` root mirrors,
``<pod>-<cluster>`` per-pod mirrors and the slices of each. Every record
therefore carries the key of the global service it contributes to
(:attr:`ServiceRecord.original`), computed once when the object is parsed, so
the index can find what an event touches without scanning.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from sys import intern
from typing import Any, TypeVar

# Label and annotation keys written by linkerd2's service mirror (2.14 → 2.18+).
MIRRORED_SERVICE = "mirror.linkerd.io/mirrored-service"
CLUSTER_NAME = "mirror.linkerd.io/cluster-name"
HEADLESS_MIRROR_SVC_NAME = "mirror.linkerd.io/headless-mirror-svc-name"
MIRRORED_GATEWAY = "mirror.linkerd.io/mirrored-gateway"
EXPORTED = "mirror.linkerd.io/exported"
REMOTE_DISCOVERY = "multicluster.linkerd.io/remote-discovery"
REMOTE_SVC_FQ_NAME = "mirror.linkerd.io/remote-svc-fq-name"
SERVICE_NAME = "kubernetes.io/service-name"

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")

# Values that repeat across thousands of objects (port lists, the gateway endpoint
# of every per-pod mirror slice) are shared rather than copied: at 100k members
# that halves the memory records take. Bounded so churn cannot grow it for ever.
_SHARED: dict[object, object] = {}
_SHARED_MAX = 50_000
T = TypeVar("T")


def _share(value: T) -> T:
    found = _SHARED.get(value)
    if found is not None:
        return found  # type: ignore[return-value]
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    _SHARED[value] = value
    return value


class ObjectError(ValueError):
    """An object that cannot be read: the message says which object and which field."""


class Role(enum.Enum):
    """What a Service is to dnsside."""

    LOCAL = "local"  # not a mirror: may be the original of a global service
    HEADLESS_ROOT = "headless-root"  # `<svc>-<cluster>`, clusterIP None
    POD_MIRROR = "pod-mirror"  # `<pod>-<cluster>`, one per remote pod
    CLUSTER_MIRROR = "cluster-mirror"  # gateway or remote-discovery ClusterIP mirror
    IGNORED = "ignored"  # federated, gateway probe: never a member


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

    @property
    def headless(self) -> bool:
        return not self.cluster_ips


@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    ready: bool
    hostname: str | None
    pod_name: str | None  # targetRef.name when targetRef.kind is Pod


@dataclass(frozen=True, slots=True)
class SliceRecord:
    """The few fields of a discovery.k8s.io/v1 EndpointSlice that the model needs."""

    namespace: str
    name: str
    service_name: str
    endpoints: tuple[Endpoint, ...]
    ports: tuple[Port, ...]

    @property
    def has_ready_endpoint(self) -> bool:
        return any(e.ready for e in self.endpoints)


Record = ServiceRecord | SliceRecord


@dataclass(frozen=True, slots=True)
class Member:
    """One address holder of a global service: a pod, or a whole cluster behind a ClusterIP."""

    cluster: str
    hostname: str | None  # None for a cluster-level member
    addresses: tuple[str, ...]
    ports: tuple[Port, ...]
    ready: bool
    local: bool
    # The Service it comes from or, for a local endpoint, its EndpointSlice: a name the
    # record already holds, so 100k members cost no new strings. `explain` spells it out.
    source: str
    why_not_ready: str = ""


@dataclass(frozen=True, slots=True)
class GlobalService:
    namespace: str
    name: str
    members: tuple[Member, ...]


# --------------------------------------------------------------------------- parsing


def normal_ip(text: str) -> str:
    """The canonical text of an IP address; ValueError when it is none.

    Dotted-quad IPv4, by far the common case, is checked by inet_pton in C and
    kept as is (inet_pton accepts only the canonical form); the rest goes through
    ipaddress, which also canonicalises IPv6.
    """
    try:
        socket.inet_pton(socket.AF_INET, text)
        return intern(text)
    except OSError:
        return intern(str(ipaddress.ip_address(text)))


def is_dns_label(value: str) -> bool:
    """Kubernetes names and hostnames are RFC 1123 labels; anything else can't be served."""
    return bool(_DNS_LABEL.match(value))


def parse_object(obj: Any, where: str = "") -> Record | None:
    """Turn one decoded Kubernetes object into a record; None for kinds we don't use.

    Raises ObjectError naming the object and field when the object is malformed.
    """
    if not isinstance(obj, Mapping):
        raise ObjectError(f"{where}: expected an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind == "Service":
        return parse_service(obj, where)
    if kind == "EndpointSlice":
        return parse_slice(obj, where)
    return None


def _meta(obj: Mapping[str, Any], kind: str, where: str) -> tuple[str, str, Mapping[str, Any]]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ObjectError(f"{where}: {kind} has no metadata")
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise ObjectError(f"{where}: {kind} metadata.name is missing or not a string")
    if not isinstance(namespace, str) or not namespace:
        raise ObjectError(f"{where}: {kind} {name}: metadata.namespace is missing or not a string")
    return namespace, name, meta


def _str_map(meta: Mapping[str, Any], field: str, ident: str) -> Mapping[str, str]:
    value = meta.get(field)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ObjectError(f"{ident}: metadata.{field} must map strings to strings")
    return value


def _ports(raw: Any, ident: str, field: str) -> tuple[Port, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ObjectError(f"{ident}: {field} must be a list")
    ports = []
    for i, p in enumerate(raw):
        if not isinstance(p, Mapping):
            raise ObjectError(f"{ident}: {field}[{i}] must be an object")
        number, name, protocol = p.get("port"), p.get("name") or "", p.get("protocol") or "TCP"
        if number is None and field == "ports":  # EndpointSlice: nil port means "all ports"
            continue
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
            raise ObjectError(f"{ident}: {field}[{i}].port must be an integer 1-65535")
        if not isinstance(name, str) or not isinstance(protocol, str):
            raise ObjectError(f"{ident}: {field}[{i}].name/protocol must be strings")
        ports.append(_share(Port(intern(name.lower()), number, intern(protocol.upper()))))
    return _share(tuple(ports))


def _strip_cluster(name: str, cluster: str) -> str:
    suffix = "-" + cluster
    return name[: -len(suffix)] if cluster and name.endswith(suffix) else name


def _fq_labels(annotations: Mapping[str, str]) -> list[str]:
    fq = annotations.get(REMOTE_SVC_FQ_NAME, "")
    return [label for label in fq.split(".") if label]


def _cluster_ips(spec: Mapping[str, Any], ident: str) -> tuple[str, ...]:
    raw = spec.get("clusterIPs")
    if raw is None:
        single = spec.get("clusterIP")
        raw = [single] if single else []
    if not isinstance(raw, list) or not all(isinstance(ip, str) for ip in raw):
        raise ObjectError(f"{ident}: spec.clusterIPs must be a list of strings")
    ips = []
    for ip in raw:
        if ip in ("None", ""):
            continue
        try:
            ips.append(normal_ip(ip))
        except ValueError:
            raise ObjectError(f"{ident}: spec.clusterIPs has {ip!r}, not an IP address") from None
    return tuple(ips)


def parse_service(obj: Mapping[str, Any], where: str = "") -> ServiceRecord:
    namespace, name, meta = _meta(obj, "Service", where)
    ident = f"Service {namespace}/{name}"
    ident = f"{where}: {ident}" if where else ident
    labels = _str_map(meta, "labels", ident)
    annotations = _str_map(meta, "annotations", ident)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ObjectError(f"{ident}: spec is missing or not an object")
    ips = _cluster_ips(spec, ident)
    ports = _ports(spec.get("ports"), ident, "spec.ports")
    cluster = labels.get(CLUSTER_NAME, "")
    fq = _fq_labels(annotations)

    role, original, hostname, remote_discovery = Role.LOCAL, name, "", False
    if labels.get(MIRRORED_GATEWAY) == "true":
        role, original = Role.IGNORED, ""
    elif labels.get(MIRRORED_SERVICE) == "true":
        if not cluster:  # federated service: a mirror of no single cluster
            role, original = Role.IGNORED, ""
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

    if role is not Role.IGNORED:
        for what, value in (("namespace", namespace), ("service", original), ("cluster", cluster),
                            ("hostname", hostname)):
            if value and not is_dns_label(value.lower()):
                raise ObjectError(f"{ident}: {what} {value!r} cannot be a DNS label")
    return ServiceRecord(
        namespace=intern(namespace),
        name=name,
        role=role,
        original=intern(original.lower()),
        cluster=intern(cluster.lower()),
        hostname=hostname.lower(),
        cluster_ips=ips,
        ports=ports,
        exported=exported,
        remote_discovery=remote_discovery,
    )


def parse_slice(obj: Mapping[str, Any], where: str = "") -> SliceRecord:
    namespace, name, meta = _meta(obj, "EndpointSlice", where)
    ident = f"EndpointSlice {namespace}/{name}"
    ident = f"{where}: {ident}" if where else ident
    labels = _str_map(meta, "labels", ident)
    service_name = labels.get(SERVICE_NAME, "")
    address_type = obj.get("addressType", "IPv4")
    raw_endpoints = obj.get("endpoints") or []
    if not isinstance(raw_endpoints, list):
        raise ObjectError(f"{ident}: endpoints must be a list")
    endpoints = []
    if address_type in ("IPv4", "IPv6"):  # FQDN slices carry no addresses we can serve
        for i, e in enumerate(raw_endpoints):
            endpoints.append(_endpoint(e, f"{ident}: endpoints[{i}]"))
    return SliceRecord(
        namespace=intern(namespace),
        name=name,
        service_name=service_name,
        endpoints=_shared_endpoints(tuple(endpoints)),
        ports=_ports(obj.get("ports"), ident, "ports"),
    )


def _shared_endpoints(endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    # A per-pod mirror slice holds one gateway endpoint, the same in all of them.
    if len(endpoints) == 1 and endpoints[0].hostname is None and endpoints[0].pod_name is None:
        return _share(endpoints)
    return endpoints


def _endpoint(e: Any, ident: str) -> Endpoint:
    if not isinstance(e, Mapping):
        raise ObjectError(f"{ident} must be an object")
    raw = e.get("addresses") or []
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise ObjectError(f"{ident}.addresses must be a list of strings")
    try:
        addresses = tuple(normal_ip(a) for a in raw)
    except ValueError:
        raise ObjectError(f"{ident}.addresses: {raw!r} has a value that is not an IP address"
                          ) from None
    conditions = e.get("conditions") or {}
    if not isinstance(conditions, Mapping):
        raise ObjectError(f"{ident}.conditions must be an object")
    ready = conditions.get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise ObjectError(f"{ident}.conditions.ready must be a boolean")
    hostname = e.get("hostname")
    if hostname is not None and not isinstance(hostname, str):
        raise ObjectError(f"{ident}.hostname must be a string")
    ref = e.get("targetRef") or {}
    pod_name = ref.get("name") if isinstance(ref, Mapping) and ref.get("kind") == "Pod" else None
    endpoint = Endpoint(
        addresses=addresses,
        ready=ready is not False,  # a nil ready condition counts as ready
        hostname=hostname or None,
        pod_name=pod_name if isinstance(pod_name, str) else None,
    )
    # A gateway endpoint (no hostname, no pod) is the same in every per-pod mirror slice.
    return _share(endpoint) if endpoint.hostname is None and endpoint.pod_name is None else endpoint


# --------------------------------------------------------------------------- assembling


def dashed_ip(address: str) -> str:
    """The hostname Kubernetes DNS gives an endpoint without one: 10.42.1.10 → 10-42-1-10."""
    return address.replace(".", "-").replace(":", "-")


def _local_members(
    svc: ServiceRecord, slices: Sequence[SliceRecord], cluster_name: str
) -> list[Member]:
    if not svc.headless:
        ready = any(s.has_ready_endpoint for s in slices)
        return [
            Member(
                cluster=cluster_name,
                hostname=None,
                addresses=svc.cluster_ips,
                ports=svc.ports,
                ready=ready,
                local=True,
                source=svc.name,
                why_not_ready="" if ready else "its EndpointSlices have no ready endpoint",
            )
        ]
    # Headless: one member per endpoint hostname. A dual-stack pod shows up once per
    # address family, in two slices, under the same hostname: merge those.
    merged: dict[str, tuple[list[str], list[Port], bool, str]] = {}
    for s in sorted(slices, key=lambda s: s.name):
        for e in s.endpoints:
            if not e.addresses:
                continue
            host = (e.hostname or e.pod_name or dashed_ip(e.addresses[0])).lower()
            if not is_dns_label(host):
                continue
            addrs, ports, ready, first_slice = merged.setdefault(host, ([], [], False, s.name))
            addrs.extend(a for a in e.addresses if a not in addrs)
            ports.extend(p for p in s.ports if p not in ports)
            if e.ready and not ready:
                merged[host] = (addrs, ports, True, first_slice)
    members = []
    for host, (addrs, ports, ready, first_slice) in sorted(merged.items()):
        members.append(
            Member(
                cluster=cluster_name,
                hostname=host,
                addresses=tuple(addrs),
                ports=tuple(ports),
                ready=ready,
                local=True,
                source=first_slice,
                why_not_ready="" if ready else "endpoint condition ready is false",
            )
        )
    return members


def _mirror_member(svc: ServiceRecord, slices: Sequence[SliceRecord]) -> Member:
    if svc.remote_discovery:
        ready, why = True, ""
    else:
        ready = any(s.has_ready_endpoint for s in slices)
        if ready:
            why = ""
        elif slices:
            why = "gateway endpoint not ready (probe failing)"
        else:
            why = "no EndpointSlice yet"
    return Member(
        cluster=svc.cluster,
        hostname=svc.hostname if svc.role is Role.POD_MIRROR else None,
        addresses=svc.cluster_ips,
        ports=svc.ports,
        ready=ready,
        local=False,
        source=svc.name,
        why_not_ready=why,
    )


def assemble(
    namespace: str,
    name: str,
    local: ServiceRecord | None,
    local_slices: Sequence[SliceRecord],
    mirrors: Iterable[tuple[ServiceRecord, Sequence[SliceRecord]]],
    *,
    cluster_name: str,
    include_local: bool = True,
) -> GlobalService | None:
    """Build the global service ``(namespace, name)``, or None when it does not exist.

    It exists when at least one mirror of it exists or the local Service is exported.
    Root headless mirrors make it exist but contribute no member themselves: their
    pods arrive as per-pod mirrors.
    """
    mirror_list = [(m, s) for m, s in mirrors if m.role is not Role.IGNORED]
    exported = local is not None and local.exported
    if not mirror_list and not exported:
        return None
    members: list[Member] = []
    if include_local and local is not None and local.role is Role.LOCAL:
        members.extend(_local_members(local, local_slices, cluster_name))
    for svc, slices in sorted(mirror_list, key=lambda ms: (ms[0].cluster, ms[0].hostname)):
        if svc.role in (Role.POD_MIRROR, Role.CLUSTER_MIRROR) and svc.cluster_ips:
            members.append(_mirror_member(svc, slices))
    return GlobalService(namespace=namespace, name=name, members=tuple(members))
