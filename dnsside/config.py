"""Configuration: every flag once, how its values are read, and the checked ``Config``.

A flag has three spellings that must never drift:
``--srv-priority`` on the command line, ``DNSSIDE_SRV_PRIORITY`` in the environment
(a default the command line overrides; how ``dnsside install`` bakes settings into
the ConfigMap), and ``srv_priority`` in :class:`Config`. :data:`FLAGS` is the only
place they are written; the CLI, ``install`` and ``check`` all read it.

This module imports nothing else of dnsside, so every layer can use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from dnsside.netvalues import networks, ns_addresses, parse_hostport

SERVE, EXPLAIN, INSTALL, CHECK = "serve", "explain", "install", "check"
# Which commands take a flag; "install" means install offers it and bakes it into the
# ConfigMap as DNSSIDE_<FLAG>.
_SOURCE = frozenset({SERVE, EXPLAIN, INSTALL})  # what is read and how it is answered
_SERVING = frozenset({SERVE, INSTALL})  # how the server runs
_NOT_BAKED = frozenset({SERVE, EXPLAIN})  # set by the install layout itself

# What each command is for, as `dnsside --help` lists them.
COMMANDS = {
    SERVE: "answer the zones (*.svc-global) over DNS, from the API server or a file",
    EXPLAIN: "print the answer to one name and where each record of it comes from",
    INSTALL: "print the manifests that run dnsside in a cluster, and what makes its "
               "cluster DNS forward the zones to it",
    CHECK: "check an installed dnsside, its RBAC, the Links and the answers",
}
EXPLAIN_TYPES = "A, AAAA, SRV, TXT, SOA, NS or ANY"  # what explain's TYPE may be, as said
TRUE = frozenset({"1", "true", "yes"})  # what a boolean DNSSIDE_<FLAG> accepts as on
DEFAULT_ZONE = "svc-global."


def env_name(flag: str) -> str:
    """``--srv-priority`` → ``DNSSIDE_SRV_PRIORITY``."""
    return "DNSSIDE_" + flag.lstrip("-").replace("-", "_").upper()


@dataclass(frozen=True)
class Flag:
    """One command-line flag of ``serve`` / ``explain`` (``commands`` says which, and
    whether ``install`` bakes it into the ConfigMap)."""

    name: str  # --ttl
    type: Callable[[str], Any]  # str, int or float; bool for a switch
    default: Any  # for a repeatable flag, the value when none is given
    help: str | None
    commands: frozenset[str]
    repeatable: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None  # the word a user writes: FILE, HOST:PORT, NAME, SECONDS
    default_text: str | None = None  # the default in words, where it is worked out at start

    @property
    def env(self) -> str:
        return env_name(self.name)

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")

    @property
    def switch(self) -> bool:
        return self.type is bool

    @property
    def shown_default(self) -> str:
        """The default as ``--help`` and the README show it."""
        if self.default_text is not None:
            return self.default_text
        if self.switch:
            return "off"
        if self.repeatable:
            return ", ".join(self.default) or "none"
        return "none" if self.default is None else str(self.default)

    def from_env(self, text: str) -> Any:
        """The value ``DNSSIDE_<FLAG>=text`` stands for; a list for a repeatable flag."""
        if self.switch:
            return text.lower() in TRUE
        if self.repeatable:
            return [v for v in text.split(",") if v]
        return self.type(text)

    def to_env(self, value: Any) -> str:
        """The inverse of :meth:`from_env`. Raises ValueError for a list item with a comma."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            if any("," in str(v) for v in value):
                raise ValueError(f"{self.name} {value!r}: a value with a comma cannot be "
                                 f"passed through {self.env}")
            return ",".join(str(v) for v in value)
        return str(value)


FLAGS: tuple[Flag, ...] = (
    Flag("--source", str, "kube", "`kube` to watch the API server, or a YAML/JSON file "
         "of Services, EndpointSlices and Links (reloaded when it changes)", _NOT_BAKED,
         metavar="kube|FILE"),
    Flag("--kubeconfig", str, None, "kubeconfig for --source kube", _NOT_BAKED,
         metavar="FILE", default_text="$KUBECONFIG, ~/.kube/config, else in-cluster"),
    Flag("--cluster-name", str, "local", "name of this cluster in answers: the "
         "targetClusterName the other clusters' Links give it, a lower-case DNS label",
         _NOT_BAKED, metavar="NAME"),
    Flag("--zone", str, (DEFAULT_ZONE,), "served zone, repeatable",
         _SOURCE, repeatable=True, metavar="ZONE"),
    Flag("--mcs-zone", str, (), "also serve the Multi-Cluster Services "
         "(KEP-1645) names under this zone, e.g. clusterset.local.; repeatable", _SOURCE,
         repeatable=True, metavar="ZONE"),
    Flag("--catalog-zone", str, None, "also serve a catalog zone (RFC 9432, version 2) of "
         "this name, listing every --zone and --mcs-zone, so that secondaries configured "
         "with the catalog alone pick the zones up, e.g. catalog.invalid.", _SOURCE,
         metavar="ZONE", default_text="none"),
    Flag("--ns-address", str, (), "address of the zone's name server, the apex (NS glue, "
         "A/AAAA), repeatable", _SOURCE, repeatable=True, metavar="IP",
         default_text="$POD_IP, else the --listen address if specific, else 127.0.0.1"),
    Flag("--ttl", int, 5, "TTL of every record and SOA minimum", _SOURCE, metavar="SECONDS"),
    Flag("--publish-not-ready", bool, False, "answer with not-ready members too", _SOURCE),
    Flag("--no-local", bool, False, "leave this cluster's endpoints out", _SOURCE),
    Flag("--srv-priority", str, "equal", "SRV priority: all 0, or local members 0 and remote "
         "10", _SOURCE, choices=("equal", "local-first")),
    Flag("--locality", str, "all", "which clusters a global service's own name (A, AAAA, SRV; "
         "also its --mcs-zone name) answers: every cluster's ready members, or only this "
         "cluster's while it has a ready one (every cluster once none is); the local "
         "Service's dnsside.io/locality annotation overrides it", _SOURCE,
         choices=("all", "local-first")),
    Flag("--namespace", str, (), "watch only this namespace, repeatable (Links are read in "
         "--links-namespace whatever it says; include linkerd-multicluster, for the gateway "
         "probe's Services)", _SOURCE, repeatable=True,
         metavar="NAMESPACE", default_text="all"),
    Flag("--links-namespace", str, "linkerd-multicluster", "the namespace of Linkerd's "
         "Links and their credentials Secrets, the only one whose Links count (as for "
         "Linkerd's own controllers): a Link anywhere else is ignored, and of two Links for "
         "one cluster the older (creationTimestamp, then name) keeps it", _SOURCE,
         metavar="NAMESPACE"),
    Flag("--no-federated", bool, False,
         "leave out the members of Linkerd federated services (<svc>-federated)", _SOURCE),
    Flag("--flat-network", bool, False,
         "also watch each linked cluster with its Link's credentials and answer its pods' "
         "own IPs for headless services exported for remote discovery", _SOURCE),
    Flag("--insecure-remote-tls", bool, False,
         "with --flat-network: let a Link's kubeconfig skip the linked cluster's certificate "
         "check (insecure-skip-tls-verify), use a plain http:// server or a proxy-url; "
         "never an exec plugin or a file", _SOURCE),
    Flag("--flat-network-namespaces", str, (),
         "serve linked clusters' own objects (--flat-network) only in these namespaces, "
         "comma-separated or repeatable; others are ignored (logged once, counted in "
         "dnsside_remote_ignored_objects_total) and not even watched. All by default, because "
         "Linkerd mirrors a Service into the namespace of the same name, so a linked cluster "
         "may add members to any global service; name the namespaces you share to stop a "
         "linked cluster's admin from adding pods to the others", _SOURCE, repeatable=True,
         metavar="NAMESPACE", default_text="all"),
    Flag("--flat-network-max-endpoints", int, 100_000,
         "most endpoints one linked cluster may bring (--flat-network; in every slice kept, "
         "of Services not selected too); past it the cluster keeps its last complete list, "
         "is marked capped and retried", _SOURCE, metavar="N"),
    Flag("--flat-network-max-objects", int, 50_000,
         "most Services and EndpointSlices one linked cluster may bring (--flat-network), "
         "as for --flat-network-max-endpoints", _SOURCE, metavar="N"),
    Flag("--flat-network-max-object-bytes", int, 2 * 1024 * 1024,
         "longest object (one watch event line) a linked cluster's API may send; a list "
         "page over twice that is asked again with fewer items. Default 2 MiB: etcd stores "
         "objects up to 1.5 MiB",
         _SOURCE, metavar="BYTES"),
    Flag("--flat-network-timeout", float, 120.0,
         "seconds a linked cluster's API may take to send one list (all its pages) or one "
         "watch event (first byte to last): a list that never ends or a trickle is cut there",
         _SOURCE, metavar="SECONDS"),
    Flag("--flat-network-index-share", float, 0.05,
         "share of the time (0-1) the index may spend applying one linked cluster's watch "
         "events (a burst of four seconds' worth); past it the cluster is throttled: its "
         "events are coalesced (the latest state of each object) and applied as its share "
         "allows (1 to 20 s apart), so a flood costs that cluster's freshness, not "
         "everyone's latency",
         _SOURCE, metavar="FRACTION"),
    Flag("--kube-backoff-cap", float, 30.0,
         "longest wait, in seconds, between retries against the API server", _SOURCE,
         metavar="SECONDS"),
    Flag("--reload-interval", float, 1.0,
         "seconds between checks of a --source FILE for changes", _SOURCE, metavar="SECONDS"),
    Flag("--log-format", str, "text", "log lines as text, or one JSON object a line", _SOURCE,
         choices=("text", "json")),
    Flag("--log-level", str, "info", "the least severe level logged", _SOURCE,
         choices=("debug", "info", "warning", "error")),
    Flag("--listen", str, "127.0.0.1:5353", "DNS address (UDP and TCP); [::]:53 for every "
         "address", frozenset({SERVE}), metavar="HOST:PORT"),
    Flag("--http-listen", str, "127.0.0.1:9153",
         "/metrics, /healthz, /readyz, /debug/explain", frozenset({SERVE}),
         metavar="HOST:PORT"),
    Flag("--explain-from", str, ("127.0.0.0/8", "::1/128"), "networks whose clients may "
         "read /debug/explain (it names objects, Secrets and failures); repeatable",
         _SERVING, repeatable=True, metavar="CIDR",
         default_text="loopback only, which `kubectl port-forward` reaches"),
    Flag("--allow-transfer", str, (), "networks whose clients may transfer the zones "
         "(AXFR, IXFR over TCP); everybody else is refused; repeatable. With "
         "--tsig-key-file and no --allow-transfer, any address holding the key may", _SERVING,
         repeatable=True, metavar="CIDR",
         default_text="nobody; with --tsig-key-file alone, any address with the key"),
    Flag("--tsig-key-file", str, None, "a key file as `tsig-keygen` writes it (hmac-sha256, "
         "-384 or -512): every transfer must then be signed with it (TSIG), and the NOTIFYs "
         "are", _SERVING, metavar="FILE", default_text="none: transfers are not signed"),
    Flag("--notify", str, (), "secondary to send a NOTIFY to after each new zone version, "
         "retried until it answers (10 tries a version at most); repeatable", _SERVING,
         repeatable=True, metavar="HOST:PORT", default_text="nobody"),
    Flag("--ixfr-history", int, 64, "zone versions kept to answer IXFR with differences "
         "(fewer when their differences add up to more records than the zone has); a "
         "secondary older than that gets the whole zone; 0: always the whole zone",
         _SERVING, metavar="N"),
    Flag("--tcp-idle-timeout", float, 10.0, "seconds a TCP connection may stay idle",
         _SERVING, metavar="SECONDS"),
    Flag("--tcp-max-connections", int, 512, "most DNS-over-TCP connections open at once; "
         "when all are taken, the quietest connection of the client holding the most is "
         "closed for a new one", _SERVING, metavar="N"),
    Flag("--tcp-max-connections-per-client", int, 64, "most DNS-over-TCP connections one "
         "client (an IPv4 address, an IPv6 /64) holds; its quietest one is closed for a new "
         "one", _SERVING, metavar="N"),
    Flag("--http-max-connections", int, 128, "most HTTP connections open at once; when all "
         "are taken, the quietest connection of the client holding the most is closed for a "
         "new one", _SERVING, metavar="N"),
    Flag("--http-max-connections-per-client", int, 16, "most HTTP connections one client "
         "(an IPv4 address, an IPv6 /64) holds; its quietest one is closed for a new one",
         _SERVING, metavar="N"),
    Flag("--transfer-max", int, 10, "most zone transfers under way at once (BIND's "
         "transfers-out); one more is REFUSED", _SERVING, metavar="N"),
    Flag("--transfer-max-per-client", int, 2, "most zone transfers under way at once to one "
         "client (an IPv4 address, an IPv6 /64); one more is REFUSED", _SERVING, metavar="N"),
    Flag("--query-log", bool, False, "log every query (slow)", _SERVING),
    Flag("--gateway-probe", str, "auto", "probe each link's gateway and leave out the members "
         "behind a failing one (auto: on with --source kube, off with a file)", _SERVING,
         choices=("auto", "on", "off")),
    Flag("--gateway-probe-period", float, 1.0, "seconds between two probes of a gateway",
         _SERVING, metavar="SECONDS"),
    Flag("--gateway-probe-timeout", float, 1.0,
         "seconds a probe may take before it counts as failed", _SERVING, metavar="SECONDS"),
    Flag("--gateway-probe-failures", int, 2,
         "consecutive failed probes after which a gateway counts as failing", _SERVING,
         metavar="N"),
    Flag("--round-robin", str, "on", "rotate A, AAAA and SRV answers: each answer starts "
         "one record further on (off: always one order)", _SERVING, choices=("on", "off")),
    Flag("--no-uvloop", bool, False, "use asyncio's own event loop", _SERVING),
    Flag("--lameduck", float, 5.0, "after SIGTERM, stay not ready but keep answering this "
         "long, then stop", _SERVING, metavar="SECONDS"),
    Flag("--udp-io", str, "batch", "UDP system calls: batch (recvmmsg/sendmmsg, Linux; falls "
         "back to plain where unavailable) or plain (one recvfrom and one sendto per query)",
         _SERVING, choices=("batch", "plain")),
    Flag("--heap-trim-period", float, 10.0, "after changes, hand the heap memory they freed "
         "back to the system (glibc malloc_trim) at most once per this many seconds; 0: never",
         _SERVING, metavar="SECONDS"),
)
_BY_NAME = {f.name: f for f in FLAGS}


def flag(name: str) -> Flag:
    return _BY_NAME[name]


def flags_for(command: str) -> tuple[Flag, ...]:
    return tuple(f for f in FLAGS if command in f.commands)


def default(name: str) -> Any:
    """A flag's default, as :class:`Config` holds it."""
    return _BY_NAME[name].default


# --------------------------------------------------------------------------- values


# A host name label (RFC 952/1123): what a zone and a cluster name are made of.
_HOST_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def is_host_label(value: str) -> bool:
    """A host name label, lower case: letters, digits and '-', not first or last."""
    return bool(_HOST_LABEL.match(value))


def normal_zone(zone: str, what: str = "zone") -> str:
    """A zone as every part of dnsside compares it: lower case, absolute. Raises
    ValueError naming ``what`` for the root, or a name with a label that is no host name
    label (a zone holds service names, so it must be a host name itself)."""
    text = zone.strip()
    if text in ("", "."):
        raise ValueError(f"{what} {zone!r} is the root: dnsside would claim every name; "
                         "give a zone such as svc-global. or clusterset.local.")
    zone = text.lower() if text.endswith(".") else text.lower() + "."
    if len(zone) > 254:
        raise ValueError(f"{what} {text!r} is longer than a domain name may be (253 octets)")
    for label in zone[:-1].split("."):
        if not is_host_label(label):
            raise ValueError(f"{what} {text!r}: the label {label!r} is not a host name label "
                             "(letters, digits and '-', at most 63, '-' not first or last)")
    return zone


def zones_from_env(text: str) -> tuple[str, ...]:
    """The zones a ``DNSSIDE_ZONE`` value names (the default when it names none)."""
    return normal_zones(flag("--zone").from_env(text)) or flag("--zone").default


def normal_zones(zones: Sequence[str], what: str = "--zone") -> tuple[str, ...]:
    """Each zone normalised, in order, once."""
    return tuple(dict.fromkeys(normal_zone(z, what) for z in zones))


def within(name: str, zone: str) -> bool:
    """``name`` is ``zone`` or below it (both absolute, any case)."""
    name, zone = name.lower(), zone.lower()
    return zone == "." or name == zone or name.endswith("." + zone)


def check_cluster_name(name: str, what: str) -> None:
    """Raise ValueError unless ``name`` can be a Link's targetClusterName: a lower-case
    host name label. It is never lower-cased quietly: a cluster name means something only
    when it is spelled as the other clusters' Links spell it."""
    if is_host_label(name):
        return
    fixed = "-".join(x for x in re.split(r"[^a-z0-9]+", name.lower()) if x)[:63].strip("-")
    hint = f"; did you mean {fixed!r}?" if fixed and fixed != name else ""
    raise ValueError(f"{what} {name!r} is not a lower-case DNS label (letters, digits and '-'): "
                     "it must be spelled as the targetClusterName of the Links the other "
                     f"clusters hold for this one, which Linkerd keeps in that form{hint}")


# --------------------------------------------------------------------------- Config


@dataclass
class Config:
    """What ``serve`` and ``explain`` run with: the flags, normalised and checked."""

    source: str = default("--source")
    kubeconfig: str | None = default("--kubeconfig")
    cluster_name: str = default("--cluster-name")
    zones: Sequence[str] = default("--zone")
    mcs_zones: Sequence[str] = default("--mcs-zone")  # KEP-1645 names, e.g. clusterset.local.
    catalog_zone: str | None = default("--catalog-zone")  # RFC 9432 catalog of the zones
    listen: str = default("--listen")
    http_listen: str = default("--http-listen")
    explain_from: Sequence[str] = default("--explain-from")  # CIDRs that may read it
    allow_transfer: Sequence[str] = default("--allow-transfer")  # CIDRs that may transfer
    tsig_key_file: str | None = default("--tsig-key-file")  # transfers must be signed
    notify: Sequence[str] = default("--notify")  # HOST:PORT of the secondaries to notify
    ixfr_history: int = default("--ixfr-history")  # zone versions kept for IXFR
    ttl: int = default("--ttl")
    publish_not_ready: bool = default("--publish-not-ready")
    no_local: bool = default("--no-local")
    srv_priority: str = default("--srv-priority")
    locality: str = default("--locality")
    namespaces: Sequence[str] = default("--namespace")
    links_namespace: str = default("--links-namespace")  # where Links count
    tcp_idle_timeout: float = default("--tcp-idle-timeout")
    tcp_max_connections: int = default("--tcp-max-connections")
    tcp_max_connections_per_client: int = default("--tcp-max-connections-per-client")
    http_max_connections: int = default("--http-max-connections")
    http_max_connections_per_client: int = default("--http-max-connections-per-client")
    transfer_max: int = default("--transfer-max")
    transfer_max_per_client: int = default("--transfer-max-per-client")
    query_log: bool = default("--query-log")
    reload_interval: float = default("--reload-interval")
    kube_backoff_cap: float = default("--kube-backoff-cap")
    ns_addresses: tuple[str, ...] = ("127.0.0.1",)
    no_federated: bool = default("--no-federated")
    flat_network: bool = default("--flat-network")  # watch linked clusters directly
    insecure_remote_tls: bool = default("--insecure-remote-tls")  # Links may weaken TLS
    # --flat-network: what one linked cluster may cost, and where it may publish.
    flat_network_namespaces: Sequence[str] = default("--flat-network-namespaces")
    flat_network_max_endpoints: int = default("--flat-network-max-endpoints")
    flat_network_max_objects: int = default("--flat-network-max-objects")
    flat_network_max_object_bytes: int = default("--flat-network-max-object-bytes")
    flat_network_timeout: float = default("--flat-network-timeout")
    flat_network_index_share: float = default("--flat-network-index-share")
    gateway_probe: str = default("--gateway-probe")  # on, off, or auto: on for kube only
    gateway_probe_period: float = default("--gateway-probe-period")
    gateway_probe_timeout: float = default("--gateway-probe-timeout")
    gateway_probe_failures: int = default("--gateway-probe-failures")
    lameduck: float = default("--lameduck")  # seconds answering after SIGTERM, not ready
    udp_io: str = default("--udp-io")  # batch (recvmmsg/sendmmsg) or plain (recvfrom/sendto)
    heap_trim_period: float = default("--heap-trim-period")  # seconds; 0: no malloc_trim
    round_robin: str = default("--round-robin")  # on: answers rotate; off: one order

    @classmethod
    def from_flags(cls, command: str, values: Mapping[str, Any],
                   pod_ip: str | None = None) -> Config:
        """The Config of ``command`` from parsed flag values (by :attr:`Flag.dest`; None
        or absent = the default), normalised; :meth:`check` it before use."""
        taken = {f.dest for f in flags_for(command)}

        def get(name: str) -> Any:
            f = flag(name)
            value = values.get(f.dest) if f.dest in taken else None
            return f.default if value is None else value

        same = {f.name for f in fields(cls)}  # flags whose dest is a field's name
        config = cls(**{f.dest: get(f.name) for f in FLAGS if f.dest in same})
        config.zones = normal_zones(get("--zone")) or default("--zone")
        config.mcs_zones = normal_zones(get("--mcs-zone"), "--mcs-zone")
        catalog = get("--catalog-zone")
        config.catalog_zone = normal_zone(catalog, "--catalog-zone") if catalog else None
        config.namespaces = tuple(get("--namespace"))
        config.explain_from = tuple(get("--explain-from"))
        config.allow_transfer = tuple(get("--allow-transfer"))
        config.notify = tuple(get("--notify"))
        config.flat_network_namespaces = tuple(dict.fromkeys(
            n.strip() for v in get("--flat-network-namespaces") for n in v.split(",")
            if n.strip()))
        config.ns_addresses = ns_addresses(
            get("--ns-address"), pod_ip, get("--listen") if command == SERVE else None,
            f"--ns-address (or {flag('--ns-address').env})")
        return config

    @property
    def probing(self) -> bool:
        """A file dump is usually served far from its cluster (a laptop, CI), where its
        ClusterIPs are somebody else's addresses: probe them only when asked to."""
        if self.gateway_probe == "auto":
            return self.source == "kube"
        return self.gateway_probe == "on"

    def check(self) -> None:
        """Raise ValueError, naming the flag, for a value dnsside cannot run with."""
        check_cluster_name(self.cluster_name, "--cluster-name")
        for f in FLAGS:  # argparse checks a choice on the command line, not from DNSSIDE_*
            value = getattr(self, f.dest, None)
            if f.choices and value is not None and value not in f.choices:
                raise ValueError(f"{f.name} (or {f.env}) {value!r}: expected one of "
                                 f"{', '.join(f.choices)}")
        for zone in self.mcs_zones:
            if zone == ".":
                raise ValueError("--mcs-zone . would claim every name; give a zone such as "
                                 "clusterset.local.")
            for other in (*self.zones, *(z for z in self.mcs_zones if z != zone)):
                if within(zone, other) or within(other, zone):
                    which = "--zone" if other in self.zones else "--mcs-zone"
                    raise ValueError(f"--mcs-zone {zone} overlaps {which} {other}: a name in "
                                     "both would have two meanings; serve zones that do not "
                                     "nest")
        catalog = self.catalog_zone
        others = (*self.zones, *self.mcs_zones) if catalog is not None else ()
        for other in others:
            if catalog is not None and (within(catalog, other) or within(other, catalog)):
                which = "--zone" if other in self.zones else "--mcs-zone"
                raise ValueError(f"--catalog-zone {catalog} overlaps {which} {other}: a "
                                 "catalog lists the zones beside it, never above or in one")
        if self.flat_network and self.source != "kube":
            raise ValueError("--flat-network watches the linked clusters' APIs with the Links' "
                             "credentials: it needs --source kube")
        if self.insecure_remote_tls and not self.flat_network:
            raise ValueError("--insecure-remote-tls weakens TLS to the linked clusters "
                             "--flat-network watches: it needs --flat-network")
        if self.locality == "local-first" and self.no_local:
            raise ValueError("--locality local-first prefers this cluster's members, which "
                             "--no-local leaves out: choose one")
        if not is_host_label(self.links_namespace):
            raise ValueError(f"--links-namespace {self.links_namespace!r} is not a namespace "
                             "name")
        for ns in self.flat_network_namespaces:
            if not is_host_label(ns):  # a namespace name: an RFC 1123 label
                raise ValueError(f"--flat-network-namespaces {ns!r} is not a namespace name")
        if (self.flat_network_namespaces and self.namespaces
                and not set(self.flat_network_namespaces) & set(self.namespaces)):
            raise ValueError("--flat-network-namespaces and --namespace share no namespace: "
                             "no linked cluster's object could be served")
        for name, number in (("--flat-network-max-endpoints", self.flat_network_max_endpoints),
                             ("--flat-network-max-objects", self.flat_network_max_objects),
                             ("--flat-network-max-object-bytes",
                              self.flat_network_max_object_bytes),
                             ("--flat-network-timeout", self.flat_network_timeout),
                             ("--flat-network-index-share", self.flat_network_index_share)):
            if not number > 0:
                raise ValueError(f"{name} must be > 0, not {number}")
        if self.flat_network_index_share > 1:
            raise ValueError("--flat-network-index-share is a fraction of the time: at most 1, "
                             f"not {self.flat_network_index_share}")
        if self.ttl < 0:
            raise ValueError("--ttl must be >= 0")
        for name, value in (("--gateway-probe-period", self.gateway_probe_period),
                            ("--gateway-probe-timeout", self.gateway_probe_timeout)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, not {value}")
        if self.gateway_probe_failures < 1:
            raise ValueError("--gateway-probe-failures must be >= 1")
        if self.lameduck < 0:
            raise ValueError("--lameduck must be >= 0")
        if self.heap_trim_period < 0:
            raise ValueError("--heap-trim-period must be >= 0 (0: never)")
        parse_hostport(self.listen, "--listen")
        parse_hostport(self.http_listen, "--http-listen")
        networks(self.explain_from, "--explain-from")
        networks(self.allow_transfer, "--allow-transfer")
        for target in self.notify:
            parse_hostport(target, "--notify")
        for name, number in (("--tcp-max-connections", self.tcp_max_connections),
                             ("--tcp-max-connections-per-client",
                              self.tcp_max_connections_per_client),
                             ("--http-max-connections", self.http_max_connections),
                             ("--http-max-connections-per-client",
                              self.http_max_connections_per_client),
                             ("--transfer-max", self.transfer_max),
                             ("--transfer-max-per-client", self.transfer_max_per_client)):
            if number < 1:
                raise ValueError(f"{name} must be >= 1, not {number}")
        if self.ixfr_history < 0:
            raise ValueError(f"--ixfr-history must be >= 0, not {self.ixfr_history}")
