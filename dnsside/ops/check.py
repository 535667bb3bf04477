"""`dnsside check`: is dnsside installed and fed right? Pass/fail lines, like `linkerd check`.

Every check is an entry (:mod:`dnsside.ops.checker`) holding its line, its hint, whether
a failure is fatal or a warning, and its function; :data:`CATEGORIES` lists them in the
order they run and print. This module holds the checks of the cluster itself (what they
read is :mod:`dnsside.ops.clusterread`'s, each fact read once), and hands
the ``--flat-network`` ones (:mod:`dnsside.ops.flatcheck`) and the ``--dns`` ones
(:mod:`dnsside.ops.dnscheck`) what they read.

Every check reads the API server (GET only, like dnsside itself) with the
kubeconfig's identity, except the RBAC ones, which list each resource dnsside
reads as ``--as`` (``Impersonate-User``), so ``--as
system:serviceaccount:dnsside:dnsside`` checks dnsside's own grants. What the
objects *mean* (mirrors, orphans, links) comes from :mod:`dnsside.model.linkerd` and
:mod:`dnsside.core.diagnosis`. The exit status is 1 when any check that is not a
warning failed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from urllib.parse import quote

from dnsside.config import flag, normal_zones, zones_from_env
from dnsside.core import diagnosis
from dnsside.kubeapi.client import (
    KUBECONFIG_FIX,
    TRANSIENT,
    ApiError,
    KubeApi,
    KubeConfigError,
)
from dnsside.model.linkerd import LINK_GROUP, ServiceRecord
from dnsside.ops import dnscheck, flatcheck, spreadcheck
from dnsside.ops.checker import (
    Category,
    Finding,
    Findings,
    ForEach,
    Result,
    Severity,
    check,
    passed,
    render_results,
    walk,
)
from dnsside.ops.clusterread import (
    API_ERRORS,
    CLUSTER_KEY,
    CONFIG_NAME,
    DEFAULT_NAMESPACE,
    SIDECAR_NAMESPACE,
    CheckOptions,
    Cluster,
)
from dnsside.ops.dnscheck import DnsServer
from dnsside.ops.flatcheck import INSECURE_REMOTE_TLS, FlatNetworkSetup

FLAT_NETWORK = flag("--flat-network")
NOTIFY, ALLOW_TRANSFER, TSIG_KEY_FILE = (flag("--notify"), flag("--allow-transfer"),
                                         flag("--tsig-key-file"))
MCS_ZONE, LOCALITY = flag("--mcs-zone"), flag("--locality")
CATALOG_ZONE = flag("--catalog-zone")

_INSTALL = "`dnsside install --cluster-name NAME | kubectl apply -f -`"
_NAME_FIX = ("the name the other clusters linked this one as (`linkerd multicluster link "
             "--cluster-name NAME`): `dnsside install --cluster-name NAME ... | kubectl "
             "apply -f -`")


# --------------------------------------------------------------------------- kubernetes-api


@check("client", "can initialize the client", "{error}", Severity.FATAL)
async def client(c: Cluster) -> Findings:
    try:
        c.client = await KubeApi.connect(c.options.kubeconfig,
                                         request_timeout=c.options.timeout)
    except KubeConfigError as exc:
        # The way out, once: "no configuration" already ends with it.
        error = str(exc) if KUBECONFIG_FIX in str(exc) else f"{exc}: {KUBECONFIG_FIX}"
        yield Finding(False, error=error)
        return
    yield Finding(True)


@check("api", "can query the Kubernetes API{version}",
       "{error}; check the kubeconfig's current context and `kubectl version`", Severity.FATAL)
async def kubernetes_api(c: Cluster) -> Findings:
    try:
        version = await c.get("/version")
    except TRANSIENT as exc:
        yield Finding(False, version="", error=_describe(exc))
        return
    yield Finding(True, version=f" ({version.get('gitVersion', '?')})")


# --------------------------------------------------------------------------- dnsside-install


@check("installed", "dnsside is installed{how}",
       "found no {where}: " + _INSTALL + " (pass --namespace/--mode if it lives elsewhere)")
async def installed(c: Cluster) -> Findings:
    found, o = await c.install(), c.options
    if found.mode:
        yield Finding(True, how=f" ({found.mode} mode, namespace {found.namespace})")
        return
    where = (f"Deployment {o.namespace or DEFAULT_NAMESPACE}/{CONFIG_NAME}"
             if o.mode != "sidecar" else "")
    if o.mode != "standalone":
        where += (" or " if where else "") + (f"a {CONFIG_NAME} container in "
                                              f"{o.namespace or SIDECAR_NAMESPACE}/"
                                              f"{o.coredns_deployment}")
    yield Finding(False, how="", where=where)


@check("configmap", "ConfigMap {namespace}/" + CONFIG_NAME + " exists",
       "the pods read their settings from it (envFrom): re-run `dnsside install ... | kubectl "
       "apply -f -`")
async def configmap(c: Cluster) -> Findings:
    found = await c.install()
    if found.mode:
        yield Finding(found.has_config, namespace=found.namespace)


# --------------------------------------------------------------------------- dnsside-rbac


@check("rbac", "{who} can list {name}{scope}",
       "{error}; dnsside needs get, list and watch on {resource} (API group \"{group}\") "
       "{where}: re-apply `dnsside install` (its ClusterRole grants services and "
       "endpointslices, its Role in the links namespace Links), then `kubectl auth can-i "
       "list {name}{flag} --as {user}`")
async def rbac(c: Cluster) -> Findings:
    """List each resource dnsside reads (limit=1) as ``--as``, where it reads it; Links when
    they are served, in the links namespace."""
    who, user = c.options.as_user or "the kubeconfig's user", c.options.as_user
    version, namespace = await c.link_version(), await c.links_namespace()
    resources = [("services", "/api/v1/services", "", ""),
                 ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices",
                  "discovery.k8s.io", "")]
    if version:
        resources.append((f"links.{LINK_GROUP}", f"/apis/{LINK_GROUP}/{version}/namespaces/"
                          f"{quote(namespace)}/links", LINK_GROUP, namespace))
    for name, path, api_group, ns in resources:
        scope = f" in {ns}" if ns else ""
        try:
            await c.get(path, {"limit": "1"}, user=user)
        except API_ERRORS as exc:
            message = exc.message if isinstance(exc, ApiError) else ""
            yield Finding(False, who=who, name=name, error=message or exc, scope=scope,
                          resource=name.split(".")[0], group=api_group, user=user or "<user>",
                          where=f"in namespace {ns}" if ns else "cluster-wide",
                          flag=f" -n {ns}" if ns else "")
            continue
        yield Finding(True, who=who, name=name, scope=scope)


# --------------------------------------------------------------------------- linkerd-multicluster


@check("link-crd", "the Link CRD{found} is installed{version}",
       "install Linkerd's multicluster extension: `linkerd multicluster install | kubectl "
       "apply -f -`")
async def link_crd(c: Cluster) -> Findings:
    version = await c.link_version()
    if not version:
        yield Finding(False, found=f" (links.{LINK_GROUP})", version="")
    else:
        yield Finding(True, found="", version=f" (preferred version {version})")


@check("links-readable", "Links are readable",
       "{error}; the kubeconfig's user needs list on links." + LINK_GROUP)
async def links_readable(c: Cluster) -> Findings:
    links = await c.links()
    if links.error is not None:
        yield Finding(False, error=links.error)


@check("links-parse", "every Link is readable ({count} not)", "{errors}")
async def links_parse(c: Cluster) -> Findings:
    links = await c.links()
    if links.broken:
        yield Finding(False, count=len(links.broken), errors="; ".join(links.broken[:3]))


@check("links-counted", "Link {link} counts",
       "{why}. The Link that counts is the one in the links namespace created first; "
       "`kubectl get links.multicluster.linkerd.io -A` lists them all", Severity.WARNING)
async def links_counted(c: Cluster) -> Findings:
    """A Link elsewhere, or a second for a cluster: dnsside ignores it (links.choose)."""
    for link, why in (await c.links()).refused:
        yield Finding(False, link=link, why=why)


@check("links-present", "Links are present{names}",
       "no Link in the links namespace: link this cluster to each other one, e.g. `linkerd "
       "--context=<other> multicluster link-gen --cluster-name <other> | kubectl apply -f -` "
       "(`multicluster link` before Linkerd 2.18)")
async def links_present(c: Cluster) -> Findings:
    links = (await c.links()).records
    if links is not None:
        names = ", ".join(sorted(f"{lk.target_cluster}" for lk in links))
        yield Finding(bool(links), names=f": {names}" if links else "")


@check("mirrors-readable", "Services and EndpointSlices are readable",
       "{error}; the kubeconfig's user needs list on both, cluster-wide")
async def mirrors_readable(c: Cluster) -> Findings:
    mirrors = await c.mirrors()
    if mirrors.error is not None:
        yield Finding(False, error=mirrors.error)


@check("mirror-slices", "link {cluster}: mirrors have EndpointSlices",
       diagnosis.MIRRORING_OFF_FIX)
async def mirror_slices(c: Cluster) -> Findings:
    for cluster, h in sorted((await c.health()).items()):
        if h.orphaned:
            continue
        counts = (f"{h.pod_mirrors} per-pod and "
                  f"{diagnosis.plural(h.gateway_mirrors, 'gateway mirror', 'gateway mirrors')}")
        if h.slices_mirrored:
            gone = h.missing_gateway_slices
            extra = (f"; {diagnosis.plural(len(gone), 'gateway mirror', 'gateway mirrors')} "
                     "without endpoints "
                     "(their remote service has no ready endpoint)"
                     if h.missing_gateway_slices else "")
            yield Finding(True, f"link {cluster}: mirrors have EndpointSlices ({counts}){extra}")
            continue
        missing = h.missing_pod_slices + h.missing_gateway_slices
        yield Finding(False, f"link {cluster}: "
                      f"{diagnosis.plural(len(missing), 'mirror has', 'mirrors have')} "
                      "no EndpointSlice "
                      f"({_names(missing)})")


@check("unsafe-addresses", "no served object holds an address no pod or Service can own",
       "{objects}: dnsside leaves these addresses out of every answer (unspecified, loopback, "
       "link-local, multicast, broadcast); find what wrote them")
async def unsafe_addresses(c: Cluster) -> Findings:
    mirrors = await c.mirrors()
    unsafe = diagnosis.unsafe_objects(mirrors.services, mirrors.slices)
    more = f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else ""
    yield Finding(not unsafe, None if not unsafe else
                  f"{diagnosis.plural(len(unsafe), 'served object holds', 'served objects hold')}"
                  " an address no pod or Service can own",
                  objects="; ".join(unsafe[:3]) + more)


@check("orphans", "no orphaned mirrors",
       "a Link was deleted without unlinking; dnsside leaves these out of every answer. Remove "
       "them: " + diagnosis.UNLINK)
async def orphans(c: Cluster) -> Findings:
    if (await c.links()).records is None:
        return  # without the Links, nothing is an orphan
    found = {cluster: h for cluster, h in (await c.health()).items() if h.orphaned}
    if not found:
        yield Finding(True)
    for cluster, h in sorted(found.items()):
        yield Finding(False, f"{diagnosis.plural(len(h.services), 'mirror', 'mirrors')} of "
                      f"cluster {cluster} match{'es' if len(h.services) == 1 else ''} no Link "
                      f"({_names(h.services)})", cluster=cluster)


# --------------------------------------------------------------------------- dnsside-config


@check("cluster-name-set", "cluster name is not \"local\" ({name}, from {source})",
       "\"local\" is the unset default; set " + CLUSTER_KEY + " to " + _NAME_FIX)
async def cluster_name_set(c: Cluster) -> Findings:
    name, source = await c.cluster_name()
    yield Finding(name != "local", name=name, source=source)


@check("cluster-name-unique", "cluster name is not a linked cluster's name",
       "{name} is also the name of a linked cluster: its members and this cluster's would "
       "share names; set " + CLUSTER_KEY + " to " + _NAME_FIX)
async def cluster_name_unique(c: Cluster) -> Findings:
    name, _ = await c.cluster_name()
    links = (await c.links()).records
    linked = ({lk.target_cluster for lk in links} if links else
              {s.cluster for s in (await c.mirrors()).services if s.cluster})
    yield Finding(name not in linked, name=name)


@check("transfer-setup", "the --notify secondaries ({notify}) may transfer the zones",
       "dnsside NOTIFYs them, but no transfer is allowed: their IXFR/AXFR gets REFUSED. Set "
       + ALLOW_TRANSFER.env + " to their addresses and/or " + TSIG_KEY_FILE.env
       + " (re-run `dnsside install --allow-transfer CIDR --tsig-key-file FILE`)")
async def transfer_setup(c: Cluster) -> Findings:
    """A NOTIFY asks a secondary to transfer: somebody must be let in to."""
    config = (await c.install()).config
    notify = NOTIFY.from_env(config.get(NOTIFY.env) or "")
    if notify:
        yield Finding(bool(config.get(ALLOW_TRANSFER.env) or config.get(TSIG_KEY_FILE.env)),
                      notify=", ".join(notify))


@check("catalog-setup", "secondaries may transfer the catalog zone {catalog}",
       "dnsside serves a catalog for secondaries to configure themselves from, but no transfer "
       "is allowed: theirs gets REFUSED. Set " + ALLOW_TRANSFER.env + " to their addresses "
       "and/or " + TSIG_KEY_FILE.env + " (re-run `dnsside install --allow-transfer CIDR "
       "--tsig-key-file FILE`), or drop " + CATALOG_ZONE.env)
async def catalog_setup(c: Cluster) -> Findings:
    """A catalog is only read by zone transfer."""
    config = (await c.install()).config
    catalog = config.get(CATALOG_ZONE.env)
    if catalog:
        yield Finding(bool(config.get(ALLOW_TRANSFER.env) or config.get(TSIG_KEY_FILE.env)),
                      catalog=catalog)


async def flat_network(c: Cluster) -> AsyncGenerator[FlatNetworkSetup, None]:
    """The flat-network setup, when the ConfigMap turns it on or --flat-network asks."""
    config = (await c.install()).config
    if c.options.flat_network or FLAT_NETWORK.from_env(config.get(FLAT_NETWORK.env) or "false"):
        insecure = c.options.insecure_remote_tls or INSECURE_REMOTE_TLS.from_env(
            config.get(INSECURE_REMOTE_TLS.env) or "false")
        yield FlatNetworkSetup(c.api, c.options.as_user, c.options.timeout, insecure,
                          (await c.links()).records or (), await c.links_namespace())


# --------------------------------------------------------------------------- dnsside-workload


@check("deployment-ready", "Deployment {namespace}/{name} is ready ({ready}/{want})",
       "`kubectl -n {namespace} describe deployment {name}` and `kubectl -n {namespace} logs "
       "deployment/{name}`: /readyz fails until the first sync from the API server ({updated} "
       "replicas updated)")
async def deployment_ready(c: Cluster) -> Findings:
    install = await c.install()
    if install.mode != "standalone" or install.deployment is None:
        return
    dep = install.deployment
    want = int((dep.get("spec") or {}).get("replicas", 1))
    status = dep.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    yield Finding(ready >= want and want > 0, namespace=install.namespace,
                  name=dep["metadata"]["name"], ready=ready, want=want,
                  updated=int(status.get("updatedReplicas") or 0))


@check("pods-readable", "the {name} pods are readable", "{error}")
async def pods_readable(c: Cluster) -> Findings:
    install = await c.install()
    if install.mode == "sidecar" and install.deployment is not None:
        pods = await c.pods()
        if pods.error is not None:
            yield Finding(False, name=install.deployment["metadata"]["name"], error=pods.error)


@check("sidecar-running",
       "the " + CONFIG_NAME + " sidecar runs in the {name} pods ({running}/{pods})",
       "`kubectl -n {namespace} describe pods -l {label}` and `kubectl -n {namespace} logs -l "
       "{label} -c " + CONFIG_NAME + "`")
async def sidecar_running(c: Cluster) -> Findings:
    install = await c.install()
    if install.mode != "sidecar" or install.deployment is None:
        return
    pods = await c.pods()
    if pods.items is None:
        return
    running = sum(1 for pod in pods.items
                  for st in (pod.get("status") or {}).get("containerStatuses") or []
                  if st.get("name") == CONFIG_NAME and st.get("ready")
                  and "running" in (st.get("state") or {}))
    yield Finding(bool(pods.items) and running == len(pods.items),
                  name=install.deployment["metadata"]["name"], running=running,
                  pods=len(pods.items), namespace=install.namespace, label=pods.label)


async def spread(c: Cluster) -> AsyncGenerator[spreadcheck.Spread, None]:
    """The cluster DNS's Corefiles and the Services' locality annotations, for dnsside's
    zones (its ConfigMap's, else the default)."""
    config, mirrors = (await c.install()).config, await c.mirrors()
    try:
        zones = (*zones_from_env(config.get(dnscheck.ZONE_KEY) or ""),
                 *normal_zones(MCS_ZONE.from_env(config.get(MCS_ZONE.env) or "")))
    except ValueError:
        zones = zones_from_env("")  # a bad setting is the dns-zones check's to report
    yield spreadcheck.Spread(c.get_or_none, frozenset(zones),
                             mirrors.services if mirrors.error is None else None)


async def dns_server(c: Cluster) -> AsyncGenerator[DnsServer, None]:
    """The server --dns names, with what the API objects say it should answer."""
    if c.options.dns:
        install, mirrors = await c.install(), await c.mirrors()
        yield DnsServer(c.options.dns, install.namespace or DEFAULT_NAMESPACE,
                        install.config.get(dnscheck.ZONE_KEY) or "",
                        install.config.get(CLUSTER_KEY) or c.options.cluster_name or "local",
                        mirrors.services, mirrors.slices, (await c.links()).records,
                        c.options.timeout, install.config.get(LOCALITY.env) or "all",
                        install.config.get(MCS_ZONE.env) or "")


API, INSTALL, RBAC, LINKERD, CONFIG, FLAT, WORKLOAD, SPREAD, DNS = (
    "kubernetes-api", "dnsside-install", "dnsside-rbac", "linkerd-multicluster",
    "dnsside-config", "dnsside-flat-network", "dnsside-workload", "dnsside-spread",
    "dnsside-dns")

CATEGORIES: tuple[Category[Cluster], ...] = (
    Category(API, (client, kubernetes_api)),
    Category(INSTALL, (installed, configmap)),
    Category(RBAC, (rbac,)),
    Category(LINKERD, (link_crd, links_readable, links_parse, links_counted, links_present,
                       mirrors_readable,
                       mirror_slices, unsafe_addresses, orphans)),
    Category(CONFIG, (cluster_name_set, cluster_name_unique, transfer_setup, catalog_setup)),
    Category(FLAT, (ForEach(flat_network, flatcheck.CHECKS),)),
    Category(WORKLOAD, (deployment_ready, pods_readable, sidecar_running)),
    Category(SPREAD, (ForEach(spread, spreadcheck.CHECKS),)),
    Category(DNS, (ForEach(dns_server, dnscheck.CHECKS),)),
)


def _names(services: Sequence[ServiceRecord]) -> str:
    shown = ", ".join(f"{s.namespace}/{s.name}" for s in services[:3])
    return shown + (f" and {len(services) - 3} more" if len(services) > 3 else "")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


async def run_checks(options: CheckOptions) -> list[Result]:
    """Every check's result; never raises for what it checks."""
    cluster = Cluster(options)
    try:
        return await walk(CATEGORIES, cluster)
    finally:
        await cluster.close()


__all__ = ["CATEGORIES", "CheckOptions", "Result", "passed", "render_results", "run_checks"]
