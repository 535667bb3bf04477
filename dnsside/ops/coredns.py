"""``dnsside install coredns --flavor F``: what makes each cluster DNS forward the zones.

One function per flavour, each returning what ``install coredns`` prints; what they
share is dnsside's server block and the Corefile patching (:mod:`dnsside.ops.corefile`).
The tricky thing is ``--from``: given the live object, everything in it that is not
dnsside's is kept (other keys, labels, annotations, other server blocks).
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from dnsside.config import DEFAULT_ZONE, format_hostport, normal_zone, split_hostport
from dnsside.ops import corefile
from dnsside.ops.manifests import DNS_PORT, NAME, InstallError
from dnsside.ops.yamlout import to_yaml

STANDALONE_ONLY = {
    "gke": "GKE runs kube-dns, not CoreDNS, and reconciles its Deployment",
    "openshift": "the DNS operator owns the CoreDNS DaemonSet and reverts a sidecar",
    "aks": "AKS reconciles its CoreDNS Deployment and would remove the sidecar",
}
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class CorednsOptions:
    flavor: str
    address: str  # HOST:PORT dnsside answers on (IPv6 as [addr]:port)
    zones: tuple[str, ...] = (DEFAULT_ZONE,)
    mode: str = "standalone"
    cluster_domain: str = "cluster.local"
    existing: Mapping[str, Any] | None = None  # --from: the live object to patch
    block_only: bool = False

    def block(self, nodelocal: list[str] | None = None) -> str:
        """dnsside's server block for these options."""
        return corefile.server_block(
            self.zones, self.address, self.mode, nodelocal=nodelocal or (),
            through_cluster_dns=self.flavor == "nodelocaldns" and self.mode == "sidecar")


def forward_zone(zone: str) -> str:
    try:
        zone = normal_zone(zone)
    except ValueError as exc:
        raise InstallError(str(exc)) from None
    if zone == ".":
        raise InstallError("the root zone cannot be forwarded to dnsside")
    return zone


def parse_address(value: str) -> tuple[str, int]:
    """``IP``, ``IP:PORT``, ``[IPv6]:PORT`` or a bare IPv6 address (port 53, the
    standalone Service's, when absent)."""
    try:
        host, port = split_hostport(value, DNS_PORT)
    except ValueError as exc:
        raise InstallError(f"--address {value!r}: {exc}") from None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise InstallError(f"--address {value!r}: CoreDNS forwards to IP addresses, not names "
                           "(kubectl -n dnsside get service dnsside -o "
                           "jsonpath='{.spec.clusterIP}')") from None
    if port == 0:
        raise InstallError(f"--address {value!r}: port out of range")
    return host, port


def coredns_output(opts: CorednsOptions) -> str:
    """What ``dnsside install coredns`` prints for ``opts.flavor``."""
    if opts.flavor not in FLAVORS:
        raise InstallError(f"--flavor {opts.flavor!r}: expected one of {', '.join(FLAVORS)}")
    if opts.mode == "sidecar" and opts.flavor in STANDALONE_ONLY:
        raise InstallError(f"--flavor {opts.flavor} works with standalone mode only: "
                           f"{STANDALONE_ONLY[opts.flavor]}")
    host, port = parse_address(opts.address)
    opts = replace(opts, address=format_hostport(host, port),
                   zones=tuple(dict.fromkeys(forward_zone(z) for z in opts.zones)))
    if opts.block_only:
        if opts.flavor in ("gke", "openshift"):
            raise InstallError(f"--block-only: --flavor {opts.flavor} has no Corefile")
        return opts.block()
    return FLAVORS[opts.flavor](opts)


def _custom(opts: CorednsOptions, where: str) -> str:
    """k3s and AKS: a ``coredns-custom`` ConfigMap whose ``*.server`` keys CoreDNS imports."""
    custom: dict[str, Any] = dict((opts.existing or {}).get("data") or {})
    custom.pop(f"{NAME}.server", None)  # others' keys are kept; ours goes last
    custom[f"{NAME}.server"] = opts.block()
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": _kept_meta(opts, "coredns-custom", "kube-system"), "data": custom}
    return to_yaml([cm], f"{where}.\nApply, then restart CoreDNS (its reload plugin does "
                   "not watch imported files):\n  kubectl apply --server-side "
                   "--field-manager=dnsside -f -\n  kubectl -n kube-system rollout "
                   "restart deployment coredns")


def k3s(opts: CorednsOptions) -> str:
    return _custom(opts, "k3s imports /etc/coredns/custom/*.server from this optional "
                   "ConfigMap and never overwrites it")


def aks(opts: CorednsOptions) -> str:
    return _custom(opts, "AKS imports every *.server key of coredns-custom and keeps it on "
                   "upgrades")


def gke(opts: CorednsOptions) -> str:
    """kube-dns's ``stubDomains``."""
    host, port = split_hostport(opts.address)
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


def openshift(opts: CorednsOptions) -> str:
    """The DNS operator's ``spec.servers``."""
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


def eks(opts: CorednsOptions) -> str:
    """The managed add-on owns the ConfigMap: the Corefile as its configuration values."""
    return json.dumps({"corefile": _patched(opts)}, indent=2) + "\n"


def kubeadm(opts: CorednsOptions) -> str:
    return _corefile_configmap(opts, "coredns", _patched(opts))


def nodelocaldns(opts: CorednsOptions) -> str:
    return _corefile_configmap(opts, "node-local-dns", _patched(opts))


def _patched(opts: CorednsOptions) -> str:
    """The live Corefile (--from) or the flavour's default, with dnsside's block in."""
    live = _live_corefile(opts)
    text = live if live is not None else corefile.upstream(
        opts.flavor, opts.cluster_domain.rstrip("."))
    nodelocal = (corefile.listen_lines(text, opts.zones) if opts.flavor == "nodelocaldns"
                 else None)
    return corefile.patch(text, opts.zones, opts.block(nodelocal))


def _corefile_configmap(opts: CorednsOptions, name: str, text: str) -> str:
    if opts.existing is not None:
        source = "your Corefile (--from)"
        data = {**dict(opts.existing.get("data") or {}), "Corefile": text}
    else:
        origin = "kubeadm" if opts.flavor == "kubeadm" else "upstream"
        source = (f"the {origin} default Corefile; if yours is customised, start from it:\n"
                  f"  kubectl -n kube-system get configmap {name} -o yaml | dnsside install "
                  f"coredns --flavor {opts.flavor} ... --from -")
        data = {"Corefile": text}
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": _kept_meta(opts, name, "kube-system"), "data": data}
    return to_yaml([cm], f"{name} ConfigMap with dnsside's server block added to {source}\n"
                   "  kubectl apply -f -")


FLAVORS: dict[str, Callable[[CorednsOptions], str]] = {
    "kubeadm": kubeadm, "k3s": k3s, "aks": aks, "eks": eks, "gke": gke,
    "openshift": openshift, "nodelocaldns": nodelocaldns,
}


def _existing_kind(opts: CorednsOptions, kind: str) -> None:
    assert opts.existing is not None
    if opts.existing.get("kind") != kind:
        raise InstallError(f"--from: expected a {kind}, got {opts.existing.get('kind')!r}")


def _live_corefile(opts: CorednsOptions) -> str | None:
    if opts.existing is None:
        return None
    _existing_kind(opts, "ConfigMap")
    value = (opts.existing.get("data") or {}).get("Corefile")
    if not isinstance(value, str):
        raise InstallError("--from: the ConfigMap has no data.Corefile")
    return value


def _kept_meta(opts: CorednsOptions, name: str, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if opts.existing is not None:
        old = opts.existing.get("metadata") or {}
        for keep in ("labels", "annotations"):
            value = {k: v for k, v in (old.get(keep) or {}).items() if k != _LAST_APPLIED}
            if value:
                meta[keep] = value
    return meta


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
