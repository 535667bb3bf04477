"""`dnsside install`: every manifest dnsside needs, generated in one place.

The output of :func:`manifests` is the single source of truth: ``deploy/base`` and
``deploy/overlays/sidecar`` are written from it by ``scripts/gen-deploy.py`` (and a
test fails when they drift), so what ``kubectl apply -k`` installs and what
``dnsside install | kubectl apply -f -`` installs are the same objects.

Two layouts (``--mode``):

* **standalone**: Namespace, ServiceAccount, read-only ClusterRole(+Binding),
  the ``dnsside`` ConfigMap, a Deployment (listening on both address families),
  a ClusterIP Service (PreferDualStack) and a PodDisruptionBudget.
* **sidecar**: the ConfigMap and RBAC in CoreDNS's namespace, bound to CoreDNS's
  ServiceAccount, and a *partial* ``coredns`` Deployment that only adds the
  ``dnsside`` container (apply it with ``kubectl apply --server-side
  --field-manager=dnsside`` so dnsside owns that container and nothing else).

Every ``serve`` flag not fixed by the layout can be baked into the ConfigMap as
``DNSSIDE_<FLAG>``: the install parser copies them from the serve parser
(:func:`bakeable_flags`), so a flag added to ``serve`` works here unchanged. The
container reads the whole ConfigMap with ``envFrom`` and the pod template carries
a hash of it, so re-running ``install`` with other flags rolls the pods.

``dnsside install coredns --flavor F`` prints what makes the cluster DNS forward
the zones to dnsside (:func:`coredns_output`), and ``dnsside install monitoring``
a PodMonitor and the PrometheusRule of :data:`ALERTS`.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dnsside import __version__

IMAGE = f"ghcr.io/dnsside/dnsside:{__version__}"
NAME = "dnsside"
LABELS = {"app.kubernetes.io/name": NAME}
MODES = ("standalone", "sidecar")
DNS_PORT = 5353
HTTP_PORT = 9153
SIDECAR_HTTP_PORT = 9154  # CoreDNS owns 9153 in its pod
TCP_CLOSE_GRACE = 3  # seconds App.shutdown gives open TCP connections after the lame duck
COREDNS_DEFAULT_GRACE = 30  # a pod's terminationGracePeriodSeconds when it sets none
CONFIG_HASH = "dnsside/config-hash"  # pod template annotation: a ConfigMap change rolls pods
DEFAULT_ZONE = "svc-global."

# What dnsside reads, and nothing else (SPEC §4): get/list/watch on these.
RBAC_RULES: tuple[tuple[str, str], ...] = (
    ("", "services"),
    ("discovery.k8s.io", "endpointslices"),
    ("multicluster.linkerd.io", "links"),
)

# serve flags the layout decides (or that make no sense in a pod); every other one is
# offered by `install` and baked into the ConfigMap.
NOT_BAKED = frozenset({"--help", "--source", "--kubeconfig", "--listen", "--http-listen",
                       "--cluster-name"})
# serve flags whose name `install` uses for something else.
RENAMED = {"--namespace": "--watch-namespace"}


class InstallError(ValueError):
    """A bad combination of install options; the message says which and why."""


# --------------------------------------------------------------------------- serve flags


@dataclass(frozen=True)
class BakeableFlag:
    """One ``serve`` flag as ``install`` offers it: ``option`` on the install command line,
    ``env`` in the ConfigMap."""

    serve_flag: str
    option: str
    dest: str
    env: str
    action: argparse.Action


def env_name(flag: str) -> str:
    """``--srv-priority`` → ``DNSSIDE_SRV_PRIORITY``, as ``dnsside.cli`` reads it."""
    return "DNSSIDE_" + flag.lstrip("-").replace("-", "_").upper()


def serve_parser() -> argparse.ArgumentParser:
    from dnsside.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            parser: argparse.ArgumentParser = action.choices["serve"]
            return parser
    raise AssertionError("dnsside.cli.build_parser has no serve command")


def bakeable_flags(serve: argparse.ArgumentParser | None = None) -> list[BakeableFlag]:
    """Every flag of ``serve`` (default: dnsside's own) that install bakes into the
    ConfigMap, and the option it goes by on the install command line."""
    flags = []
    for action in (serve or serve_parser())._actions:
        long = [s for s in action.option_strings if s.startswith("--")]
        if not long or long[0] in NOT_BAKED:
            continue
        flag = long[0]
        option = RENAMED.get(flag, flag)
        flags.append(BakeableFlag(flag, option, "serve_" + action.dest, env_name(flag), action))
    return flags


def add_bakeable_flags(parser: argparse.ArgumentParser, serve: argparse.ArgumentParser
                       ) -> list[BakeableFlag]:
    """Offer every bakeable flag of ``serve`` on ``parser``, with the serve flag's type,
    choices and action; a flag not given stays None (not baked)."""
    flags = bakeable_flags(serve)
    group = parser.add_argument_group(
        "dnsside serve flags", "baked into the dnsside ConfigMap as DNSSIDE_<FLAG> "
        "(see `dnsside serve --help`)")
    for f in flags:
        a = f.action
        kwargs: dict[str, Any] = {"dest": f.dest, "default": None, "help": a.help}
        if isinstance(a, argparse._StoreTrueAction):
            kwargs["action"] = "store_true"
        elif isinstance(a, argparse._StoreFalseAction):
            kwargs["action"] = "store_false"
        else:
            kwargs["action"] = "append" if isinstance(a, argparse._AppendAction) else "store"
            kwargs.update(type=a.type, choices=a.choices,
                          metavar=a.metavar or (None if a.choices else a.dest.upper()))
        try:
            group.add_argument(f.option, **kwargs)
        except argparse.ArgumentError as exc:  # a new serve flag clashes with an install flag
            raise AssertionError(f"serve flag {f.serve_flag} clashes with `install`: {exc}; "
                                 "add it to dnsside.install.RENAMED") from None
    return flags


def baked_settings(args: argparse.Namespace, flags: Iterable[BakeableFlag]) -> dict[str, str]:
    """The ConfigMap entries for the serve flags given on the install command line, in
    the form ``dnsside.cli`` reads back (booleans ``true``, lists comma-separated)."""
    out: dict[str, str] = {}
    for f in flags:
        value = getattr(args, f.dest, None)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list):
            if any("," in str(v) for v in value):
                raise InstallError(f"{f.option} {value!r}: a value with a comma cannot be "
                                   f"passed through {f.env}")
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        out[f.env] = text
    return out


# --------------------------------------------------------------------------- options


# The README's sizing table: the peak at 100k members, `--mcs-zone` and a full relist
# (bench/KUBE_RESULTS.md), with 20% to spare.
MEMORY_LIMIT = "384Mi"


@dataclass(frozen=True)
class InstallOptions:
    cluster_name: str
    mode: str = "standalone"
    namespace: str | None = None  # default: dnsside (standalone), kube-system (sidecar)
    image: str = IMAGE
    replicas: int = 2
    settings: Mapping[str, str] = field(default_factory=dict)  # DNSSIDE_* beyond the name
    memory_limit: str = MEMORY_LIMIT
    memory_request: str = "128Mi"
    coredns_deployment: str = "coredns"
    coredns_service_account: str = "coredns"

    @property
    def ns(self) -> str:
        if self.namespace:
            return self.namespace
        return "kube-system" if self.mode == "sidecar" else NAME

    @property
    def lameduck(self) -> float:
        raw = self.settings.get(env_name("--lameduck"))
        return float(raw) if raw is not None else 5.0

    def check(self) -> None:
        from dnsside.linkerd import is_dns_label

        if self.mode not in MODES:
            raise InstallError(f"--mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if not is_dns_label(self.cluster_name):
            raise InstallError(f"--cluster-name {self.cluster_name!r} is not a DNS label "
                               "(lower-case letters, digits and '-', at most 63)")
        if not is_dns_label(self.ns):
            raise InstallError(f"--namespace {self.ns!r} is not a valid namespace name")
        if self.replicas < 1:
            raise InstallError(f"--replicas {self.replicas}: at least 1")
        if not re.fullmatch(r"\d+(Ki|Mi|Gi)", self.memory_limit):
            raise InstallError(f"--memory-limit {self.memory_limit!r}: e.g. 512Mi or 1Gi")
        if self.lameduck < 0:
            raise InstallError("--lameduck must be >= 0")


def termination_grace(lameduck: float) -> int:
    """Seconds the kubelet must wait after SIGTERM: the lame duck, the TCP flush, a margin."""
    return math.ceil(lameduck) + TCP_CLOSE_GRACE + 2


# --------------------------------------------------------------------------- objects


def _meta(name: str, namespace: str | None = None,
          labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels if labels is not None else LABELS)
    return meta


def _cluster_role(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(name),
        "rules": [
            {"apiGroups": [group], "resources": [resource], "verbs": ["get", "list", "watch"]}
            for group, resource in RBAC_RULES
        ],
    }


def _binding(name: str, sa_namespace: str, sa_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
    }


def _config_map(opts: InstallOptions) -> dict[str, Any]:
    data = {env_name("--cluster-name"): opts.cluster_name, **dict(sorted(opts.settings.items()))}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(NAME, opts.ns),
            "data": data}


def config_hash(config_map: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config_map["data"], sort_keys=True).encode()).hexdigest()[:16]


_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _container(opts: InstallOptions, listen: str, http_listen: str, http_port: int,
               port_name: str, tmp_volume: str) -> dict[str, Any]:
    ports = [{"name": port_name, "containerPort": http_port, "protocol": "TCP"}]
    if opts.mode == "standalone":
        ports = [
            {"name": "dns", "containerPort": DNS_PORT, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"},
            *ports,
        ]
    container: dict[str, Any] = {
        "name": NAME,
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        # ENTRYPOINT is ["dnsside"]; these replace CMD ["serve"]. Everything else comes
        # from the ConfigMap (envFrom): DNSSIDE_<FLAG> is the flag's default.
        "args": ["serve", "--listen", listen, "--http-listen", http_listen],
        "envFrom": [{"configMapRef": {"name": NAME}}],
        "env": [
            # The zone's NS target gets the pod's address (--ns-address defaults to it).
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": ports,
    }
    if opts.mode == "standalone":
        # /readyz fails until the first complete sync and from SIGTERM on, so the
        # Service only sends queries to replicas that have an index and are staying.
        container["readinessProbe"] = {
            "httpGet": {"path": "/readyz", "port": port_name},
            "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 1,
        }
    # (sidecar: no readinessProbe on purpose: a container's readiness is the pod's, and an
    # unsynced dnsside, which answers SERVFAIL for its zones only, must not take cluster DNS
    # out of service. /readyz stays available for monitoring.)
    container["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": port_name},
        "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 2,
        "failureThreshold": 3,
    }
    # No CPU limit: CFS throttling shows up as DNS latency spikes. Memory: README's
    # sizing table (MEMORY_LIMIT holds 100k members at their peak, a full relist).
    container["resources"] = {
        "requests": {"cpu": "50m", "memory": opts.memory_request},
        "limits": {"memory": opts.memory_limit},
    }
    container["securityContext"] = dict(_SECURITY)
    container["volumeMounts"] = [{"name": tmp_volume, "mountPath": "/tmp"}]
    return container


def _tmp_volume(name: str) -> dict[str, Any]:
    # The root filesystem is read-only; give Python a small scratch /tmp.
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}


def _standalone(opts: InstallOptions) -> list[dict[str, Any]]:
    ns = opts.ns
    selector = {"matchLabels": dict(LABELS)}
    pod_labels = {**LABELS, "app.kubernetes.io/component": "dns"}
    cm = _config_map(opts)
    objs: list[dict[str, Any]] = []
    if not (ns == "default" or ns.startswith("kube-")):  # never relabel a system namespace
        objs.append({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": _meta(ns, labels={
                **LABELS,
                # The pod spec meets the "restricted" Pod Security Standard; enforce it.
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }),
        })
    objs += [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, ns)},
        _cluster_role(NAME),
        _binding(NAME, ns, NAME),
        cm,
    ]
    spread = [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": dict(LABELS)}}
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]
    pod_spec = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # dnsside watches the API server with it
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": termination_grace(opts.lameduck),
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        # One replica per node (and per zone where there are zones); "ScheduleAnyway" so a
        # single-node cluster (k3d, kind) still runs them all.
        "topologySpreadConstraints": spread,
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": dict(LABELS)}}},
        ]}},
        "containers": [_container(opts, f"[::]:{DNS_PORT}", f"[::]:{HTTP_PORT}", HTTP_PORT,
                                  "metrics", "tmp")],
        "volumes": [_tmp_volume("tmp")],
    }
    objs.append({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(NAME, ns, pod_labels),
        "spec": {
            "replicas": opts.replicas,
            "revisionHistoryLimit": 5,
            "selector": selector,
            # Never drop below the current number of serving replicas while rolling.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        CONFIG_HASH: config_hash(cm),
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(HTTP_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod_spec,
            },
        },
    })
    objs.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(NAME, ns),
        "spec": {
            "type": "ClusterIP",
            # Both families where the cluster has both: CoreDNS forwards to either.
            "ipFamilyPolicy": "PreferDualStack",
            "selector": dict(LABELS),
            "ports": [
                {"name": "dns", "port": DNS_PORT, "targetPort": "dns", "protocol": "UDP"},
                {"name": "dns-tcp", "port": DNS_PORT, "targetPort": "dns-tcp",
                 "protocol": "TCP"},
                {"name": "metrics", "port": HTTP_PORT, "targetPort": "metrics",
                 "protocol": "TCP"},
            ],
        },
    })
    if opts.replicas >= 2:  # with one replica a PDB of 1 would block every drain
        objs.append({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _meta(NAME, ns),
            "spec": {
                "minAvailable": 1,
                # A pod that never became ready (e.g. crash-looping) must not block a drain.
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
                "selector": selector,
            },
        })
    return objs


def _sidecar(opts: InstallOptions) -> list[dict[str, Any]]:
    ns = opts.ns
    role = f"{NAME}-{opts.coredns_deployment}"
    cm = _config_map(opts)
    pod_spec: dict[str, Any] = {
        "containers": [_container(opts, f"127.0.0.1:{DNS_PORT}", f"[::]:{SIDECAR_HTTP_PORT}",
                                  SIDECAR_HTTP_PORT, "dnsside-http", "dnsside-tmp")],
        "volumes": [_tmp_volume("dnsside-tmp")],
    }
    grace = termination_grace(opts.lameduck)
    if grace > COREDNS_DEFAULT_GRACE:  # never shorten what CoreDNS has
        pod_spec["terminationGracePeriodSeconds"] = grace
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": opts.coredns_deployment, "namespace": ns},
        "spec": {
            # The selector every CoreDNS install uses (kubeadm, k3s, EKS, AKS); it is
            # immutable, so a different one makes the apply fail instead of doing harm.
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"annotations": {CONFIG_HASH: config_hash(cm)}},
                "spec": pod_spec,
            },
        },
    }
    return [
        cm,
        _cluster_role(role),
        _binding(role, ns, opts.coredns_service_account),
        deployment,
    ]


def manifests(opts: InstallOptions) -> list[dict[str, Any]]:
    """Every object of an install, in apply order."""
    opts.check()
    return _standalone(opts) if opts.mode == "standalone" else _sidecar(opts)


# --------------------------------------------------------------------------- YAML


class _Dumper(yaml.SafeDumper):
    """Block style everywhere, literal blocks for multi-line strings (Corefiles)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def to_yaml(objs: Sequence[Mapping[str, Any]], header: str = "") -> str:
    body = yaml.dump_all([dict(o) for o in objs], Dumper=_Dumper, sort_keys=False,
                         default_flow_style=False, explicit_start=True, width=100)
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comment + body


# --------------------------------------------------------------------------- CoreDNS

FLAVORS = ("kubeadm", "k3s", "aks", "eks", "gke", "openshift", "nodelocaldns")
STANDALONE_ONLY = {
    "gke": "GKE runs kube-dns, not CoreDNS, and reconciles its Deployment",
    "openshift": "the DNS operator owns the CoreDNS DaemonSet and reverts a sidecar",
    "aks": "AKS reconciles its CoreDNS Deployment and would remove the sidecar",
}

# kubeadm's Corefile (cmd/kubeadm/app/phases/addons/dns/manifests.go), the cluster
# domain filled in; what `coredns` holds when nobody changed it.
KUBEADM_COREFILE = """\
.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""
# The EKS CoreDNS add-on's default Corefile.
EKS_COREFILE = """\
.:53 {
    errors
    health {
        lameduck 5s
      }
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
"""
# kubernetes/kubernetes cluster/addons/dns/nodelocaldns/nodelocaldns.yaml: the template
# node-cache fills in at start (__PILLAR__* are replaced by node-cache itself).
NODELOCAL_COREFILE = """\
{domain}:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    health __PILLAR__LOCAL__DNS__:8080
    }
in-addr.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    }
ip6.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    }
.:53 {
    errors
    cache 30
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__UPSTREAM__SERVERS__
    prometheus :9253
    }
"""
MARK = "# dnsside:"  # first line of every server block dnsside writes


@dataclass(frozen=True)
class CorednsOptions:
    flavor: str
    address: str  # HOST:PORT dnsside answers on (IPv6 as [addr]:port)
    zones: tuple[str, ...] = (DEFAULT_ZONE,)
    mode: str = "standalone"
    cluster_domain: str = "cluster.local"
    existing: Mapping[str, Any] | None = None  # --from: the live object to patch
    block_only: bool = False


def normal_zone(zone: str) -> str:
    from dnsside.wire import to_wire

    zone = zone.strip().lower()
    zone = zone if zone.endswith(".") else zone + "."
    try:
        to_wire(zone)
    except Exception as exc:
        raise InstallError(f"zone {zone!r} is not a domain name: {exc}") from None
    if zone == ".":
        raise InstallError("the root zone cannot be forwarded to dnsside")
    return zone


def parse_address(value: str) -> tuple[str, int]:
    """``IP``, ``IP:PORT`` or ``[IPv6]:PORT`` (port 5353 when absent)."""
    text = value.strip()
    host, port = text, DNS_PORT
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise InstallError(f"--address {value!r}: expected [IPv6]:PORT")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        if not p.isdigit():
            raise InstallError(f"--address {value!r}: the port is not a number")
        port = int(p)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise InstallError(f"--address {value!r}: CoreDNS forwards to IP addresses, not names "
                           "(kubectl -n dnsside get service dnsside -o "
                           "jsonpath='{.spec.clusterIP}')") from None
    if not 0 < port < 65536:
        raise InstallError(f"--address {value!r}: port out of range")
    return host, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def server_block(opts: CorednsOptions, *, nodelocal: Sequence[str] = ()) -> str:
    """The server block that forwards ``opts.zones`` to dnsside.

    ``prometheus`` so the zone's queries are counted with the rest of CoreDNS's,
    ``bufsize 1232`` so answers relayed over UDP stay unfragmented (DNS flag day 2020),
    ``cache 5`` = dnsside's TTL. ``nodelocal`` are node-local-dns's own ``bind`` and
    ``prometheus`` lines, copied so the block listens where the others do.
    """
    keys = " ".join(f"{z.rstrip('.')}:53" for z in opts.zones)
    lines = [f"{MARK} {', '.join(opts.zones)} answered by dnsside ({opts.mode} mode)",
             keys + " {", "    errors", "    cache 5"]
    if nodelocal:
        lines += [f"    {line}" for line in nodelocal]
    else:
        lines.append("    prometheus :9153")
    lines.append("    bufsize 1232")
    if opts.flavor == "nodelocaldns" and opts.mode == "sidecar":
        # dnsside listens on loopback inside the CoreDNS pods: go through CoreDNS, over
        # TCP like node-local-dns's cluster.local block (no conntrack entries per query).
        lines += ["    forward . __PILLAR__CLUSTER__DNS__ {", "        force_tcp", "    }"]
    else:
        lines.append(f"    forward . {opts.address}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def corefile_blocks(text: str) -> list[tuple[list[str], int, int]]:
    """Top-level server blocks of a Corefile: (keys, first line, last line), lines counted
    from 0. Enough structure to replace a block and read its directives; comments are
    skipped (a brace inside a quoted string would confuse it: Corefiles have none)."""
    blocks: list[tuple[list[str], int, int]] = []
    depth, start, keys = 0, 0, []
    for i, raw in enumerate(text.splitlines()):
        line = _strip_comment(raw).strip()
        if depth == 0 and "{" in line:
            keys, start = line.split("{", 1)[0].split(), i
            if not keys:
                raise InstallError(f"Corefile line {i + 1}: a block with no zone")
        depth += line.count("{") - line.count("}")
        if depth < 0:
            raise InstallError(f"Corefile line {i + 1}: '}}' without a matching '{{'")
        if depth == 0 and keys and ("{" in line or "}" in line):
            blocks.append((keys, start, i))
            keys = []
    if depth:
        raise InstallError("the Corefile has a '{' that is never closed")
    return blocks


def _strip_comment(line: str) -> str:
    out, quoted = [], False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        if ch == "#" and not quoted:
            break
        out.append(ch)
    return "".join(out)


def _zone_of(key: str) -> str:
    host = re.sub(r"^[a-z]+://", "", key.lower()).rsplit(":", 1)[0] if ":" in key else key
    return host.rstrip(".") + "."


def patch_corefile(corefile: str, opts: CorednsOptions, *, nodelocal: bool = False) -> str:
    """``corefile`` with dnsside's block added, or put in place of a block (dnsside's or
    anyone's) that already serves one of the zones; everything else is kept."""
    lines = corefile.splitlines()
    blocks = corefile_blocks(corefile)
    ours = set(opts.zones)
    copied: list[str] = []
    if nodelocal:
        for keys, first, last in blocks:
            if any(_zone_of(k) in ours for k in keys):
                continue
            body = [_strip_comment(x).strip() for x in lines[first + 1:last]]
            copied = [x for x in body if x.startswith(("bind ", "prometheus "))]
            break
    block = server_block(opts, nodelocal=copied).splitlines()
    for keys, first, last in reversed(blocks):
        if any(_zone_of(k) in ours for k in keys):
            if first > 0 and lines[first - 1].startswith(MARK):
                first -= 1
            del lines[first:last + 1]
            while first < len(lines) and first > 0 and not lines[first].strip() \
                    and not lines[first - 1].strip():
                del lines[first]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join([*lines, "", *block]).lstrip("\n") + "\n"


def _existing_data(opts: CorednsOptions, kind: str, key: str) -> str | None:
    if opts.existing is None:
        return None
    if opts.existing.get("kind") != kind:
        raise InstallError(f"--from: expected a {kind}, got {opts.existing.get('kind')!r}")
    data = opts.existing.get("data") if kind == "ConfigMap" else None
    if kind == "ConfigMap":
        value = (data or {}).get(key)
        if not isinstance(value, str):
            raise InstallError(f"--from: the ConfigMap has no data.{key}")
        return value
    return None


def _kept_meta(opts: CorednsOptions, name: str, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if opts.existing is not None:
        old = opts.existing.get("metadata") or {}
        for keep in ("labels", "annotations"):
            value = {k: v for k, v in (old.get(keep) or {}).items()
                     if k != "kubectl.kubernetes.io/last-applied-configuration"}
            if value:
                meta[keep] = value
    return meta


def coredns_output(opts: CorednsOptions) -> str:
    """What ``dnsside install coredns`` prints for ``opts.flavor``."""
    if opts.flavor not in FLAVORS:
        raise InstallError(f"--flavor {opts.flavor!r}: expected one of {', '.join(FLAVORS)}")
    if opts.mode == "sidecar" and opts.flavor in STANDALONE_ONLY:
        raise InstallError(f"--flavor {opts.flavor} works with standalone mode only: "
                           f"{STANDALONE_ONLY[opts.flavor]}")
    host, port = parse_address(opts.address)
    opts = CorednsOptions(opts.flavor, format_address(host, port),
                          tuple(dict.fromkeys(normal_zone(z) for z in opts.zones)), opts.mode,
                          opts.cluster_domain, opts.existing, opts.block_only)
    if opts.block_only:
        if opts.flavor in ("gke", "openshift"):
            raise InstallError(f"--block-only: --flavor {opts.flavor} has no Corefile")
        return server_block(opts)
    domain = opts.cluster_domain.rstrip(".")
    f = opts.flavor
    if f in ("k3s", "aks"):
        where = ("k3s imports /etc/coredns/custom/*.server from this optional ConfigMap and "
                 "never overwrites it" if f == "k3s" else
                 "AKS imports every *.server key of coredns-custom and keeps it on upgrades")
        custom: dict[str, Any] = dict((opts.existing or {}).get("data") or {})
        custom.pop(f"{NAME}.server", None)  # others' keys are kept; ours goes last
        custom[f"{NAME}.server"] = server_block(opts)
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": _kept_meta(opts, "coredns-custom", "kube-system"), "data": custom}
        return to_yaml([cm], f"{where}.\nApply, then restart CoreDNS (its reload plugin does "
                       "not watch imported files):\n  kubectl apply --server-side "
                       "--field-manager=dnsside -f -\n  kubectl -n kube-system rollout "
                       "restart deployment coredns")
    if f == "gke":
        if ":" in host:
            raise InstallError("kube-dns stubDomains take IPv4 addresses only")
        stubs: dict[str, Any] = {}
        data: dict[str, Any] = {}
        if opts.existing is not None:
            _existing_kind(opts, "ConfigMap")
            data = dict(opts.existing.get("data") or {})
            try:
                stubs = json.loads(data.get("stubDomains") or "{}")
            except ValueError as exc:
                raise InstallError(f"--from: data.stubDomains is not JSON: {exc}") from None
        for zone in opts.zones:
            stubs[zone.rstrip(".")] = [f"{host}:{port}"]
        data["stubDomains"] = json.dumps(stubs, sort_keys=True)
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": _kept_meta(opts, "kube-dns", "kube-system"), "data": data}
        return to_yaml([cm], "kube-dns (GKE Standard) forwards these stub domains to dnsside; "
                       "GKE keeps this ConfigMap\non upgrades, and NodeLocal DNSCache on GKE "
                       "reads it too.\n  kubectl apply -f -")
    if f == "openshift":
        servers: list[dict[str, Any]] = []
        spec: dict[str, Any] = {}
        if opts.existing is not None:
            _existing_kind(opts, "DNS")
            spec = dict(opts.existing.get("spec") or {})
            servers = [s for s in spec.get("servers") or [] if s.get("name") != NAME]
        servers.append({"name": NAME, "zones": [z.rstrip(".") for z in opts.zones],
                        "forwardPlugin": {"policy": "Random", "upstreams": [opts.address]}})
        spec["servers"] = servers
        dns = {"apiVersion": "operator.openshift.io/v1", "kind": "DNS",
               "metadata": {"name": "default"}, "spec": spec}
        return to_yaml([dns], "The DNS operator writes a server block for each spec.servers "
                       "entry into dns-default;\nit keeps spec on upgrades.\n  oc apply "
                       "--server-side --field-manager=dnsside -f -   (or oc edit dns.operator/"
                       "default)")
    # A Corefile flavor: the live Corefile (--from) or the distribution's default.
    if f == "nodelocaldns":
        name, key, base = "node-local-dns", "Corefile", NODELOCAL_COREFILE
    else:
        name, key = "coredns", "Corefile"
        base = EKS_COREFILE if f == "eks" else KUBEADM_COREFILE
    live = _existing_data(opts, "ConfigMap", key)
    corefile = patch_corefile(live if live is not None else base.replace("{domain}", domain),
                              opts, nodelocal=f == "nodelocaldns")
    source = "your Corefile (--from)" if live is not None else (
        f"the {'EKS add-on' if f == 'eks' else 'kubeadm' if f == 'kubeadm' else 'upstream'} "
        "default Corefile; if yours is customised, start from it:\n  kubectl -n kube-system "
        f"get configmap {name} -o yaml | dnsside install coredns --flavor {f} ... --from -")
    if f == "eks":
        # The managed add-on owns the ConfigMap: give it the Corefile as configuration values.
        return json.dumps({"corefile": corefile}, indent=2) + "\n"
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": _kept_meta(opts, name, "kube-system"), "data": {key: corefile}}
    if opts.existing is not None:
        cm["data"] = {**dict(opts.existing.get("data") or {}), key: corefile}
    return to_yaml([cm], f"{name} ConfigMap with dnsside's server block added to {source}\n"
                   "  kubectl apply -f -")


def _existing_kind(opts: CorednsOptions, kind: str) -> None:
    assert opts.existing is not None
    if opts.existing.get("kind") != kind:
        raise InstallError(f"--from: expected a {kind}, got {opts.existing.get('kind')!r}")


def read_existing(path: str) -> Mapping[str, Any]:
    """The object ``--from`` names (``-`` = stdin), YAML or JSON."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        obj = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise InstallError(f"--from {path}: {exc}") from None
    if not isinstance(obj, Mapping):
        raise InstallError(f"--from {path}: not a Kubernetes object")
    return obj


# --------------------------------------------------------------------------- monitoring


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    runbook: str  # one line; deploy/README.md repeats it under "Alerts"


# Metric names are dnsside's (dnsside/metrics.py): dnsside_gateway_probe_state{cluster,state}
# is 1 for the current state of each probed gateway (alive, failing, never-answered), and
# dnsside_orphaned_mirrors{cluster} counts the mirrors of clusters no Link targets.
ALERTS: tuple[Alert, ...] = (
    Alert("DnssideNotSynced",
          "max by (namespace, pod) (dnsside_source_synced) == 0", "5m", "critical",
          "dnsside {{ $labels.namespace }}/{{ $labels.pod }} has not synced with the API "
          "server for 5 minutes",
          "Before its first sync dnsside answers SERVFAIL; check its log for the list error "
          "(RBAC: `dnsside check --as system:serviceaccount:<ns>:dnsside`), then the API "
          "server."),
    Alert("DnssideWatchRestartsClimbing",
          "sum by (namespace, pod, resource) "
          "(increase(dnsside_watch_restarts_total{reason!=\"closed\"}[15m])) > 3",
          "15m", "warning",
          "dnsside keeps reopening its {{ $labels.resource }} watch",
          "Answers may lag behind the cluster; the `reason` label and the log say why "
          "(http-403: RBAC, http-429: API priority and fairness, timeout/connection: the "
          "network to the API server)."),
    Alert("DnssideGatewayProbeFailing",
          "max by (namespace, pod, cluster) "
          "(dnsside_gateway_probe_state{state=\"failing\"}) == 1", "1m", "warning",
          "the gateway of linked cluster {{ $labels.cluster }} fails dnsside's probe",
          "dnsside already leaves that cluster's gateway-routed members out; check the "
          "link with `linkerd multicluster gateways` and the remote gateway's pods."),
    Alert("DnssideOrphanedMirrors",
          "sum by (namespace, pod, cluster) (dnsside_orphaned_mirrors) > 0", "30m", "info",
          "mirrors of cluster {{ $labels.cluster }} match no Link",
          "A Link was deleted without `linkerd multicluster unlink`; dnsside ignores its "
          "mirrors; remove them with `linkerd multicluster unlink --cluster-name "
          "<cluster> | kubectl delete -f -`."),
    Alert("DnssideServfail",
          "sum by (namespace, pod) (rate(dnsside_queries_total{rcode=\"SERVFAIL\"}[5m])) "
          "/ sum by (namespace, pod) (rate(dnsside_queries_total[5m])) > 0.01", "5m",
          "critical",
          "dnsside {{ $labels.namespace }}/{{ $labels.pod }} answers SERVFAIL to more "
          "than 1% of queries",
          "dnsside answers SERVFAIL only while it has no index: see DnssideNotSynced, and "
          "`kubectl logs` of that pod for a crash-looping source."),
)


def prometheus_rule(namespace: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    rules = [
        {"alert": a.name, "expr": a.expr, "for": a.for_, "labels": {"severity": a.severity},
         "annotations": {"summary": a.summary, "runbook": a.runbook}}
        for a in ALERTS
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": _meta(NAME, namespace, {**LABELS, **(labels or {})}),
        "spec": {"groups": [{"name": NAME, "rules": rules}]},
    }


def pod_monitor(mode: str, namespace: str, labels: Mapping[str, str] | None = None
                ) -> dict[str, Any]:
    selector = dict(LABELS) if mode == "standalone" else {"k8s-app": "kube-dns"}
    port = "metrics" if mode == "standalone" else "dnsside-http"
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": _meta(NAME, namespace, {**LABELS, **(labels or {})}),
        "spec": {
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [{"port": port, "path": "/metrics"}],
        },
    }


def monitoring(mode: str, namespace: str, labels: Mapping[str, str] | None = None
               ) -> list[dict[str, Any]]:
    return [pod_monitor(mode, namespace, labels), prometheus_rule(namespace, labels)]


# --------------------------------------------------------------------------- deploy/

GENERATED = ("Generated by scripts/gen-deploy.py from `{command}`: "
             "edit dnsside/install.py, not this.")
_SENTINEL = "192.0.2.53"  # TEST-NET-1, replaced by a placeholder in the standalone snippet


def _file_name(obj: Mapping[str, Any], mode: str) -> str:
    if mode == "sidecar" and obj["kind"] == "Deployment":
        return "coredns-patch.yaml"
    return f"{obj['kind'].lower()}.yaml"


def _kustomization(files: Sequence[str], what: str) -> str:
    body = yaml.dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                      "resources": list(files)}, Dumper=_Dumper, sort_keys=False)
    return "".join(f"# {line}\n" for line in what.splitlines()) + body


def deploy_files() -> dict[str, str]:
    """Every generated file under deploy/, by path relative to the repository root."""
    out: dict[str, str] = {}
    for mode, folder in (("standalone", "deploy/base"), ("sidecar", "deploy/overlays/sidecar")):
        opts = InstallOptions(cluster_name="local", mode=mode)
        command = "dnsside install --cluster-name local" + (
            " --mode sidecar" if mode == "sidecar" else "")
        files = []
        for obj in manifests(opts):
            name = _file_name(obj, mode)
            files.append(name)
            out[f"{folder}/{name}"] = to_yaml([obj], GENERATED.format(command=command))
        if mode == "standalone":
            what = ("dnsside as its own Deployment + ClusterIP Service in namespace dnsside:\n"
                    "the same objects as `dnsside install --cluster-name local`. Set the\n"
                    "cluster name in an overlay (ConfigMap dnsside, DNSSIDE_CLUSTER_NAME), or\n"
                    "use `dnsside install --cluster-name NAME | kubectl apply -f -`.\n"
                    + GENERATED.format(command=command))
        else:
            what = ("dnsside as a container of CoreDNS's pods (kube-system/coredns): the same\n"
                    "objects as `dnsside install --cluster-name local --mode sidecar`.\n"
                    "coredns-patch.yaml is a partial Deployment: apply with\n"
                    "  kubectl apply --server-side --field-manager=dnsside -k .\n"
                    "so only the dnsside container is owned by dnsside.\n"
                    + GENERATED.format(command=command))
        out[f"{folder}/kustomization.yaml"] = _kustomization(files, what)
    sidecar = CorednsOptions("kubeadm", f"127.0.0.1:{DNS_PORT}", mode="sidecar")
    standalone = CorednsOptions("kubeadm", f"{_SENTINEL}:{DNS_PORT}")
    note = "# " + GENERATED.format(command="dnsside install coredns --block-only ...") + "\n"
    out["deploy/coredns/Corefile.snippet"] = (
        note + "# Sidecar mode: add at the top level of the Corefile (next to .:53, not in it).\n"
        + coredns_output(CorednsOptions(**{**sidecar.__dict__, "block_only": True})))
    out["deploy/coredns/Corefile.service.snippet"] = (
        note + "# Standalone mode: the ClusterIP of Service dnsside/dnsside goes in forward:\n"
        "#   kubectl -n dnsside get service dnsside -o jsonpath='{.spec.clusterIP}'\n"
        "# (or let `dnsside install coredns --flavor F` read it from the cluster).\n"
        + coredns_output(CorednsOptions(**{**standalone.__dict__, "block_only": True}))
        .replace(_SENTINEL, "<dnsside-service-ClusterIP>"))
    k3s = coredns_output(CorednsOptions("k3s", f"127.0.0.1:{DNS_PORT}", mode="sidecar"))
    out["deploy/coredns/coredns-custom-configmap.yaml"] = (
        "# " + GENERATED.format(command="dnsside install coredns --flavor k3s --mode sidecar")
        + "\n" + k3s)
    out["deploy/monitoring/monitoring.yaml"] = to_yaml(
        monitoring("standalone", NAME),
        GENERATED.format(command="dnsside install monitoring") + "\nPodMonitor + "
        "PrometheusRule (prometheus-operator); runbooks: deploy/README.md, Alerts.")
    return out
