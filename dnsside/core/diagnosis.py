"""Every state an operator must hear about, named once.

A member left out of the answers, a configuration mistake, a Link watch that is
down: each has one identifier here (the metric label, the alert and `dnsside
check` refer to it) and one sentence (the log line, `explain`). The index, the
log and metrics reporter, `explain`, `check` and the alerts all take them from
this module, so they never drift apart or get recognised by string prefix.

"EndpointSliceMirroring is off" is inferred, never read.
Per-pod mirrors always have Endpoints (the gateway, ready or not), so one without
an EndpointSlice means the controller did not make it; a gateway mirror of a
remote service with no ready endpoint legitimately has none. So the verdict is
"mirrors exist and *none* has a slice" for the whole cluster (the index's
warning), and "no per-pod mirror lacks one, and some mirror has one" per link
(`check`), both from :func:`mirror_health`.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dnsside.model.addresses import Unsafe, describe, unsafe_address
from dnsside.model.linkerd import (
    LinkRecord,
    Role,
    ServiceRecord,
    SliceRecord,
)

# --------------------------------------------------------------------------- left out


class Exclusion(enum.Enum):
    """Why a member is never served, whatever the flags (kept so `explain` can say why)."""

    ORPHANED = "orphaned"  # no Link targets its cluster
    NAME_CLASH = "name-clash"  # a local member has its name
    SERVED_FLAT = "served-flat"  # its cluster's pods are served by their own IPs
    UNSAFE_ADDRESS = "unsafe-address"  # no pod or Service can own the address
    INVALID_NAME = "invalid-name"  # a name it would publish is no DNS name

    def why(self, cluster: str) -> str:
        return _EXCLUSION_TEXT[self].format(cluster=cluster)


_EXCLUSION_TEXT = {
    Exclusion.ORPHANED: ("orphaned: no Link targets cluster {cluster} (deleting a Link leaves "
                         "its mirrors behind)"),
    Exclusion.NAME_CLASH: ("name clash: the local cluster is also named {cluster} "
                           "(--cluster-name equals a linked cluster's name); the local member "
                           "with this name wins"),
    Exclusion.SERVED_FLAT: ("cluster {cluster}'s pods of this service are served by their own "
                            "addresses on the flat network (--flat-network): this mirror "
                            "would list them twice"),
    Exclusion.UNSAFE_ADDRESS: "an address no pod or Service can own (loopback, link-local...)",
    Exclusion.INVALID_NAME: "a name it would publish is not a DNS name",
}


def unsafe_addresses(found: Sequence[tuple[str, Unsafe]]) -> str:
    """Why an endpoint's (or a ClusterIP's) addresses are left out: each with its class."""
    listed = ", ".join(describe(address, reason) for address, reason in found)
    s, them = ("es", "them") if len(found) > 1 else ("", "it")
    return f"unsafe address{s} {listed}: no pod or Service can own {them}"


def invalid_label(what: str, value: str) -> str:
    return f"{what} {value!r} is not a DNS label"


def invalid_protocol(protocol: str) -> str:
    return f"protocol {protocol!r} is not TCP, UDP or SCTP"


def name_too_long(name: str, octets: int) -> str:
    return (f"the name {name} would be {octets} octets with the longest served zone, over "
            "DNS's 255")


def unsafe_objects(services: Iterable[ServiceRecord], slices: Iterable[SliceRecord]
                   ) -> list[str]:
    """The objects whose addresses dnsside would answer (an exported Service's ClusterIPs or,
    headless, its slices; a mirror's or a federated Service's ClusterIPs) that hold an
    address no pod or Service can own, each with those addresses: for `dnsside check`."""
    found: list[str] = []
    headless: set[tuple[str, str]] = set()
    for svc in services:
        if svc.role is Role.LOCAL and svc.exported and svc.headless:
            headless.add((svc.namespace, svc.name))
        elif (svc.role is Role.LOCAL and svc.exported) or svc.role in (
                Role.POD_MIRROR, Role.CLUSTER_MIRROR, Role.FEDERATED):
            bad = [describe(a, r) for a in svc.cluster_ips if (r := unsafe_address(a))]
            if bad:
                found.append(f"Service {svc.namespace}/{svc.name}: {', '.join(bad)}")
    for s in slices:
        if (s.namespace, s.service_name) in headless:
            bad = [describe(a, r) for e in s.endpoints for a in e.addresses
                   if (r := unsafe_address(a))]
            if bad:
                found.append(f"EndpointSlice {s.namespace}/{s.name}: {', '.join(bad)}")
    return sorted(found)


def bad_ports(why: Sequence[str]) -> str:
    return "port " + "; port ".join(why) + ": the port is left out (no SRV record)"

# What to do, written once: the log, `dnsside check` and the alert runbooks all say it.
UNLINK = "`linkerd multicluster unlink --cluster-name {cluster} | kubectl delete -f -`"
MIRRORING_OFF_FIX = (
    "Linkerd's service mirror writes Endpoints; Kubernetes' EndpointSliceMirroring "
    "controller turns them into the EndpointSlices dnsside reads: check that "
    "kube-controller-manager runs it (--controllers must not exclude "
    "endpointslicemirroring) and its log")
LINK_WATCH_DOWN_FIX = (
    "the last complete Link list stands meanwhile (no unlinked cluster comes back); the "
    "log names the failing request: RBAC on links.multicluster.linkerd.io, API priority "
    "and fairness, or the network to the API server")

GATEWAY_FAILING = "the gateway of cluster {cluster} fails dnsside's probe"
NO_REMOTE_ENDPOINTS = "remote service has no ready endpoints"

# --------------------------------------------------------------------------- configuration


class ConfigWarning(enum.StrEnum):
    """A configuration mistake that silently makes answers wrong (the metric's label)."""

    DEFAULT_CLUSTER_NAME = "default-cluster-name"
    CLUSTER_NAME_CLASH = "cluster-name-clash"
    NO_MIRROR_SLICES = "no-mirror-slices"


_WARNING_TEXT = {
    ConfigWarning.DEFAULT_CLUSTER_NAME: (
        "--cluster-name is still the default 'local' while mirrors of linked clusters exist: "
        "set it to the name the other clusters linked this one as "
        "(linkerd multicluster link --cluster-name)"),
    ConfigWarning.CLUSTER_NAME_CLASH: (
        "--cluster-name {cluster} is also the cluster name of mirrors here: local members win "
        "every name clash and that cluster's clashing members are left out"),
    ConfigWarning.NO_MIRROR_SLICES: (
        "{n} mirrors routed through gateways exist but none has an EndpointSlice: is the "
        "EndpointSliceMirroring controller off? (they all count as not ready)"),
}


@dataclass
class ClusterMirrors:
    """The mirrors of one linked (or orphaned) cluster, and which lack an EndpointSlice."""

    services: list[ServiceRecord]  # every mirror Service naming this cluster
    mirrors: int = 0  # root headless, per-pod and ClusterIP mirrors
    pod_mirrors: int = 0
    gateway_mirrors: int = 0  # gateway-mode ClusterIP mirrors (remote-discovery ones excluded)
    missing_pod_slices: list[ServiceRecord] = field(default_factory=list)
    missing_gateway_slices: list[ServiceRecord] = field(default_factory=list)
    orphaned: bool = False  # the Links were read and none targets this cluster

    @property
    def slices_mirrored(self) -> bool:
        """EndpointSliceMirroring evidently works here: no per-pod mirror lacks a slice, and
        some mirror has one (or none is expected)."""
        expected = self.pod_mirrors + self.gateway_mirrors
        missing = len(self.missing_pod_slices) + len(self.missing_gateway_slices)
        return not self.missing_pod_slices and (expected == 0 or missing < expected)


_MIRROR_ROLES = (Role.HEADLESS_ROOT, Role.POD_MIRROR, Role.CLUSTER_MIRROR)


def mirror_health(services: Iterable[ServiceRecord], with_slice: Container[tuple[str, str]],
                  links: Sequence[LinkRecord] | None) -> dict[str, ClusterMirrors]:
    """Mirrors by cluster name (every Link's target cluster included, with or without
    mirrors). ``with_slice`` holds the (namespace, Service name) of every EndpointSlice.
    ``links`` None: the Links could not be read, so nothing is an orphan."""
    targets = {link.target_cluster for link in links or ()}
    out: dict[str, ClusterMirrors] = {c: ClusterMirrors([]) for c in targets}
    for svc in services:
        if not svc.cluster or svc.role in (Role.LOCAL, Role.FEDERATED):
            continue
        entry = out.setdefault(svc.cluster, ClusterMirrors(
            [], orphaned=links is not None and svc.cluster not in targets))
        entry.services.append(svc)
        entry.mirrors += svc.role in _MIRROR_ROLES
        has_slice = (svc.namespace, svc.name) in with_slice
        if svc.role is Role.POD_MIRROR:
            entry.pod_mirrors += 1
            if not has_slice:
                entry.missing_pod_slices.append(svc)
        elif svc.role is Role.CLUSTER_MIRROR and not svc.remote_discovery:
            entry.gateway_mirrors += 1
            if not has_slice:
                entry.missing_gateway_slices.append(svc)
    for entry in out.values():
        entry.services.sort(key=lambda s: (s.namespace, s.name))
    return out


def configuration_warnings(cluster_name: str, health: Mapping[str, ClusterMirrors]
                           ) -> dict[ConfigWarning, str]:
    """The mistakes that hold for this cluster, with what to do about each."""
    mirrored = {c for c, h in health.items() if h.mirrors}
    expected = sum(h.pod_mirrors + h.gateway_mirrors for h in health.values())
    missing = sum(len(h.missing_pod_slices) + len(h.missing_gateway_slices)
                  for h in health.values())
    active: dict[ConfigWarning, str] = {}
    if mirrored and cluster_name == "local":
        active[ConfigWarning.DEFAULT_CLUSTER_NAME] = _WARNING_TEXT[
            ConfigWarning.DEFAULT_CLUSTER_NAME]
    if cluster_name in mirrored:
        active[ConfigWarning.CLUSTER_NAME_CLASH] = _WARNING_TEXT[
            ConfigWarning.CLUSTER_NAME_CLASH].format(cluster=cluster_name)
    if expected and missing == expected:
        active[ConfigWarning.NO_MIRROR_SLICES] = _WARNING_TEXT[
            ConfigWarning.NO_MIRROR_SLICES].format(n=expected)
    return active


# --------------------------------------------------------------------------- notices


class Notice(enum.Enum):
    """Something the index learnt that an operator hears about once, when it happens."""

    SERVICE_APPEARED = "service-appeared"
    SERVICE_GONE = "service-gone"
    LINK_SEEN = "link-seen"
    LINK_GONE = "link-gone"
    ORPHANED = "orphaned"
    NAME_CLASH = "name-clash"
    LINKS_UNREADABLE = "links-unreadable"
    LINKS_READABLE = "links-readable"
    LINKS_RELISTED = "links-relisted"
    LINK_WATCH_DOWN = "link-watch-down"
    LINK_WATCH_UP = "link-watch-up"
    LINK_REFUSED = "link-refused"  # outside the links namespace, or a second for its cluster
    REMOTE_CONNECTING = "remote-connecting"
    REMOTE_SYNCED = "remote-synced"
    REMOTE_LOST = "remote-lost"
    REMOTE_CREDENTIALS = "remote-credentials"
    REMOTE_CAPPED = "remote-capped"
    CONFIG_WARNING = "config-warning"
    UNSAFE_ADDRESS = "unsafe-address"
    INVALID_NAME = "invalid-name"
    LOCALITY_SPILLED = "locality-spilled"  # local-first: no local member ready any more
    LOCALITY_LOCAL = "locality-local"  # local-first: local only again, or no longer local-first
    LOCALITY_NO_LOCAL = "locality-no-local"  # local-first, and no local Service
    LOCALITY_UNKNOWN = "locality-unknown"  # dnsside.io/locality holds no value dnsside knows

    @property
    def warning(self) -> bool:
        """Worth a warning (something is wrong), not just information."""
        return self in _WARNINGS


_WARNINGS = frozenset({Notice.REMOTE_LOST, Notice.REMOTE_CREDENTIALS, Notice.REMOTE_CAPPED,
                       Notice.ORPHANED, Notice.NAME_CLASH, Notice.LINKS_UNREADABLE,
                       Notice.LINK_WATCH_DOWN, Notice.LINK_REFUSED, Notice.CONFIG_WARNING,
                       Notice.UNSAFE_ADDRESS, Notice.INVALID_NAME, Notice.LOCALITY_SPILLED,
                       Notice.LOCALITY_UNKNOWN})


@dataclass(frozen=True, slots=True)
class Told:
    """One notice, with its sentence."""

    notice: Notice
    text: str


def plural(n: int, one: str, many: str) -> str:
    """``1 mirror is``, ``2 mirrors are``: the count with the words that agree with it."""
    return f"{n} {one if n == 1 else many}"


def orphaned(cluster: str, mirrors: int) -> Told:
    return Told(Notice.ORPHANED, (
        f"cluster {cluster}: {plural(mirrors, 'mirror is an orphan', 'mirrors are orphans')} "
        f"(no Link targets it): left out of every answer; remove "
        f"{'it' if mirrors == 1 else 'them'} with {UNLINK.format(cluster=cluster)}"))


def name_clash(cluster: str, members: int) -> Told:
    return Told(Notice.NAME_CLASH, (
        f"cluster {cluster}: {plural(members, 'member has', 'members have')} the name of a "
        f"local member (--cluster-name equals this linked cluster's name): the local members "
        f"win; set --cluster-name to this cluster's own name ({cluster} is a linked one)"))


def refused(cluster: str, source: str, why: Exclusion, items: Sequence[str]) -> Told:
    """What of one object is left out of every answer, told once per object (again only when
    what is refused of it changes); the first few items, and how many more."""
    shown = (", " if why is Exclusion.UNSAFE_ADDRESS else "; ").join(items[:_SHOWN])
    if len(items) > _SHOWN:
        shown += f" and {len(items) - _SHOWN} more"
    if why is Exclusion.UNSAFE_ADDRESS:
        s = "es" if len(items) > 1 else ""
        return Told(Notice.UNSAFE_ADDRESS, (
            f"cluster {cluster}: {source}: {len(items)} unsafe address{s} left out of every "
            f"answer (no pod or Service can own one): {shown}"))
    return Told(Notice.INVALID_NAME, f"cluster {cluster}: {source}: left out of every answer: "
                + shown)


_SHOWN = 10  # items a refusal notice lists


__all__ = [
    "CAP_FIX",
    "CREDENTIALS_FIX",
    "GATEWAY_FAILING",
    "LINK_WATCH_DOWN_FIX",
    "MIRRORING_OFF_FIX",
    "NO_REMOTE_ENDPOINTS",
    "UNLINK",
    "ClusterMirrors",
    "ConfigWarning",
    "Exclusion",
    "Notice",
    "Told",
    "bad_ports",
    "configuration_warnings",
    "invalid_label",
    "invalid_protocol",
    "mirror_health",
    "name_clash",
    "name_too_long",
    "orphaned",
    "refused",
    "unsafe_addresses",
    "unsafe_objects",
]


# --------------------------------------------------------------------------- --flat-network

CREDENTIALS_FIX = (
    "dnsside reads the Secret named by the Link's spec.clusterCredentialsSecret (key "
    "kubeconfig) with the Role `dnsside install --flat-network` adds; `linkerd multicluster "
    "link --cluster-name {cluster} ... | kubectl apply -f -` writes a fresh one")


# What to do when a linked cluster is capped, by cap (dnsside.sources.limits.CAPS).
CAP_FIX = {
    "endpoints": "if the cluster really is that large, raise --flat-network-max-endpoints or "
                 "serve fewer of its namespaces (--flat-network-namespaces)",
    "objects": "if the cluster really is that large, raise --flat-network-max-objects or "
               "serve fewer of its namespaces (--flat-network-namespaces)",
    "bytes": "no Kubernetes object is that large (etcd takes 1.5 MiB); if this one is, raise "
             "--flat-network-max-object-bytes",
    "time": "its API server sends too slowly (or a list that never ends); if it is only slow, "
            "raise --flat-network-timeout",
}
