"""`dnsside install [coredns|monitoring]` and `dnsside check`: the operator's commands.

They print manifests or check results and never serve. What takes care is baking:
every ``serve`` flag the install layout does not fix (:data:`dnsside.config.FLAGS`,
those whose commands include ``install``) is offered by ``install`` and written into
the ConfigMap as ``DNSSIDE_<FLAG>``, so a flag added to the table works here unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dnsside.config import (
    CHECK,
    COMMANDS,
    DEFAULT_ZONE,
    FLAGS,
    INSTALL,
    SERVE,
    Flag,
    flag,
    flags_for,
)
from dnsside.dns.tsig import KeyFileError, load_key_file
from dnsside.flagvalues import checked_config
from dnsside.netvalues import format_hostport
from dnsside.ops import coredns as cluster_dns
from dnsside.ops import manifests as inst
from dnsside.ops import monitoring as mon
from dnsside.ops.corefile import CorefileError
from dnsside.ops.yamlout import to_yaml

# serve flags whose name `install` uses for something else.
RENAMED = {"--namespace": "--watch-namespace"}
# serve flags the install layout sets itself, and why none of them is baked.
NOT_BAKED = {
    "--listen": "the install layout sets where dnsside answers: [::]:53 in its pods in "
                "standalone mode (--dns-port changes the port), 127.0.0.1:"
                f"{inst.SIDECAR_DNS_PORT} beside CoreDNS in sidecar mode",
    "--http-listen": f"the install layout sets it: [::]:{inst.HTTP_PORT} (sidecar: "
                     f"[::]:{inst.SIDECAR_HTTP_PORT}), where the PodMonitor scrapes",
    "--source": "an installed dnsside watches its own cluster's API server (--source kube); "
                "a file source is for a dnsside you run yourself",
    "--kubeconfig": "an installed dnsside reaches the API server with its ServiceAccount",
}


@dataclass(frozen=True)
class BakeableFlag:
    """One ``serve`` flag as ``install`` offers it: ``option`` on the install command line,
    ``dest`` in its parsed arguments, ``env`` in the ConfigMap."""

    flag: Flag
    option: str
    dest: str

    @property
    def serve_flag(self) -> str:
        return self.flag.name

    @property
    def env(self) -> str:
        return self.flag.env


def bakeable_flags() -> list[BakeableFlag]:
    """Every serve flag install bakes into the ConfigMap, in the table's order."""
    return [BakeableFlag(f, RENAMED.get(f.name, f.name), "serve_" + f.dest)
            for f in flags_for(INSTALL)]


def add_bakeable_flags(parser: argparse.ArgumentParser) -> list[BakeableFlag]:
    """Offer every bakeable flag on ``parser`` with the serve flag's type and choices; a
    flag not given stays None (not baked)."""
    flags = bakeable_flags()
    group = parser.add_argument_group(
        "dnsside serve flags", "baked into the dnsside ConfigMap as DNSSIDE_<FLAG> "
        "(see `dnsside serve --help`)")
    for b in flags:
        f = b.flag
        kwargs: dict[str, Any] = {"dest": b.dest, "default": None, "help": f.help}
        if f.switch:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(action="append" if f.repeatable else "store",
                          type=None if f.repeatable else f.type, choices=f.choices,
                          metavar=f.metavar)
        group.add_argument(b.option, **kwargs)
    return flags


def baked_settings(args: argparse.Namespace, flags: Iterable[BakeableFlag]) -> dict[str, str]:
    """The ConfigMap entries for the serve flags given on the install command line, in
    the form the serve CLI reads back (booleans ``true``, lists comma-separated)."""
    out: dict[str, str] = {}
    for b in flags:
        value = getattr(args, b.dest, None)
        if value is None:
            continue
        try:
            out[b.env] = b.flag.to_env(value)
        except ValueError as exc:
            raise inst.InstallError(str(exc).replace(b.flag.name, b.option, 1)) from None
    return out


_BAKEABLE = "dnsside_bakeable"  # where the install parser keeps its BakeableFlag list
_INSTALL_OWN = "dnsside_install_own"  # and its every option: (spelling, dest, default)


def add_admin_commands(sub: Any) -> None:
    """Add ``install`` (with ``coredns`` and ``monitoring``) and ``check`` to ``sub``."""
    install = sub.add_parser(
        INSTALL, help=COMMANDS[INSTALL],
        description="Print every dnsside manifest for `kubectl apply -f -`. Sidecar mode "
        "patches the CoreDNS Deployment: apply it with `kubectl apply --server-side "
        "--field-manager=dnsside -f -`.")
    install.add_argument("--mode", choices=inst.MODES, default="standalone",
                         help="its own Deployment and Service, or a container in CoreDNS's pods")
    install.add_argument("--cluster-name", dest="install_cluster_name", metavar="NAME",
                         help="(required) the name the other clusters linked this one as "
                         "(`linkerd multicluster link --cluster-name`)")
    install.add_argument("--namespace", dest="install_namespace", metavar="NS",
                         help="where dnsside lives (default dnsside; sidecar: CoreDNS's, "
                         "kube-system)")
    install.add_argument("--image", default=inst.IMAGE, metavar="IMAGE",
                         help=f"dnsside's container image (default {inst.IMAGE})")
    install.add_argument("--replicas", type=int, default=2, metavar="N",
                         help="standalone mode (default 2)")
    install.add_argument("--dns-port", type=int, metavar="PORT",
                         help=f"standalone mode: DNS port of the pods and the Service (default "
                         f"{inst.DNS_PORT}, bound as non-root through the pod sysctl "
                         f"{inst.UNPRIVILEGED_PORT_SYSCTL}, allowed by default since Kubernetes "
                         "1.22). --dns-port 5353 where that sysctl is refused: CoreDNS still "
                         "forwards, but the zone's NS glue (the pod IP) then has nothing on "
                         "port 53, so resolvers that follow the NS (BIND type stub, unbound "
                         "stub-prime, secondaries) get no answer")
    install.add_argument("--memory-limit", default=inst.MEMORY_LIMIT, metavar="QUANTITY",
                         help="see the sizing table in docs/operating.md "
                         f"({inst.MEMORY_LIMIT}: up to 100k members)")
    install.add_argument("--coredns-deployment", default="coredns", metavar="NAME",
                         help="sidecar mode: CoreDNS's Deployment")
    install.add_argument("--coredns-service-account", default="coredns", metavar="NAME",
                         help="sidecar mode: CoreDNS's ServiceAccount")
    install.set_defaults(**{_BAKEABLE: add_bakeable_flags(install)})
    unbaked = install.add_argument_group(
        "dnsside serve flags install does not take", "the layout sets them; given here, "
        "they are refused with the reason")
    for name in NOT_BAKED:
        unbaked.add_argument(name, dest=_unbaked(name), metavar=flag(name).metavar,
                             help=NOT_BAKED[name])
    # What `install` itself takes, and its defaults: given before `coredns` or `monitoring`,
    # which read none of it, it would be dropped without a word (see _refuse_install_flags).
    install.set_defaults(**{_INSTALL_OWN: [(a.option_strings[0], a.dest, a.default)
                                           for a in install._actions if a.option_strings
                                           and a.dest not in ("help", _BAKEABLE)]})
    targets = install.add_subparsers(dest="target", metavar="{coredns,monitoring}")

    coredns = targets.add_parser(
        "coredns", help="print what makes the cluster DNS forward the zones to dnsside",
        description="Print the object that makes the cluster DNS forward dnsside's zones to "
        "it. deploy/README.md says per flavor where it goes and what survives an upgrade.")
    coredns.add_argument(
        "--flavor", required=True, choices=tuple(cluster_dns.FLAVORS),
        help="kubeadm (and plain CoreDNS; also " + ", ".join(cluster_dns.KUBEADM_ALIKE)
        + ": give --from), k3s, aks, gardener (coredns-custom), eks (the add-on's configuration "
        "values), rke2 (HelmChartConfig), kubespray (inventory variables), openshift (DNS "
        "operator; needs --from), nodelocaldns (needs --from), gke: " + cluster_dns.GKE_SCOPE)
    coredns.add_argument("--mode", dest="coredns_mode", choices=inst.MODES,
                         default="standalone", help="how dnsside was installed")
    coredns.add_argument("--address", metavar="IP[:PORT]",
                         help="where dnsside answers (default: sidecar 127.0.0.1:5353; "
                         "standalone: the dnsside Service's ClusterIP and DNS port, read from "
                         "the cluster; PORT defaults to 53)")
    coredns.add_argument("--zone", dest="coredns_zones", action="append", metavar="ZONE",
                         help="dnsside's --zone, repeatable (default svc-global.)")
    coredns.add_argument("--mcs-zone", dest="coredns_mcs_zones", action="append",
                         metavar="ZONE", help="dnsside's --mcs-zone, repeatable")
    coredns.add_argument("--namespace", dest="coredns_namespace", default="dnsside",
                         metavar="NS", help="dnsside's namespace, to read its Service's "
                         "ClusterIP (default dnsside)")
    coredns.add_argument("--kubeconfig", dest="coredns_kubeconfig", metavar="FILE",
                         help="to read dnsside's Service (default $KUBECONFIG, "
                         "~/.kube/config)")
    coredns.add_argument("--cluster-domain", default="cluster.local", metavar="DOMAIN",
                         help="the cluster's DNS domain (default cluster.local)")
    coredns.add_argument("--from", dest="from_file", metavar="FILE",
                         help="the live object to patch (`kubectl get ... -o yaml`; - = stdin; "
                         "eks: the add-on's configuration values, JSON or YAML): everything "
                         "in it is kept")
    coredns.add_argument("--block-only", action="store_true",
                         help="print only the Corefile server block")

    monitoring = targets.add_parser(
        "monitoring", help="print a PodMonitor, dnsside's PrometheusRule and its Grafana "
        "dashboard",
        description="Print a PodMonitor and the PrometheusRule with dnsside's alerts "
        "(prometheus-operator; runbooks in deploy/README.md), and dnsside's Grafana dashboard "
        "in a ConfigMap labelled grafana_dashboard: \"1\" for Grafana's dashboard sidecar.")
    monitoring.add_argument("--mode", dest="monitoring_mode", choices=inst.MODES,
                            default="standalone")
    monitoring.add_argument("--namespace", dest="monitoring_namespace", metavar="NS",
                            help="default dnsside (sidecar: kube-system)")
    monitoring.add_argument("--label", dest="labels", action="append", metavar="KEY=VALUE",
                            help="extra label for Prometheus's ruleSelector, e.g. "
                            "release=kube-prometheus-stack")
    monitoring.add_argument("--dashboard-namespace", metavar="NS",
                            help="the dashboard ConfigMap's namespace (default: --namespace): "
                            "Grafana's, unless its sidecar searches every namespace")

    check = sub.add_parser(
        CHECK, help=COMMANDS[CHECK],
        description="Check dnsside's install like `linkerd check`: a hint for each failure, exit "
        "status 1 when any check fails.")
    check.add_argument("--kubeconfig", dest="check_kubeconfig", metavar="FILE",
                       help="default $KUBECONFIG, ~/.kube/config")
    check.add_argument("--namespace", dest="check_namespace", metavar="NS",
                       help="dnsside's namespace (default dnsside, sidecar kube-system)")
    check.add_argument("--mode", dest="check_mode", choices=("auto", *inst.MODES),
                       default="auto", help="how dnsside was installed (default auto: "
                       "found in the cluster)")
    check.add_argument("--cluster-name", dest="check_cluster_name", metavar="NAME",
                       help="used when dnsside's ConfigMap sets none")
    check.add_argument("--as", dest="as_user", metavar="USER",
                       help="check RBAC as this user (Impersonate-User), e.g. "
                       "system:serviceaccount:dnsside:dnsside")
    check.add_argument("--dns", metavar="HOST:PORT",
                       help="also query the zone's SOA and a global service there, over TCP "
                       "(e.g. through `kubectl -n dnsside port-forward svc/dnsside 5353:53`)")
    check.add_argument("--coredns-deployment", dest="check_coredns", default="coredns",
                       metavar="NAME", help="CoreDNS's Deployment (default coredns)")
    check.add_argument("--flat-network", dest="check_flat_network", action="store_true",
                       help="check the --flat-network setup (each Link's credentials Secret "
                       "and the linked cluster's API) even if dnsside's ConfigMap does not "
                       "turn it on yet; it is checked whenever the ConfigMap does")
    check.add_argument("--links-namespace", dest="check_links_namespace", metavar="NS",
                       help="where dnsside reads Links (default: its ConfigMap's "
                       "--links-namespace, else linkerd-multicluster); Links elsewhere are "
                       "listed as ignored")
    check.add_argument("--insecure-remote-tls", dest="check_insecure_remote_tls",
                       action="store_true",
                       help="with --flat-network: allow what dnsside's own "
                       "--insecure-remote-tls allows in a Link's kubeconfig (it is allowed "
                       "whenever the ConfigMap sets it)")


def run_admin_command(args: argparse.Namespace, argv: list[str]) -> int:
    """Run ``install``/``check``; ``argv`` is quoted in the header of what install prints."""
    command = "dnsside " + " ".join(shlex.quote(a) for a in argv)
    try:
        if args.command == "check":
            return _check(args)
        _warn_of_the_shells_variables()
        if args.target is not None:
            _refuse_install_flags(args)
        if args.target == "coredns":
            sys.stdout.write(_coredns(args))
        elif args.target == "monitoring":
            sys.stdout.write(_monitoring(args, command))
        else:
            sys.stdout.write(_install(args, command))
        return 0
    except (inst.InstallError, CorefileError) as exc:
        print(f"dnsside: {exc}", file=sys.stderr)
        return 2


def _warn_of_the_shells_variables() -> None:
    """One line when ``DNSSIDE_*`` flag variables are set in the operator's shell: install
    bakes only the flags on its own command line (a value left over from running ``serve``
    by hand must not slip into a cluster unseen), so the variables are not read; said
    rather than ignored silently, since `serve` would have read them."""
    names = sorted(n for n in os.environ if n in {f.env for f in FLAGS})
    if names:
        print(f"dnsside: warning: install bakes only the flags on its command line; "
              f"{', '.join(names)} in this environment {'is' if len(names) == 1 else 'are'} "
              "not read (give the flag instead)", file=sys.stderr)


def _refuse_install_flags(args: argparse.Namespace) -> None:
    """Raise InstallError for an option of ``install`` itself given before ``coredns`` or
    ``monitoring``, which read none of them: ``install --ttl -5 monitoring`` or
    ``install --mode sidecar coredns`` would print something else than was meant."""
    for option, dest, default in getattr(args, _INSTALL_OWN, ()):
        if getattr(args, dest, default) != default:
            raise inst.InstallError(
                f"{option} is a flag of `dnsside install`, which `install {args.target}` "
                f"does not read; `dnsside install {args.target} --help` lists its own, given "
                f"after `{args.target}`")


def _unbaked(name: str) -> str:
    return "unbaked_" + name[2:].replace("-", "_")


def _install(args: argparse.Namespace, command: str) -> str:
    for name, why in NOT_BAKED.items():
        if getattr(args, _unbaked(name), None) is not None:
            raise inst.InstallError(f"{name} is not a setting install bakes into the "
                                    f"ConfigMap: {why}")
    if not args.install_cluster_name:
        raise inst.InstallError("--cluster-name is required: the name the other clusters "
                                "linked this one as (`linkerd multicluster link --cluster-name`)")
    settings = baked_settings(args, getattr(args, _BAKEABLE))
    key_file = settings.pop(flag("--tsig-key-file").env, None)
    opts = inst.InstallOptions(
        cluster_name=args.install_cluster_name,
        mode=args.mode,
        namespace=args.install_namespace,
        image=args.image,
        replicas=args.replicas,
        settings=settings,
        memory_limit=args.memory_limit,
        coredns_deployment=args.coredns_deployment,
        coredns_service_account=args.coredns_service_account,
        dns_port=args.dns_port,
        tsig_key=None if key_file is None else tsig_key_text(key_file),
    )
    refuse_what_serve_refuses(opts)
    objs = inst.manifests(opts)
    if opts.cluster_name == "local":
        print("dnsside: warning: --cluster-name local is the unset default; `dnsside check` "
              "will flag it", file=sys.stderr)
    how = ("kubectl apply --server-side --field-manager=dnsside -f -   (patches CoreDNS's "
           "Deployment: only the dnsside container is ours)" if opts.mode == "sidecar"
           else "kubectl apply -f -")
    return to_yaml(objs, f"Generated by: {command}\n  {how}")


def refuse_what_serve_refuses(opts: inst.InstallOptions) -> None:
    """Raise InstallError, with the line ``dnsside serve`` would print, when the pods would
    refuse the ConfigMap about to be printed: the same :func:`checked_config` reads it
    (a crash loop after ``kubectl apply`` is far from the mistake)."""
    try:
        checked_config(SERVE, {}, opts.config_data, name_the_variable=False)
    except ValueError as exc:  # install spells --namespace as --watch-namespace
        message = re.sub(r"--namespace\b", RENAMED["--namespace"], str(exc))
        raise inst.InstallError(message) from None


def tsig_key_text(path: str) -> str:
    """The text of the key file at ``path`` once it parses as dnsside serve will parse it
    (a file that does not would only fail in the pod, as a crash loop)."""
    try:
        load_key_file(path)
    except KeyFileError as exc:
        raise inst.InstallError(f"--tsig-key-file: {exc}") from None
    with open(path, encoding="utf-8") as f:
        return f.read()


def _coredns(args: argparse.Namespace) -> str:
    zones = tuple(args.coredns_zones or [DEFAULT_ZONE]) + tuple(args.coredns_mcs_zones or ())
    address = args.address
    if not address:
        if args.coredns_mode == "sidecar":
            address = f"127.0.0.1:{inst.SIDECAR_DNS_PORT}"
        else:
            address = asyncio.run(_service_address(args.coredns_kubeconfig,
                                                   args.coredns_namespace))
    existing = cluster_dns.read_existing(args.from_file, args.flavor) if args.from_file else None
    return cluster_dns.coredns_output(cluster_dns.CorednsOptions(
        flavor=args.flavor, address=address, zones=zones, mode=args.coredns_mode,
        cluster_domain=args.cluster_domain, existing=existing, block_only=args.block_only),
        warn=lambda message: print(f"dnsside: warning: {message}", file=sys.stderr))


async def _service_address(kubeconfig: str | None, namespace: str) -> str:
    """The dnsside Service's ClusterIP (the first family's) and its port named ``dns``
    (53, or 5353 where it was installed with ``--dns-port 5353``)."""
    from dnsside.kubeapi.client import TRANSIENT, KubeApi, KubeConfigError

    hint = ("pass --address, e.g. --address $(kubectl -n dnsside get service dnsside -o "
            "jsonpath='{.spec.clusterIP}')")
    try:
        api = await KubeApi.connect(kubeconfig)
    except KubeConfigError as exc:
        raise inst.InstallError(f"cannot read dnsside's Service: {exc}; {hint}") from None
    try:
        svc = await api.get_json(f"/api/v1/namespaces/{namespace}/services/{inst.NAME}")
    except TRANSIENT as exc:
        raise inst.InstallError(f"cannot read Service {namespace}/{inst.NAME}: {exc}; "
                                f"{hint}") from None
    finally:
        await api.close()
    spec = svc.get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    if not ips or not ips[0] or ips[0] == "None":
        raise inst.InstallError(f"Service {namespace}/{inst.NAME} has no ClusterIP; {hint}")
    ports = [p.get("port") for p in spec.get("ports") or ()
             if p.get("name") == "dns" and isinstance(p.get("port"), int)]
    return format_hostport(str(ips[0]), ports[0] if ports else inst.DNS_PORT)


def _monitoring(args: argparse.Namespace, command: str) -> str:
    labels = {}
    for item in args.labels or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise inst.InstallError(f"--label {item!r}: expected KEY=VALUE")
        labels[key] = value
    mode = args.monitoring_mode
    ns = args.monitoring_namespace or ("kube-system" if mode == "sidecar" else inst.NAME)
    return to_yaml(mon.monitoring(mode, ns, labels, args.dashboard_namespace),
                   f"Generated by: {command}\n"
                   "  kubectl apply -f -   (needs prometheus-operator's CRDs)")


def _check(args: argparse.Namespace) -> int:
    from dnsside.ops.check import CheckOptions, passed, render_results, run_checks

    options = CheckOptions(
        kubeconfig=args.check_kubeconfig, namespace=args.check_namespace,
        mode=args.check_mode, cluster_name=args.check_cluster_name, as_user=args.as_user,
        dns=args.dns, coredns_deployment=args.check_coredns,
        flat_network=args.check_flat_network,
        insecure_remote_tls=args.check_insecure_remote_tls,
        links_namespace=args.check_links_namespace)
    results = asyncio.run(run_checks(options))
    sys.stdout.write(render_results(results))
    return 0 if all(passed(r) for r in results) else 1
