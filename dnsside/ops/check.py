"""`dnsside check`: is dnsside installed and fed right? Pass/fail lines, like `linkerd check`.

Every check is declared once in :data:`CHECKS` (category, what it says, the hint
shown when it fails, whether a failure stops the run or only warns), as Linkerd's
``healthcheck`` declares its checkers; :class:`Checker` runs them in order and
reports each through :meth:`Checker.report`.

Every check reads the API server (GET only, like dnsside itself) with the
kubeconfig's identity, except the RBAC ones, which list each resource dnsside
reads as ``--as`` (``Impersonate-User``), so ``--as
system:serviceaccount:dnsside:dnsside`` checks dnsside's own grants. What the
objects *mean* (mirrors, orphans, links) comes from :mod:`dnsside.model.linkerd` and
:mod:`dnsside.core.diagnosis`; the
global service queried through ``--dns`` is picked by dnsside's own index from
the same objects. Under ``--flat-network`` (:mod:`dnsside.ops.flatcheck`) the checks
also read each Link's credentials Secret and, with the kubeconfig in it, the linked
cluster's API. The exit status is 1 when any check that is not a warning failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from dnsside.config import flag, split_hostport, zones_from_env
from dnsside.core import diagnosis
from dnsside.core.diagnosis import CREDENTIALS_FIX, mirror_health
from dnsside.kubeapi.client import (
    TRANSIENT,
    ApiError,
    KubeApi,
    KubeConfigError,
    NotFound,
)
from dnsside.model import linkerd
from dnsside.model.linkerd import (
    LINK_GROUP,
    LinkRecord,
    ObjectError,
    ServiceRecord,
    SliceRecord,
)
from dnsside.ops.flatcheck import KUBECONFIG_KEY, FlatNetworkChecks

OK, FAIL, WARN = "\u2713", "\u00d7", "\u203c"  # check mark, cross, double !, as linkerd
DEFAULT_NAMESPACE = "dnsside"
SIDECAR_NAMESPACE = "kube-system"
CONFIG_NAME = "dnsside"
CLUSTER_KEY = flag("--cluster-name").env
ZONE_KEY = flag("--zone").env
FLAT_NETWORK = flag("--flat-network")
INSECURE_REMOTE_TLS = flag("--insecure-remote-tls")
PAGE = 500  # items per list request
# What a GET can fail with that a check reports: a status, a body that is not an object.
API_ERRORS = (ApiError, ValueError)

API, INSTALL, RBAC, LINKERD, CONFIG, FLAT, WORKLOAD, DNS = (
    "kubernetes-api", "dnsside-install", "dnsside-rbac", "linkerd-multicluster",
    "dnsside-config", "dnsside-flat-network", "dnsside-workload", "dnsside-dns")
_INSTALL = "`dnsside install --cluster-name NAME | kubectl apply -f -`"
_NAME_FIX = ("the name the other clusters linked this one as (`linkerd multicluster link "
             "--cluster-name NAME`): `dnsside install --cluster-name NAME ... | kubectl "
             "apply -f -`")
_REMOTE = "link {cluster}: the API at {server} lists {resource}{selector}"
_REMOTE_RBAC = ("`linkerd --context={cluster} multicluster install | kubectl --context={cluster} "
                "apply -f -` grants it to the remote-access ServiceAccount whose token the "
                "Secret holds")
_REACH = ("is dnsside reachable at {address}? e.g. `kubectl -n {namespace} port-forward "
          "svc/dnsside 5353:53` (TCP only: check queries over TCP)")


@dataclass(frozen=True)
class Check:
    """One check: ``description`` and ``hint`` are templates filled in by the check's
    findings; a ``fatal`` failure ends the run, a ``warning`` fails nothing."""

    category: str
    description: str
    hint: str = ""
    fatal: bool = False
    warning: bool = False


CHECKS: dict[str, Check] = {
    "client": Check(API, "can initialize the client",
                    "{error}: pass --kubeconfig, set $KUBECONFIG or create ~/.kube/config",
                    fatal=True),
    "api": Check(API, "can query the Kubernetes API{version}",
                 "{error}; check the kubeconfig's current context and `kubectl version`",
                 fatal=True),
    "installed": Check(INSTALL, "dnsside is installed{how}",
                       "found no {where}: " + _INSTALL + " (pass --namespace/--mode if it "
                       "lives elsewhere)"),
    "configmap": Check(INSTALL, "ConfigMap {namespace}/" + CONFIG_NAME + " exists",
                       "the pods read their settings from it (envFrom): re-run `dnsside "
                       "install ... | kubectl apply -f -`"),
    "rbac": Check(RBAC, "{who} can list {name}",
                  "{error}; dnsside needs get, list and watch on {resource} (API group "
                  "\"{group}\") cluster-wide: re-apply `dnsside install` (its ClusterRole "
                  "grants exactly that), then `kubectl auth can-i list {name} --as {user}`"),
    "link-crd": Check(LINKERD, "the Link CRD{found} is installed{version}",
                      "install Linkerd's multicluster extension: `linkerd multicluster "
                      "install | kubectl apply -f -`"),
    "links-readable": Check(LINKERD, "Links are readable",
                            "{error}; the kubeconfig's user needs list on links." + LINK_GROUP),
    "links-parse": Check(LINKERD, "every Link is readable ({count} not)", "{errors}"),
    "links-present": Check(LINKERD, "Links are present{names}",
                           "no Link in any namespace: link this cluster to each other one, "
                           "e.g. `linkerd --context=<other> multicluster link-gen "
                           "--cluster-name <other> | kubectl apply -f -` (`multicluster link` "
                           "before Linkerd 2.18)"),
    "mirrors-readable": Check(LINKERD, "Services and EndpointSlices are readable",
                              "{error}; the kubeconfig's user needs list on both, "
                              "cluster-wide"),
    "mirror-slices": Check(LINKERD, "link {cluster}: mirrors have EndpointSlices",
                           diagnosis.MIRRORING_OFF_FIX),
    "orphans": Check(LINKERD, "no orphaned mirrors",
                     "a Link was deleted without unlinking; dnsside leaves these out of every "
                     "answer. Remove them: " + diagnosis.UNLINK),
    "unsafe-addresses": Check(LINKERD, "no served object holds an address no pod or Service "
                              "can own",
                              "{objects}: dnsside leaves these addresses out of every answer "
                              "(unspecified, loopback, link-local, multicast, broadcast); find "
                              "what wrote them"),
    "cluster-name-set": Check(CONFIG, "cluster name is not \"local\" ({name}, from {source})",
                              "\"local\" is the unset default; set " + CLUSTER_KEY + " to "
                              + _NAME_FIX),
    "cluster-name-unique": Check(CONFIG, "cluster name is not a linked cluster's name",
                                 "{name} is also the name of a linked cluster: its members "
                                 "and this cluster's would share names; set " + CLUSTER_KEY
                                 + " to " + _NAME_FIX),
    # --flat-network (dnsside/ops/flatcheck.py runs these)
    "flat-rbac": Check(FLAT, "{who} can get secrets in {namespace}",
                       "{error}; dnsside reads each Link's credentials Secret there: re-apply "
                       "`dnsside install --flat-network ...` (its Role grants get on secrets "
                       "in that namespace only; --links-namespace {namespace} when it is not "
                       "linkerd-multicluster), then `kubectl auth can-i get secrets -n "
                       "{namespace} --as {user}`"),
    "flat-selector": Check(FLAT, "link {cluster}: remoteDiscoverySelector is readable",
                           "{error}: it selects nothing, so dnsside serves none of {cluster}'s "
                           "pods directly; fix the Link (`kubectl -n {namespace} edit "
                           "links.multicluster.linkerd.io {name}`) or link again"),
    "flat-secret": Check(FLAT, "link {cluster}: Secret {secret} has a " + KUBECONFIG_KEY,
                         "{error}; " + CREDENTIALS_FIX),
    "flat-kubeconfig": Check(FLAT, "link {cluster}: its " + KUBECONFIG_KEY + " loads{server}",
                             "{error}; " + CREDENTIALS_FIX),
    "flat-kubeconfig-refused": Check(
        FLAT, "link {cluster}: its " + KUBECONFIG_KEY + " holds data only",
        "{error}; a Link's kubeconfig may hold a server URL (https), "
        "certificate-authority-data, tls-server-name, a token, client-certificate-data "
        "and client-key-data: nothing that runs a command or names a file (" +
        INSECURE_REMOTE_TLS.name + " allows insecure-skip-tls-verify, http:// and "
        "proxy-url, never exec); " + CREDENTIALS_FIX),
    "flat-tls-weakened": Check(
        FLAT, "link {cluster}: TLS to {server} is verified",
        "{weakened}: its kubeconfig weakens TLS, as " + INSECURE_REMOTE_TLS.name + " allows; "
        "whoever is on the path to it can read the token and answer in its place. Put the "
        "API server's CA in certificate-authority-data and an https server in the Secret "
        "(`linkerd multicluster link --api-server-address https://...`)", warning=True),
    "flat-remote": Check(FLAT, _REMOTE),  # passed; its failures are the four below
    "flat-remote-rejected": Check(FLAT, _REMOTE,
                                  "{error}: the linked cluster rejects the token in Secret "
                                  "{secret} (revoked, or its ServiceAccount re-created); "
                                  + CREDENTIALS_FIX),
    "flat-remote-forbidden": Check(FLAT, _REMOTE, "{error}; " + _REMOTE_RBAC),
    "flat-remote-reach": Check(FLAT, _REMOTE,
                               "{error}; `dnsside check` runs here and dnsside in its pod: both "
                               "need a route to {server}, the address `linkerd multicluster "
                               "link --api-server-address` wrote into the Secret"),
    "flat-remote-error": Check(FLAT, _REMOTE, "{error}; the linked cluster's API server fails: "
                               "`kubectl --context={cluster} get --raw /readyz?verbose`"),
    "flat-endpoints": Check(FLAT, "link {cluster}: the API at {server} lists endpointslices",
                            "{error}: the linked cluster's Linkerd is older than 2.14 (its "
                            "remote-access ClusterRole has no endpointslices); dnsside reads "
                            "its v1 Endpoints instead, which it may list. Upgrading Linkerd "
                            "there ends the fallback", warning=True),
    "deployment-ready": Check(WORKLOAD, "Deployment {namespace}/{name} is ready ({ready}/{want})",
                              "`kubectl -n {namespace} describe deployment {name}` and "
                              "`kubectl -n {namespace} logs deployment/{name}`: /readyz fails "
                              "until the first sync from the API server ({updated} replicas "
                              "updated)"),
    "pods-readable": Check(WORKLOAD, "the {name} pods are readable", "{error}"),
    "sidecar-running": Check(WORKLOAD, "the " + CONFIG_NAME + " sidecar runs in the {name} pods "
                             "({running}/{pods})",
                             "`kubectl -n {namespace} describe pods -l {label}` and `kubectl -n "
                             "{namespace} logs -l {label} -c " + CONFIG_NAME + "`"),
    "dns-address": Check(DNS, "--dns {address}", "{error}"),
    "dns-zones": Check(DNS, "the zones of " + ZONE_KEY + " are domain names", "{error}"),
    "dns-soa": Check(DNS, "SOA of {zone} answers through {address}{result}",
                     "SERVFAIL means dnsside has not synced yet; REFUSED means the zone is "
                     "not one it serves (its " + ZONE_KEY + ")"),
    "dns-soa-reach": Check(DNS, "SOA of {zone} answers through {address}",
                           "{error}; " + _REACH),
    "dns-service": Check(DNS, "a global service answers",
                         "no global service with a ready member in the cluster to ask for: "
                         "export a service (mirror.linkerd.io/exported) and link the clusters"),
    "dns-answer": Check(DNS, "{name} {qtype} answers{result}",
                        "dnsside and the API disagree: `dnsside explain` (or /debug/explain on "
                        "the pod) says member by member why"),
    "dns-answer-reach": Check(DNS, "{name} {qtype} answers", "{error}; " + _REACH),
}


@dataclass(frozen=True)
class Result:
    topic: str
    ok: bool
    text: str
    hint: str = ""
    warning: bool = False


@dataclass
class CheckOptions:
    kubeconfig: str | None = None
    namespace: str | None = None  # None: dnsside (standalone), else kube-system (sidecar)
    mode: str = "auto"  # auto | standalone | sidecar
    cluster_name: str | None = None  # used when the ConfigMap has none
    as_user: str | None = None
    dns: str | None = None  # HOST:PORT to query (TCP: works through kubectl port-forward)
    coredns_deployment: str = "coredns"
    timeout: float = 10.0
    flat_network: bool = False  # check the --flat-network setup even if the ConfigMap is off
    insecure_remote_tls: bool = False  # as --insecure-remote-tls (or the ConfigMap's) allows


@dataclass
class _Install:
    mode: str = ""  # "" = not found
    namespace: str = ""
    config: Mapping[str, str] = field(default_factory=dict)
    deployment: Mapping[str, Any] | None = None


class _Fatal(Exception):
    """A fatal check failed: nothing after it can be checked."""


class Checker:
    """Runs the checks in order; each adds :class:`Result` lines to :attr:`results`."""

    def __init__(self, options: CheckOptions, api: KubeApi | None) -> None:
        self.options = options
        self.api = api
        self.results: list[Result] = []

    def report(self, check_id: str, ok: bool, text: str | None = None, **facts: Any) -> None:
        """Record one result of ``CHECKS[check_id]``: ``text`` (default: the description)
        and, when it failed, the hint, both filled in from ``facts``."""
        check = CHECKS[check_id]
        hint = "" if ok else check.hint.format(**facts)
        self.results.append(Result(check.category, ok,
                                   text if text is not None else check.description.format(**facts),
                                   hint, check.warning))
        if check.fatal and not ok:
            raise _Fatal(check_id)

    # ------------------------------------------------------------------ HTTP

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  user: str | None = None) -> dict[str, Any]:
        assert self.api is not None
        return await self.api.get_json(path, params, user=user)

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.get(path)
        except NotFound:
            return None

    async def list_all(self, path: str, selector: str = "") -> list[dict[str, Any]]:
        assert self.api is not None
        return await self.api.list_all(path, selector, page=PAGE)

    # ------------------------------------------------------------------ the checks

    async def run(self) -> list[Result]:
        try:
            await self.check_api()
            install = await self.check_install()
            link_version = await self.check_rbac()
            links = await self.check_links(link_version)
            services, slices = await self.read_mirrors()
            self.check_mirrors(links, services, slices)
            self.check_cluster_name(install, links, services)
            if self.options.flat_network or FLAT_NETWORK.from_env(
                    install.config.get(FLAT_NETWORK.env) or "false"):
                assert self.api is not None
                insecure = self.options.insecure_remote_tls or INSECURE_REMOTE_TLS.from_env(
                    install.config.get(INSECURE_REMOTE_TLS.env) or "false")
                await FlatNetworkChecks(self.api, self.report, self.options.as_user,
                                        self.options.timeout, insecure).run(links)
            await self.check_workload(install)
            if self.options.dns:
                await self.check_dns(install, services, slices, links)
        except _Fatal:
            pass
        return self.results

    async def check_api(self) -> None:
        try:
            version = await self.get("/version")
        except TRANSIENT as exc:
            self.report("api", False, version="", error=_describe(exc))
            return
        self.report("api", True, version=f" ({version.get('gitVersion', '?')})")

    async def check_install(self) -> _Install:
        o = self.options
        found = _Install()
        standalone_ns = o.namespace or DEFAULT_NAMESPACE
        sidecar_ns = o.namespace or SIDECAR_NAMESPACE
        if o.mode in ("auto", "standalone"):
            dep = await self.get_or_none(
                f"/apis/apps/v1/namespaces/{quote(standalone_ns)}/deployments/{CONFIG_NAME}")
            if dep is not None:
                found = _Install("standalone", standalone_ns, deployment=dep)
        if not found.mode and o.mode in ("auto", "sidecar"):
            dep = await self.get_or_none(f"/apis/apps/v1/namespaces/{quote(sidecar_ns)}/"
                                         f"deployments/{quote(o.coredns_deployment)}")
            containers = (((dep or {}).get("spec") or {}).get("template") or {}).get(
                "spec", {}).get("containers") or []
            if any(c.get("name") == CONFIG_NAME for c in containers):
                found = _Install("sidecar", sidecar_ns, deployment=dep)
        if not found.mode:
            # Still read the settings, if they are there, for the checks that follow.
            found.namespace = sidecar_ns if o.mode == "sidecar" else standalone_ns
            found.config = await self.read_config(found.namespace) or {}
            where = f"Deployment {standalone_ns}/{CONFIG_NAME}" if o.mode != "sidecar" else ""
            if o.mode != "standalone":
                where += (" or " if where else "") + (
                    f"a {CONFIG_NAME} container in {sidecar_ns}/{o.coredns_deployment}")
            self.report("installed", False, how="", where=where)
            return found
        self.report("installed", True,
                    how=f" ({found.mode} mode, namespace {found.namespace})")
        config = await self.read_config(found.namespace)
        found.config = config or {}
        self.report("configmap", config is not None, namespace=found.namespace)
        return found

    async def read_config(self, namespace: str) -> dict[str, str] | None:
        """The string entries of dnsside's ConfigMap; None when there is none."""
        cm = await self.get_or_none(
            f"/api/v1/namespaces/{quote(namespace)}/configmaps/{CONFIG_NAME}")
        if cm is None:
            return None
        return {k: v for k, v in (cm.get("data") or {}).items() if isinstance(v, str)}

    async def check_rbac(self) -> str | None:
        """List each resource dnsside reads (limit=1) as ``--as``; returns the Link CRD's
        preferred version, None when the CRD is not served."""
        who = self.options.as_user or "the kubeconfig's user"
        group = await self.get_or_none(f"/apis/{LINK_GROUP}")
        link_version = None
        if group is not None:
            link_version = str(((group.get("preferredVersion") or {}).get("version")) or "")
        checks = [("services", "/api/v1/services", ""),
                  ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices",
                   "discovery.k8s.io")]
        if link_version:
            checks.append((f"links.{LINK_GROUP}", f"/apis/{LINK_GROUP}/{link_version}/links",
                           LINK_GROUP))
        for name, path, api_group in checks:
            try:
                await self.get(path, {"limit": "1"}, user=self.options.as_user)
            except API_ERRORS as exc:
                message = exc.message if isinstance(exc, ApiError) else ""
                self.report("rbac", False, who=who, name=name, error=message or exc,
                            resource=name.split(".")[0], group=api_group,
                            user=self.options.as_user or "<user>")
                continue
            self.report("rbac", True, who=who, name=name)
        return link_version

    async def check_links(self, version: str | None) -> list[LinkRecord] | None:
        """Links, or None when they cannot be read (then nothing is an orphan)."""
        if not version:
            self.report("link-crd", False, found=f" (links.{LINK_GROUP})", version="")
            return None
        self.report("link-crd", True, found="", version=f" (preferred version {version})")
        try:
            items = await self.list_all(f"/apis/{LINK_GROUP}/{version}/links")
        except API_ERRORS as exc:
            self.report("links-readable", False, error=exc)
            return None
        links: list[LinkRecord] = []
        broken: list[str] = []
        for item in items:
            try:
                links.append(linkerd.parse_link(item))
            except ObjectError as exc:
                broken.append(str(exc))
        if broken:
            self.report("links-parse", False, count=len(broken), errors="; ".join(broken[:3]))
        names = ", ".join(sorted(f"{lk.target_cluster}" for lk in links))
        self.report("links-present", bool(links), names=f": {names}" if links else "")
        return links

    async def read_mirrors(self) -> tuple[list[ServiceRecord], list[SliceRecord]]:
        services: list[ServiceRecord] = []
        slices: list[SliceRecord] = []
        try:
            for item in await self.list_all("/api/v1/services"):
                with contextlib.suppress(ObjectError):
                    services.append(linkerd.parse_service(item))
            for item in await self.list_all("/apis/discovery.k8s.io/v1/endpointslices"):
                with contextlib.suppress(ObjectError):
                    slices.append(linkerd.parse_slice(item))
        except API_ERRORS as exc:
            self.report("mirrors-readable", False, error=exc)
        return services, slices

    def check_mirrors(self, links: list[LinkRecord] | None, services: Sequence[ServiceRecord],
                      slices: Sequence[SliceRecord]) -> None:
        health = mirror_health(services, {(s.namespace, s.service_name) for s in slices}, links)
        for cluster, h in sorted(health.items()):
            if h.orphaned:
                continue
            counts = f"{h.pod_mirrors} per-pod and {h.gateway_mirrors} gateway mirrors"
            if h.slices_mirrored:
                extra = (f"; {len(h.missing_gateway_slices)} gateway mirrors without endpoints "
                         "(their remote service has no ready endpoint)"
                         if h.missing_gateway_slices else "")
                self.report("mirror-slices", True, f"link {cluster}: mirrors have "
                            f"EndpointSlices ({counts}){extra}")
                continue
            missing = h.missing_pod_slices + h.missing_gateway_slices
            self.report("mirror-slices", False, f"link {cluster}: {len(missing)} mirrors have "
                        f"no EndpointSlice ({_names(missing)})")
        unsafe = diagnosis.unsafe_objects(services, slices)
        more = f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else ""
        self.report("unsafe-addresses", not unsafe, None if not unsafe else
                    f"{len(unsafe)} served objects hold an address no pod or Service can own",
                    objects="; ".join(unsafe[:3]) + more)
        if links is None:
            return
        orphans = {c: h for c, h in health.items() if h.orphaned}
        if not orphans:
            self.report("orphans", True)
        for cluster, h in sorted(orphans.items()):
            self.report("orphans", False, f"{len(h.services)} mirrors of cluster {cluster} "
                        f"match no Link ({_names(h.services)})", cluster=cluster)

    def check_cluster_name(self, install: _Install, links: list[LinkRecord] | None,
                           services: Sequence[ServiceRecord]) -> None:
        configured = install.config.get(CLUSTER_KEY)
        name = (configured or self.options.cluster_name or "local").lower()
        source = (f"ConfigMap {install.namespace}/{CONFIG_NAME}" if configured
                  else "--cluster-name" if self.options.cluster_name else "the default")
        self.report("cluster-name-set", name != "local", name=name, source=source)
        linked = ({lk.target_cluster for lk in links} if links else
                  {s.cluster for s in services if s.cluster})
        self.report("cluster-name-unique", name not in linked, name=name)

    async def check_workload(self, install: _Install) -> None:
        if not install.mode or install.deployment is None:
            return
        dep = install.deployment
        ns, name = install.namespace, dep["metadata"]["name"]
        if install.mode == "standalone":
            want = int((dep.get("spec") or {}).get("replicas", 1))
            status = dep.get("status") or {}
            ready = int(status.get("readyReplicas") or 0)
            self.report("deployment-ready", ready >= want and want > 0, namespace=ns,
                        name=name, ready=ready, want=want,
                        updated=int(status.get("updatedReplicas") or 0))
            return
        selector = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        label = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        try:
            pods = await self.list_all(f"/api/v1/namespaces/{quote(ns)}/pods", label)
        except API_ERRORS as exc:
            self.report("pods-readable", False, name=name, error=exc)
            return
        running = 0
        for pod in pods:
            for st in (pod.get("status") or {}).get("containerStatuses") or []:
                if st.get("name") == CONFIG_NAME and st.get("ready") and "running" in (
                        st.get("state") or {}):
                    running += 1
        self.report("sidecar-running", bool(pods) and running == len(pods), name=name,
                    running=running, pods=len(pods), namespace=ns, label=label)

    async def check_dns(self, install: _Install, services: Sequence[ServiceRecord],
                        slices: Sequence[SliceRecord], links: list[LinkRecord] | None) -> None:
        assert self.options.dns is not None
        address = self.options.dns
        try:
            host, port = split_hostport(address, 53)
        except ValueError as exc:
            self.report("dns-address", False, address=address, error=f"--dns {address!r}: {exc}")
            return
        try:
            zones = zones_from_env(install.config.get(ZONE_KEY) or "")
        except ValueError as exc:
            self.report("dns-zones", False, error=exc)
            return
        reach = {"address": address, "namespace": install.namespace or DEFAULT_NAMESPACE}
        for zone in zones:
            try:
                rcode, answers = await _query(host, port, zone, "SOA", self.options.timeout)
            except (OSError, TimeoutError, ValueError) as exc:
                self.report("dns-soa-reach", False, zone=zone, error=_describe(exc), **reach)
                continue
            serial = f", serial {answers[0].split()[2]}" if answers else ""
            self.report("dns-soa", rcode == "NOERROR" and bool(answers), zone=zone,
                        address=address, result=f" ({rcode}{serial})")
        pick = _pick_service(services, slices, links, install.config.get(CLUSTER_KEY) or
                             self.options.cluster_name or "local", zones[0])
        if pick is None:
            self.report("dns-service", False)
            return
        name, qtype, expected = pick
        try:
            rcode, answers = await _query(host, port, name, qtype, self.options.timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            self.report("dns-answer-reach", False, name=name, qtype=qtype,
                        error=_describe(exc), **reach)
            return
        self.report("dns-answer", rcode == "NOERROR" and bool(answers), name=name, qtype=qtype,
                    result=f" ({rcode}, {len(answers)} records; the API objects give "
                    f"{expected})")


# --------------------------------------------------------------------------- helpers


def _names(services: Sequence[ServiceRecord]) -> str:
    shown = ", ".join(f"{s.namespace}/{s.name}" for s in services[:3])
    return shown + (f" and {len(services) - 3} more" if len(services) > 3 else "")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _pick_service(services: Sequence[ServiceRecord], slices: Sequence[SliceRecord],
                  links: list[LinkRecord] | None, cluster_name: str, zone: str
                  ) -> tuple[str, str, int] | None:
    """A global service with ready members, as dnsside's own index builds it from these
    objects: (name to ask, A or AAAA, how many addresses the objects give)."""
    from dnsside.core.index import Index, IndexOptions
    from dnsside.core.publishing import make_responder
    from dnsside.dns.zone import ZoneOptions
    from dnsside.model.events import Kind, Replace, Synced

    options = IndexOptions(cluster_name=cluster_name.lower())
    index = Index(make_responder([zone], ZoneOptions()), options)
    records: list[linkerd.Record] = [*services, *slices, *(links or [])]
    kinds = {Kind.SERVICE, Kind.SLICE} | ({Kind.LINK} if links is not None else set())
    index.apply([Replace(frozenset(kinds), tuple(records)), Synced()])
    best: tuple[int, str, str, int] | None = None
    for (namespace, name), gs in sorted(index.global_services.items()):
        ready = [m for m in gs.members if m.ready]
        v4 = sum(1 for m in ready for a in m.addresses if ":" not in a)
        v6 = sum(1 for m in ready for a in m.addresses if ":" in a)
        if not v4 and not v6:
            continue
        clusters = len({m.cluster for m in ready})
        qtype, count = ("A", v4) if v4 else ("AAAA", v6)
        if best is None or clusters > best[0]:
            best = (clusters, f"{name}.{namespace}.{zone}", qtype, count)
    return None if best is None else (best[1], best[2], best[3])


_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


async def _query(host: str, port: int, name: str, qtype: str, timeout: float
                 ) -> tuple[str, list[str]]:
    """One query over TCP (kubectl port-forward carries TCP only): (rcode, answer RRs)."""
    from dnslib import QTYPE, DNSRecord

    q = DNSRecord.question(name, qtype)
    q.header.id = random.randrange(1 << 16)
    wire = q.pack()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(struct.pack("!H", len(wire)) + wire)
        await writer.drain()
        size = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), timeout))[0]
        data = await asyncio.wait_for(reader.readexactly(size), timeout)
    except asyncio.IncompleteReadError:
        raise ValueError("the server closed the connection without answering") from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    reply = DNSRecord.parse(data)
    if reply.header.id != q.header.id:
        raise ValueError("the answer's ID does not match the query's")
    want = getattr(QTYPE, qtype)
    answers = [str(rr.rdata) for rr in reply.rr if rr.rtype == want]
    return _RCODES.get(reply.header.rcode, str(reply.header.rcode)), answers


async def run_checks(options: CheckOptions) -> list[Result]:
    """Every check's result; never raises for what it checks."""
    checker = Checker(options, None)
    try:
        checker.api = await KubeApi.connect(options.kubeconfig, request_timeout=options.timeout)
    except KubeConfigError as exc:
        with contextlib.suppress(_Fatal):
            checker.report("client", False, error=exc)
        return checker.results
    checker.report("client", True)
    try:
        return await checker.run()
    finally:
        await checker.api.close()


def passed(result: Result) -> bool:
    """A result that does not fail the run: it passed, or it is a warning."""
    return result.ok or result.warning


def render(results: Sequence[Result]) -> str:
    lines: list[str] = []
    topic = None
    for r in results:
        if r.topic != topic:
            if topic is not None:
                lines.append("")
            lines += [r.topic, "-" * len(r.topic)]
            topic = r.topic
        lines.append(f"{OK if r.ok else WARN if r.warning else FAIL} {r.text}")
        if not r.ok and r.hint:
            lines.append(f"    hint: {r.hint}")
    failed = sum(1 for r in results if not passed(r))
    lines += ["", f"Status check results are {FAIL if failed else OK}"
              + (f" ({failed} failed)" if failed else "")]
    return "\n".join(lines) + "\n"
