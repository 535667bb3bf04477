"""``dnsside install coredns --flavor F``: what makes each cluster DNS forward the zones.

One function per flavour, each returning what ``install coredns`` prints; what they
share is dnsside's server block and the Corefile patching (:mod:`dnsside.ops.corefile`).
Given the live object (``--from``), everything in it that is not
dnsside's is kept (other keys, labels, annotations, other server blocks).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from dnsside.config import DEFAULT_ZONE, normal_zone
from dnsside.netvalues import format_hostport, split_hostport
from dnsside.ops import corefile
from dnsside.ops.manifests import DNS_PORT, NAME, InstallError
from dnsside.ops.yamlout import Dumper, to_yaml

STANDALONE_ONLY = {
    "gke": "GKE runs kube-dns, not CoreDNS, and reconciles its Deployment",
    "openshift": "the DNS operator owns the CoreDNS DaemonSet and reverts a sidecar",
    "aks": "AKS reconciles its CoreDNS Deployment and would remove the sidecar",
    "gardener": "Gardener reconciles its CoreDNS Deployment and would remove the sidecar",
    "rke2": "the rke2-coredns chart owns the CoreDNS Deployment; its next upgrade reverts "
            "the sidecar",
    "kubespray": "kubespray re-applies CoreDNS's Deployment, and node-local-dns (on by "
                 "default) runs on the host network, where CoreDNS's loopback is not",
}
# Flavours whose zone block dnsside does not write, so it cannot put `loadbalance` in it:
# what each says instead (the gke note: dnsmasq(8), --no-round-robin). dnsside's own
# answers still rotate (each answer the cluster DNS caches anew starts elsewhere); only
# within one cached answer's TTL is the order fixed.
NO_LOADBALANCE = {
    "gke": "kube-dns is dnsmasq, not CoreDNS, so there is no loadbalance plugin to add; "
           "none is needed: dnsmasq permutes the A/AAAA records of a cached name from one "
           "answer to the next by default (its --no-round-robin turns that off)",
    "openshift": "the DNS operator writes each spec.servers block itself (forward, errors, "
                 "log, bufsize, cache) and has no field for loadbalance",
    "kubespray": "kubespray writes the block from its own template: its coredns_external_zones "
                 "template has loadbalance already; check its nodelocaldns block with "
                 "`dnsside check`",
}
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Flavours whose live object --from must be given: without it the output would drop or
# break what the platform already has (see each flavour's function).
NEEDS_FROM = {
    "nodelocaldns": "kubectl -n kube-system get configmap node-local-dns -o yaml",
    "openshift": "oc get dns.operator.openshift.io/default -o yaml",
}
Warn = Callable[[str], None]


def _ignore(_message: str) -> None:
    return None


@dataclass(frozen=True)
class CorednsOptions:
    flavor: str
    address: str  # HOST:PORT dnsside answers on (IPv6 as [addr]:port)
    zones: tuple[str, ...] = (DEFAULT_ZONE,)
    mode: str = "standalone"
    cluster_domain: str = "cluster.local"
    existing: Mapping[str, Any] | None = None  # --from: the live object to patch
    block_only: bool = False

    def block(self, nodelocal: list[str] | None = None, port: int = 53) -> str:
        """dnsside's server block for these options (``port``: where CoreDNS listens)."""
        return corefile.server_block(
            self.zones, self.address, self.mode, nodelocal=nodelocal or (), port=port,
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


def coredns_output(opts: CorednsOptions, warn: Warn = _ignore) -> str:
    """What ``dnsside install coredns`` prints for ``opts.flavor``; ``warn`` gets what the
    user must know but the output cannot say (the CLI prints it on stderr)."""
    if opts.flavor not in FLAVORS:
        raise InstallError(f"--flavor {opts.flavor!r}: expected one of {', '.join(FLAVORS)}")
    if opts.mode == "sidecar" and opts.flavor in STANDALONE_ONLY:
        raise InstallError(f"--flavor {opts.flavor} works with standalone mode only: "
                           f"{STANDALONE_ONLY[opts.flavor]}")
    host, port = parse_address(opts.address)
    opts = replace(opts, address=format_hostport(host, port),
                   zones=tuple(dict.fromkeys(forward_zone(z) for z in opts.zones)))
    if opts.block_only:
        if opts.flavor in ("gke", "openshift", "rke2", "kubespray"):
            raise InstallError(f"--block-only: --flavor {opts.flavor} has no Corefile")
        return opts.block(port=GARDENER_PORT if opts.flavor == "gardener" else 53)
    if opts.flavor in NEEDS_FROM and opts.existing is None:
        raise InstallError(
            f"--flavor {opts.flavor} needs --from, the live object: {NEEDS_FROM[opts.flavor]} "
            f"| dnsside install coredns --flavor {opts.flavor} ... --from -")
    return FLAVORS[opts.flavor](opts, warn)


_RELOAD_NOTE = (
    "CoreDNS's reload plugin re-reads imported files too (CoreDNS >= 1.6.1 hashes the Corefile\n"
    "with its imports expanded): the block is live once the kubelet has refreshed the\n"
    "ConfigMap volume (about a minute) and reload has looked (30 s); to have it at once:\n"
    "  kubectl -n kube-system rollout restart deployment coredns")


def _custom(opts: CorednsOptions, where: str, warn: Warn, port: int = 53,
            reload_note: str = _RELOAD_NOTE) -> str:
    """k3s, AKS and Gardener: a ``coredns-custom`` ConfigMap whose ``*.server`` keys CoreDNS
    imports at the top level of its Corefile."""
    if opts.existing is not None:
        _existing_kind(opts, "ConfigMap")
    custom: dict[str, Any] = dict((opts.existing or {}).get("data") or {})
    custom.pop(f"{NAME}.server", None)  # others' keys are kept; ours goes last
    for key, text in custom.items():
        if key.endswith(".server") and isinstance(text, str):
            served = _served_zones(text, opts.zones)
            if served:
                warn(f"coredns-custom key {key} already serves {', '.join(served)}: CoreDNS "
                     f"refuses two server blocks for one zone and port, so the import fails "
                     f"(the old configuration stays running). Remove it from {key}.")
    custom[f"{NAME}.server"] = opts.block(port=port)
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": _kept_meta(opts, "coredns-custom", "kube-system"), "data": custom}
    return to_yaml([cm], f"{where}.\n  kubectl apply --server-side --field-manager=dnsside "
                   f"-f -\n{reload_note}")


def _served_zones(text: str, zones: Sequence[str]) -> list[str]:
    """Which of ``zones`` a Corefile fragment's server blocks serve (unreadable: none)."""
    try:
        found = corefile.blocks(text)
    except corefile.CorefileError:
        return []
    return sorted({corefile.zone_of(k) for keys, _, _ in found for k in keys} & set(zones))


def k3s(opts: CorednsOptions, warn: Warn) -> str:
    return _custom(opts, "k3s imports /etc/coredns/custom/*.server from this optional "
                   "ConfigMap and never overwrites it", warn)


def aks(opts: CorednsOptions, warn: Warn) -> str:
    return _custom(opts, "AKS imports every *.server key of coredns-custom and keeps it on "
                   "upgrades", warn, reload_note="AKS's documentation restarts CoreDNS after "
                   "each change:\n  kubectl -n kube-system rollout restart deployment coredns")


GARDENER_PORT = 8053  # Gardener's CoreDNS listens there; Service kube-dns maps 53 to it


def gardener(opts: CorednsOptions, warn: Warn) -> str:
    """Gardener shoots: CoreDNS listens on 8053, so the block's keys say :8053."""
    return _custom(opts, "Gardener imports custom/*.server from coredns-custom and keeps it; "
                   f"its CoreDNS listens on\n{GARDENER_PORT} (Service kube-dns maps 53 there), "
                   "so the block does too. Gardener's network\npolicies let CoreDNS reach "
                   "port 53 only: dnsside on the default port 53. With NodeLocal DNS,\nset "
                   "spec.systemComponents.nodeLocalDNS.disableForwardToUpstreamDNS: true in "
                   "the Shoot", warn, port=GARDENER_PORT)


GKE_SCOPE = ("GKE Standard with kube-dns only. Autopilot uses Cloud DNS for GKE (and "
             "its kube-dns configuration cannot be changed), and a Standard cluster switched to "
             "Cloud DNS resolves through it, not kube-dns: neither has a dnsside flavour yet "
             "(deploy/README.md)")


def gke(opts: CorednsOptions, warn: Warn) -> str:
    """kube-dns's ``stubDomains`` (GKE Standard with kube-dns)."""
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
    return to_yaml([cm], f"kube-dns forwards these stub domains to dnsside: {GKE_SCOPE}.\n"
                   "GKE keeps this ConfigMap on upgrades, and NodeLocal DNSCache on GKE "
                   f"reads it too.\nNo loadbalance: {NO_LOADBALANCE['gke']}.\n"
                   "  kubectl apply -f -")


def openshift(opts: CorednsOptions, warn: Warn) -> str:
    """The DNS operator's ``spec.servers``: an atomic list, so the whole of it is printed
    (the live one, --from, with dnsside's entry in place of any that serves its zones)."""
    assert opts.existing is not None
    _existing_kind(opts, "DNS")
    ours = [z.rstrip(".") for z in opts.zones]
    servers: list[dict[str, Any]] = []
    for server in (opts.existing.get("spec") or {}).get("servers") or []:
        name = server.get("name")
        if name != NAME and set(server.get("zones") or ()) & set(ours):
            warn(f"spec.servers entry {name!r} serves {', '.join(ours)}: replaced by "
                 f"dnsside's")
        if name == NAME or set(server.get("zones") or ()) & set(ours):
            continue
        servers.append(server)
    servers.append({"name": NAME, "zones": ours,
                    "forwardPlugin": {"policy": "Random", "upstreams": [opts.address]}})
    dns = {"apiVersion": "operator.openshift.io/v1", "kind": "DNS",
           "metadata": {"name": "default"}, "spec": {"servers": servers}}
    return to_yaml([dns], "The DNS operator writes a server block for each spec.servers "
                   "entry into dns-default and keeps\nspec on upgrades. spec.servers is an "
                   "atomic list: this is all of it, every entry of the\nlive object kept, so "
                   "taking it over loses nothing (re-run --from if it changed since):\n"
                   "  oc apply --server-side --field-manager=dnsside --force-conflicts -f -\n"
                   "or, as a merge patch (replaces spec.servers only):\n"
                   "  oc patch dns.operator.openshift.io/default --type=merge "
                   f"--patch-file FILE\nNo loadbalance: {NO_LOADBALANCE['openshift']}.")


EKS_VALUES_HINT = ("aws eks describe-addon --cluster-name C --addon-name coredns --query "
                   "addon.configurationValues --output text")


def eks(opts: CorednsOptions, warn: Warn) -> str:
    """The managed add-on owns the ConfigMap: the Corefile goes in its configuration values,
    which EKS replaces as a whole, so --from starts from the current values and keeps them."""
    values: dict[str, Any] = dict(opts.existing or {})
    if "apiVersion" in values or "kind" in values:
        raise InstallError(f"--from: --flavor eks takes the add-on's configuration values, "
                           f"not a Kubernetes object: {EKS_VALUES_HINT}")
    live = values.get("corefile")
    if live is not None and not isinstance(live, str):
        raise InstallError("--from: configuration value corefile is not a string")
    if opts.existing is None:
        warn("these configuration values replace the add-on's whole configuration "
             "(replicaCount, autoScaling, tolerations, resources... set before are dropped); "
             f"start from yours: {EKS_VALUES_HINT} | dnsside install coredns --flavor eks "
             "... --from -")
    text = live if live else corefile.upstream("eks", opts.cluster_domain.rstrip("."))
    values["corefile"] = corefile.patch(text, opts.zones, opts.block())
    return json.dumps(values, indent=2) + "\n"


def kubeadm(opts: CorednsOptions, warn: Warn) -> str:
    if opts.existing is None:
        warn("no --from: this is kubeadm's default Corefile with dnsside's block; applied, it "
             "replaces yours and anything added to it is lost. Start from the live one: "
             "kubectl -n kube-system get configmap coredns -o yaml | dnsside install coredns "
             "--flavor kubeadm ... --from -")
    return _corefile_configmap(opts, "coredns", _patched(opts))


def nodelocaldns(opts: CorednsOptions, warn: Warn) -> str:
    text = _patched(opts)
    # The template's install-time words (sed replaces them before applying); node-cache
    # fills only __PILLAR__CLUSTER__DNS__, __PILLAR__UPSTREAM__SERVERS__ and, in bind and
    # health lines, __PILLAR__LOCAL__DNS__ with *all* its -localip addresses, which breaks
    # `health` (one address).
    left = [w for w in ("__PILLAR__DNS__DOMAIN__", "__PILLAR__LOCAL__DNS__") if w in text]
    if left:
        raise InstallError(f"--from: the Corefile still has {', '.join(left)}: it is the "
                           "upstream template, not what node-local-dns runs; pass the live "
                           "ConfigMap (kubectl -n kube-system get configmap node-local-dns "
                           "-o yaml)")
    return _corefile_configmap(opts, "node-local-dns", text)


# rke2-coredns (rancher/rke2-charts packages/rke2-coredns: the coredns/helm chart's values
# with its patch): its default `servers`. A HelmChartConfig's valuesContent replaces lists
# whole, so ours repeats this one. The chart's template puts global.clusterDomain
# (cluster.local) in front of the kubernetes plugin's parameters.
RKE2_DEFAULT_SERVER: dict[str, Any] = {
    "zones": [{"zone": ".", "use_tcp": True}],
    "port": 53,
    "plugins": [
        {"name": "errors"},
        {"name": "health", "configBlock": "lameduck 10s"},
        {"name": "ready"},
        {"name": "kubernetes", "parameters": "in-addr.arpa ip6.arpa",
         "configBlock": "pods insecure\nfallthrough in-addr.arpa ip6.arpa\nttl 30"},
        {"name": "prometheus", "parameters": "0.0.0.0:9153"},
        {"name": "forward", "parameters": ". /etc/resolv.conf"},
        {"name": "cache", "parameters": 30},
        {"name": "loop"},
        {"name": "reload"},
        {"name": "loadbalance"},
    ],
}


def rke2_server(opts: CorednsOptions) -> dict[str, Any]:
    """dnsside's block as one entry of the coredns chart's ``servers``."""
    return {
        "zones": [{"zone": z} for z in opts.zones],
        "port": 53,
        "plugins": [
            {"name": "errors"},
            {"name": "cache", "parameters": 5},
            {"name": "prometheus", "parameters": "0.0.0.0:9153"},
            {"name": "bufsize", "parameters": 1232},
            {"name": "loadbalance", "parameters": "round_robin"},
            {"name": "forward", "parameters": f". {opts.address}"},
        ],
    }


def rke2(opts: CorednsOptions, warn: Warn) -> str:
    """A ``HelmChartConfig`` for ``rke2-coredns``: the chart's default server and dnsside's
    (with --from, the live HelmChartConfig's values and servers, ours replaced)."""
    values: dict[str, Any] = {}
    if opts.existing is not None:
        _existing_kind(opts, "HelmChartConfig")
        try:
            values = yaml.safe_load((opts.existing.get("spec") or {}).get("valuesContent")
                                    or "") or {}
        except yaml.YAMLError as exc:
            raise InstallError(f"--from: spec.valuesContent is not YAML: {exc}") from None
        if not isinstance(values, dict):
            raise InstallError("--from: spec.valuesContent is not a mapping")
    servers = [s for s in values.get("servers") or [RKE2_DEFAULT_SERVER]
               if not {corefile.zone_of(str(z.get("zone", "."))) for z in s.get("zones")
                       or [{"zone": "."}]} & set(opts.zones)]
    values["servers"] = [*copy.deepcopy(servers), rke2_server(opts)]
    spec = dict((opts.existing or {}).get("spec") or {})
    spec["valuesContent"] = yaml.dump(values, Dumper=Dumper, sort_keys=False)
    hcc = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
           "metadata": _kept_meta(opts, "rke2-coredns", "kube-system"), "spec": spec}
    return to_yaml([hcc], "RKE2 merges these values into the rke2-coredns chart and keeps "
                   "them on upgrades. servers is a list,\nso it replaces the chart's whole: "
                   "the default .:53 server is repeated (from your HelmChartConfig\nwith "
                   "--from; check it against `helm -n kube-system get values rke2-coredns "
                   "-a`).\nOn a server node:  /var/lib/rancher/rke2/server/manifests/"
                   "rke2-coredns-config.yaml, or\n  kubectl apply -f -")


def kubespray(opts: CorednsOptions, warn: Warn) -> str:
    """Inventory variables: kubespray re-templates the coredns and nodelocaldns ConfigMaps
    on every run, so the durable place is its group_vars."""
    def zone() -> dict[str, Any]:
        return {"zones": [z.rstrip(".") for z in opts.zones], "nameservers": [opts.address],
                "cache": 5}

    text = yaml.dump({"coredns_external_zones": [zone()],
                      "nodelocaldns_external_zones": [zone()]}, Dumper=Dumper, sort_keys=False)
    head = ("kubespray inventory variables: put them in group_vars (e.g. inventory/mycluster/"
            "group_vars/k8s_cluster/k8s-net-dns.yml,\nmerged with any zones already there) "
            "and re-run cluster.yml (or upgrade-cluster.yml). kubespray\nre-templates the "
            "coredns and nodelocaldns ConfigMaps on every run, so editing them is undone.\n"
            "nodelocaldns_external_zones matters: NodeLocal DNSCache (on by default) sends "
            "other zones\nupstream, never to CoreDNS.\nloadbalance: "
            + NO_LOADBALANCE["kubespray"] + ".")
    return "".join(f"# {line}\n" for line in head.splitlines()) + text


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
        source = (f"the kubeadm default Corefile; if yours is customised, start from it:\n"
                  f"  kubectl -n kube-system get configmap {name} -o yaml | dnsside install "
                  f"coredns --flavor {opts.flavor} ... --from -")
        data = {"Corefile": text}
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": _kept_meta(opts, name, "kube-system"), "data": data}
    return to_yaml([cm], f"{name} ConfigMap with dnsside's server block added to {source}\n"
                   "  kubectl apply -f -")


FLAVORS: dict[str, Callable[[CorednsOptions, Warn], str]] = {
    "kubeadm": kubeadm, "k3s": k3s, "aks": aks, "eks": eks, "gke": gke,
    "openshift": openshift, "nodelocaldns": nodelocaldns, "rke2": rke2,
    "gardener": gardener, "kubespray": kubespray,
}
# Named in `--flavor`'s help and deploy/README.md: distributions that are kubeadm's layout.
KUBEADM_ALIKE = ("kind", "talos", "microk8s")


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


def read_existing(path: str, flavor: str = "") -> Mapping[str, Any]:
    """The object ``--from`` names (``-`` = stdin), YAML or JSON. For ``eks``, the add-on's
    configuration values as ``aws eks describe-addon --query addon.configurationValues``
    prints them: a mapping, a JSON string holding one (``--output json``), or nothing
    (``null``/``None``/empty: no values set)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        obj = yaml.safe_load(text)
        if flavor == "eks":
            if isinstance(obj, str):
                obj = yaml.safe_load(obj) if obj.strip() not in ("", "None") else None
            if obj is None:
                obj = {}
    except (OSError, yaml.YAMLError) as exc:
        raise InstallError(f"--from {path}: {exc}") from None
    if not isinstance(obj, Mapping):
        what = "configuration values" if flavor == "eks" else "a Kubernetes object"
        raise InstallError(f"--from {path}: not {what}")
    return obj
