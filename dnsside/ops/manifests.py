"""The objects of ``dnsside install``: one function builds every manifest of a layout.

Two layouts (``--mode``):

* **standalone**: Namespace, ServiceAccount, read-only ClusterRole(+Binding),
  the ``dnsside`` ConfigMap, a Deployment (listening on both address families, on
  port 53 so the zone's NS glue, the pod's IP, answers), a ClusterIP Service
  (PreferDualStack, port 53) and a PodDisruptionBudget.
* **sidecar**: the ConfigMap and RBAC in CoreDNS's namespace, bound to CoreDNS's
  ServiceAccount, and a *partial* ``coredns`` Deployment that only adds the
  ``dnsside`` container (apply it with ``kubectl apply --server-side
  --field-manager=dnsside`` so dnsside owns that container and nothing else). It
  listens on 127.0.0.1:5353: CoreDNS holds port 53 in that pod.

Links are read in one namespace (``--links-namespace``, Linkerd's
``linkerd-multicluster``), so their grant is a Role and RoleBinding there, not part of
the ClusterRole: a Link elsewhere is not even readable. With ``--flat-network`` (baked
as ``DNSSIDE_FLAT_NETWORK``) that Role also grants ``get`` on Secrets, where each Link's
credentials Secret lives; without it dnsside can read no Secret anywhere. The Role needs
that namespace to exist: Linkerd's multicluster extension, which dnsside serves, makes it.

With ``--tsig-key-file`` the key goes into a Secret (``dnsside-tsig``), never into the
ConfigMap, which anyone who may read the namespace's ConfigMaps can read: the Secret is
mounted read-only into the dnsside container alone and the ConfigMap holds only its path.
dnsside reads it as a file, so RBAC grants nothing more.

The ConfigMap is where care goes: every ``serve`` setting the layout does not fix is
baked into it as ``DNSSIDE_<FLAG>`` (:mod:`dnsside.config`), the container reads it
whole with ``envFrom``, and the pod template carries a hash of it, so re-running
``install`` with other flags rolls the pods. ``deploy/`` is written from
:func:`manifests` (:mod:`dnsside.ops.deploy`), so ``kubectl apply -k`` and
``dnsside install | kubectl apply -f -`` install the same objects.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dnsside import __version__
from dnsside.config import check_cluster_name, flag
from dnsside.dns.names import is_dns_label

IMAGE = f"ghcr.io/dnsside/dnsside:{__version__}"
NAME = "dnsside"
LABELS = {"app.kubernetes.io/name": NAME}
MODES = ("standalone", "sidecar")
DNS_PORT = 53  # standalone: where a resolver following the NS glue (no port) asks
SIDECAR_DNS_PORT = 5353  # CoreDNS holds 53 in its own pod
# The lowest port a non-root process may bind in the pod's network namespace (kernel
# default 1024). A "safe" sysctl since Kubernetes 1.22: the kubelet allows it without
# --allowed-unsafe-sysctls, and the "restricted" Pod Security Standard admits it.
UNPRIVILEGED_PORT_SYSCTL = "net.ipv4.ip_unprivileged_port_start"
HTTP_PORT = 9153
SIDECAR_HTTP_PORT = 9154  # CoreDNS owns 9153 in its pod
TCP_CLOSE_GRACE = 3  # seconds App.shutdown gives open TCP connections after the lame duck
COREDNS_DEFAULT_GRACE = 30  # a pod's terminationGracePeriodSeconds when it sets none
CONFIG_HASH = "dnsside/config-hash"  # pod template annotation: a ConfigMap change rolls pods
TSIG_HASH = "dnsside/tsig-key-hash"  # the same for the key, which dnsside reads at start only
TSIG_SECRET = "dnsside-tsig"  # the Secret, its volume in the pod, its file "key"
TSIG_DIR = "/etc/dnsside/tsig"
TSIG_KEY_PATH = f"{TSIG_DIR}/key"  # what the ConfigMap sets --tsig-key-file to

# What dnsside reads cluster-wide, and nothing else: get/list/watch on these.
RBAC_RULES: tuple[tuple[str, str], ...] = (
    ("", "services"),
    ("discovery.k8s.io", "endpointslices"),
)
# ... and in the links namespace only: get/list/watch on Links, get on Secrets (with
# --flat-network).
LINKS_RULE = ("multicluster.linkerd.io", "links")
SECRET_RULE = ("", "secrets")
LINKS_NAMESPACE = flag("--links-namespace").default  # Linkerd's linkerd-multicluster


class InstallError(ValueError):
    """A bad combination of install options; the message says which and why."""


# The sizing table of docs/operating.md: the peak at 100k members, `--mcs-zone` and a full relist
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
    # Standalone DNS port (--dns-port); None = DNS_PORT. Below 1024 the pod sets
    # UNPRIVILEGED_PORT_SYSCTL; 5353 is for clusters that do not allow that sysctl
    # (Kubernetes < 1.22), and then no resolver that follows the NS reaches dnsside.
    dns_port: int | None = None
    # --tsig-key-file: the key file's text, checked by the caller (it is a secret: only the
    # Secret holds it). The ConfigMap then sets DNSSIDE_TSIG_KEY_FILE to TSIG_KEY_PATH.
    tsig_key: str | None = None

    @property
    def port(self) -> int:
        """The DNS port the layout listens on and (standalone) the Service exposes."""
        if self.mode == "sidecar":
            return SIDECAR_DNS_PORT
        return DNS_PORT if self.dns_port is None else self.dns_port

    @property
    def ns(self) -> str:
        if self.namespace:
            return self.namespace
        return "kube-system" if self.mode == "sidecar" else NAME

    @property
    def flat_network(self) -> bool:
        """Whether the ConfigMap turns on --flat-network (then dnsside needs Secrets)."""
        return self.settings.get(flag("--flat-network").env) == "true"

    @property
    def baked(self) -> dict[str, str]:
        """What the ConfigMap holds beyond the cluster name. A sidecar's one DNS client is
        CoreDNS over loopback, which forwards every node's TCP (NodeLocal DNSCache's
        ``force_tcp``) on its own connections: the per-client TCP cap would cap CoreDNS
        alone, so it is the global one there unless set."""
        baked = dict(self.settings)
        if self.mode == "sidecar":
            total = flag("--tcp-max-connections")
            baked.setdefault(flag("--tcp-max-connections-per-client").env,
                             baked.get(total.env, str(total.default)))
        if self.tsig_key is not None:
            baked[flag("--tsig-key-file").env] = TSIG_KEY_PATH
        return baked

    @property
    def links_namespace(self) -> str:
        """Where the Links (and their Secrets) are read: the Role goes there."""
        return self.settings.get(flag("--links-namespace").env) or LINKS_NAMESPACE

    @property
    def config_data(self) -> dict[str, str]:
        """The dnsside ConfigMap's data: the environment ``serve`` reads in the pods."""
        return {flag("--cluster-name").env: self.cluster_name,
                **dict(sorted(self.baked.items()))}

    @property
    def lameduck(self) -> float:
        lameduck = flag("--lameduck")
        raw = self.settings.get(lameduck.env)
        return float(raw) if raw is not None else float(lameduck.default)

    def check(self) -> None:
        if self.mode not in MODES:
            raise InstallError(f"--mode {self.mode!r}: expected one of {', '.join(MODES)}")
        try:
            check_cluster_name(self.cluster_name, "--cluster-name")
        except ValueError as exc:
            raise InstallError(str(exc)) from None
        if not is_dns_label(self.ns):
            raise InstallError(f"--namespace {self.ns!r} is not a valid namespace name")
        if self.dns_port is not None:
            if self.mode == "sidecar":
                raise InstallError(f"--dns-port: the sidecar listens on 127.0.0.1:"
                                   f"{SIDECAR_DNS_PORT} (CoreDNS holds 53 in its pod)")
            if not 1 <= self.dns_port <= 65535 or self.dns_port == HTTP_PORT:
                raise InstallError(f"--dns-port {self.dns_port}: a port from 1 to 65535, "
                                   f"not the metrics port {HTTP_PORT}")
        if self.settings.get(flag("--insecure-remote-tls").env) == "true" and \
                not self.flat_network:
            raise InstallError("--insecure-remote-tls: only --flat-network connects to the "
                               "linked clusters; add --flat-network or drop it")
        if not is_dns_label(self.links_namespace):
            raise InstallError(f"--links-namespace {self.links_namespace!r} is not a valid "
                               "namespace name")
        if flag("--tsig-key-file").env in self.settings:
            raise InstallError("--tsig-key-file: the key goes into a Secret (tsig_key), "
                               "never into the ConfigMap")
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


def meta(name: str, namespace: str | None = None,
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
        "metadata": meta(name),
        "rules": [
            {"apiGroups": [group], "resources": [resource], "verbs": ["get", "list", "watch"]}
            for group, resource in RBAC_RULES
        ],
    }


def _binding(name: str, sa_namespace: str, sa_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
    }


def _links_rbac(opts: InstallOptions, name: str, sa_name: str) -> list[dict[str, Any]]:
    """A Role (not a ClusterRole) in the links namespace: Links are read there only, so a
    Link written elsewhere is not even readable. With --flat-network it also grants
    ``get`` on Secrets, and only ``get``: dnsside reads each Link's Secret by its name and
    never needs to list the others there."""
    ns = opts.links_namespace
    group, resource = LINKS_RULE
    rules: list[dict[str, Any]] = [{"apiGroups": [group], "resources": [resource],
                                    "verbs": ["get", "list", "watch"]}]
    if opts.flat_network:
        group, resource = SECRET_RULE
        rules.append({"apiGroups": [group], "resources": [resource], "verbs": ["get"]})
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": meta(name, ns), "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": meta(name, ns),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": opts.ns}]},
    ]


def _config_map(opts: InstallOptions) -> dict[str, Any]:
    data = opts.config_data
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(NAME, opts.ns),
            "data": data}


def _tsig_secret(opts: InstallOptions) -> list[dict[str, Any]]:
    if opts.tsig_key is None:
        return []
    return [{"apiVersion": "v1", "kind": "Secret", "metadata": meta(TSIG_SECRET, opts.ns),
             "type": "Opaque",
             "data": {"key": base64.b64encode(opts.tsig_key.encode()).decode()}}]


def _tsig_volume(opts: InstallOptions) -> list[dict[str, Any]]:
    # 0444: the pod runs as 65532 and the kubelet writes the file as root; only the dnsside
    # container mounts it (in sidecar mode CoreDNS's containers do not see it).
    if opts.tsig_key is None:
        return []
    return [{"name": TSIG_SECRET, "secret": {"secretName": TSIG_SECRET, "defaultMode": 0o444}}]


def pod_annotations(opts: InstallOptions, cm: Mapping[str, Any]) -> dict[str, str]:
    """The hashes that roll the pods when what dnsside reads at start changes. The key's
    is a SHA-256 of the key file cut to 64 bits: it tells versions apart and, of a 256-bit
    random secret, gives nothing away."""
    out = {CONFIG_HASH: config_hash(cm)}
    if opts.tsig_key is not None:
        out[TSIG_HASH] = hashlib.sha256(opts.tsig_key.encode()).hexdigest()[:16]
    return out


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
            {"name": "dns", "containerPort": opts.port, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": opts.port, "protocol": "TCP"},
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
    # No CPU limit: CFS throttling shows up as DNS latency spikes. Memory: the sizing
    # table of docs/operating.md (MEMORY_LIMIT holds 100k members at their peak, a full relist).
    container["resources"] = {
        "requests": {"cpu": "50m", "memory": opts.memory_request},
        "limits": {"memory": opts.memory_limit},
    }
    container["securityContext"] = dict(_SECURITY)
    container["volumeMounts"] = [{"name": tmp_volume, "mountPath": "/tmp"}]
    if opts.tsig_key is not None:
        container["volumeMounts"].append({"name": TSIG_SECRET, "mountPath": TSIG_DIR,
                                          "readOnly": True})
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
            "metadata": meta(ns, labels={
                **LABELS,
                # The pod spec meets the "restricted" Pod Security Standard; enforce it.
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }),
        })
    objs += [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, ns)},
        _cluster_role(NAME),
        _binding(NAME, ns, NAME),
        *_links_rbac(opts, NAME, NAME),
        *_tsig_secret(opts),
        cm,
    ]
    spread = [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": dict(LABELS)}}
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]
    pod_security: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": 65532,
                                    "runAsGroup": 65532,
                                    "seccompProfile": {"type": "RuntimeDefault"}}
    if opts.port < 1024:
        # Port 53 as non-root with no capability: ports from opts.port up become
        # unprivileged in the pod's network namespace (and in it only).
        pod_security["sysctls"] = [{"name": UNPRIVILEGED_PORT_SYSCTL, "value": str(opts.port)}]
    pod_spec = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # dnsside watches the API server with it
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": termination_grace(opts.lameduck),
        "securityContext": pod_security,
        # One replica per node (and per zone where there are zones); "ScheduleAnyway" so a
        # single-node cluster (k3d, kind) still runs them all.
        "topologySpreadConstraints": spread,
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": dict(LABELS)}}},
        ]}},
        "containers": [_container(opts, f"[::]:{opts.port}", f"[::]:{HTTP_PORT}", HTTP_PORT,
                                  "metrics", "tmp")],
        "volumes": [_tmp_volume("tmp"), *_tsig_volume(opts)],
    }
    objs.append({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta(NAME, ns, pod_labels),
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
                        **pod_annotations(opts, cm),
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
        "metadata": meta(NAME, ns),
        "spec": {
            "type": "ClusterIP",
            # Both families where the cluster has both: CoreDNS forwards to either.
            "ipFamilyPolicy": "PreferDualStack",
            "selector": dict(LABELS),
            "ports": [
                {"name": "dns", "port": opts.port, "targetPort": "dns", "protocol": "UDP"},
                {"name": "dns-tcp", "port": opts.port, "targetPort": "dns-tcp",
                 "protocol": "TCP"},
                {"name": "metrics", "port": HTTP_PORT, "targetPort": "metrics",
                 "protocol": "TCP"},
            ],
        },
    })
    if opts.replicas >= 2:  # with one replica a PDB of 1 would block every drain
        objs.append({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": meta(NAME, ns),
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
        "containers": [_container(opts, f"127.0.0.1:{SIDECAR_DNS_PORT}",
                                  f"[::]:{SIDECAR_HTTP_PORT}", SIDECAR_HTTP_PORT,
                                  "dnsside-http", "dnsside-tmp")],
        "volumes": [_tmp_volume("dnsside-tmp"), *_tsig_volume(opts)],
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
                "metadata": {"annotations": pod_annotations(opts, cm)},
                "spec": pod_spec,
            },
        },
    }
    return [
        *_tsig_secret(opts),
        cm,
        _cluster_role(role),
        _binding(role, ns, opts.coredns_service_account),
        *_links_rbac(opts, role, opts.coredns_service_account),
        deployment,
    ]


def manifests(opts: InstallOptions) -> list[dict[str, Any]]:
    """Every object of an install, in apply order."""
    opts.check()
    return _standalone(opts) if opts.mode == "standalone" else _sidecar(opts)
