"""`dnsside check`: is dnsside installed and fed right? Pass/fail lines, like `linkerd check`.

Every check reads the API server (GET only, like dnsside itself) with the
kubeconfig's identity, except the RBAC ones, which list each resource dnsside
reads as ``--as`` (``Impersonate-User``), so ``--as
system:serviceaccount:dnsside:dnsside`` checks dnsside's own grants. What the
objects *mean* (mirrors, orphans, links) comes from :mod:`dnsside.linkerd`, the
one module that knows Linkerd; the global service queried through ``--dns``
is picked by dnsside's own index from the same objects.

Each failed check prints a hint; the exit status is 1 when any check failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from dnsside import linkerd
from dnsside.diagnosis import mirror_health
from dnsside.linkerd import (
    LINK_GROUP,
    LinkRecord,
    ObjectError,
    ServiceRecord,
    SliceRecord,
)

OK, FAIL = "\u2713", "\u00d7"  # check mark, cross (as linkerd check prints)
DEFAULT_NAMESPACE = "dnsside"
SIDECAR_NAMESPACE = "kube-system"
CONFIG_NAME = "dnsside"
CLUSTER_KEY = "DNSSIDE_CLUSTER_NAME"
ZONE_KEY = "DNSSIDE_ZONE"
PAGE = 500


@dataclass(frozen=True)
class Result:
    topic: str
    ok: bool
    text: str
    hint: str = ""


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


class ApiFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


@dataclass
class _Install:
    mode: str = ""  # "" = not found
    namespace: str = ""
    config: Mapping[str, str] = field(default_factory=dict)
    deployment: Mapping[str, Any] | None = None


class Checker:
    """Runs the checks in order; each adds :class:`Result` lines to :attr:`results`."""

    def __init__(self, options: CheckOptions, api: Any) -> None:
        self.options = options
        self.api = api
        self.results: list[Result] = []

    def add(self, topic: str, ok: bool, text: str, hint: str = "") -> bool:
        self.results.append(Result(topic, ok, text, "" if ok else hint))
        return ok

    # ------------------------------------------------------------------ HTTP

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  user: str | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if user:
            headers["Impersonate-User"] = user
        timeout = aiohttp.ClientTimeout(total=self.options.timeout)
        resp = await self.api.call_api(
            path, "GET", query_params=list((params or {}).items()), header_params=headers,
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
        try:
            body = await resp.read()
        finally:
            resp.release()
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if resp.status != 200:
            message = data.get("message") if isinstance(data, dict) else None
            raise ApiFailure(resp.status, str(message or resp.reason or ""))
        if not isinstance(data, dict):
            raise ApiFailure(0, f"GET {path}: the answer is not a JSON object")
        return data

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.get(path)
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def list_all(self, path: str, selector: str = "") -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        params = {"limit": str(PAGE)}
        if selector:
            params["labelSelector"] = selector
        while True:
            body = await self.get(path, params)
            items.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items
            params["continue"] = str(token)

    # ------------------------------------------------------------------ the checks

    async def run(self) -> list[Result]:
        if not await self.check_api():
            return self.results
        install = await self.check_install()
        link_version = await self.check_rbac()
        links = await self.check_links(link_version)
        services, slices = await self.read_mirrors()
        self.check_mirrors(links, services, slices)
        self.check_cluster_name(install, links, services)
        await self.check_workload(install)
        if self.options.dns:
            await self.check_dns(install, services, slices, links)
        return self.results

    async def check_api(self) -> bool:
        topic = "kubernetes-api"
        try:
            version = await self.get("/version")
        except (ApiFailure, aiohttp.ClientError, OSError, TimeoutError) as exc:
            return self.add(topic, False, "can query the Kubernetes API",
                            f"{_describe(exc)}; check the kubeconfig's current context and "
                            "`kubectl version`")
        return self.add(topic, True,
                        f"can query the Kubernetes API ({version.get('gitVersion', '?')})")

    async def check_install(self) -> _Install:
        topic = "dnsside-install"
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
            cm = await self.get_or_none(
                f"/api/v1/namespaces/{quote(found.namespace)}/configmaps/{CONFIG_NAME}")
            data = (cm or {}).get("data") or {}
            found.config = {k: v for k, v in data.items() if isinstance(v, str)}
            where = f"Deployment {standalone_ns}/{CONFIG_NAME}" if o.mode != "sidecar" else ""
            if o.mode != "standalone":
                where += (" or " if where else "") + (
                    f"a {CONFIG_NAME} container in {sidecar_ns}/{o.coredns_deployment}")
            self.add(topic, False, "dnsside is installed",
                     f"found no {where}: `dnsside install --cluster-name NAME | kubectl apply "
                     "-f -` (pass --namespace/--mode if it lives elsewhere)")
            return found
        self.add(topic, True, f"dnsside is installed ({found.mode} mode, namespace "
                 f"{found.namespace})")
        cm = await self.get_or_none(
            f"/api/v1/namespaces/{quote(found.namespace)}/configmaps/{CONFIG_NAME}")
        if cm is None:
            self.add(topic, False, f"ConfigMap {found.namespace}/{CONFIG_NAME} exists",
                     "the pods read their settings from it (envFrom): re-run `dnsside "
                     "install ... | kubectl apply -f -`")
        else:
            data = cm.get("data") or {}
            found.config = {k: v for k, v in data.items() if isinstance(v, str)}
            self.add(topic, True, f"ConfigMap {found.namespace}/{CONFIG_NAME} exists")
        return found

    async def check_rbac(self) -> str | None:
        """List each resource dnsside reads (limit=1) as ``--as``; returns the Link CRD's
        preferred version, None when the CRD is not served."""
        topic = "dnsside-rbac"
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
            except ApiFailure as exc:
                resource = name.split(".")[0]
                hint = (f"{exc.message or exc}; dnsside needs get, list and watch on {resource} "
                        f"(API group \"{api_group}\") cluster-wide: re-apply `dnsside install` "
                        f"(its ClusterRole grants exactly that), then `kubectl auth can-i list "
                        f"{name} --as {self.options.as_user or '<user>'}`")
                self.add(topic, False, f"{who} can list {name}", hint)
                continue
            self.add(topic, True, f"{who} can list {name}")
        return link_version

    async def check_links(self, version: str | None) -> list[LinkRecord] | None:
        """Links, or None when they cannot be read (then nothing is an orphan)."""
        topic = "linkerd-multicluster"
        if not version:
            self.add(topic, False, f"the Link CRD (links.{LINK_GROUP}) is installed",
                     "install Linkerd's multicluster extension: `linkerd multicluster install "
                     "| kubectl apply -f -`")
            return None
        self.add(topic, True, f"the Link CRD is installed (preferred version {version})")
        try:
            items = await self.list_all(f"/apis/{LINK_GROUP}/{version}/links")
        except ApiFailure as exc:
            self.add(topic, False, "Links are readable",
                     f"{exc}; the kubeconfig's user needs list on links.{LINK_GROUP}")
            return None
        links: list[LinkRecord] = []
        broken: list[str] = []
        for item in items:
            try:
                links.append(linkerd.parse_link(item))
            except ObjectError as exc:
                broken.append(str(exc))
        if broken:
            self.add(topic, False, f"every Link is readable ({len(broken)} not)",
                     "; ".join(broken[:3]))
        if not links:
            self.add(topic, False, "Links are present",
                     "no Link in any namespace: link this cluster to each other one, e.g. "
                     "`linkerd --context=<other> multicluster link-gen --cluster-name <other> "
                     "| kubectl apply -f -` (`multicluster link` before Linkerd 2.18)")
            return links
        names = ", ".join(sorted(f"{lk.target_cluster}" for lk in links))
        self.add(topic, True, f"Links are present: {names}")
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
        except ApiFailure as exc:
            self.add("linkerd-multicluster", False, "Services and EndpointSlices are readable",
                     f"{exc}; the kubeconfig's user needs list on both, cluster-wide")
        return services, slices

    def check_mirrors(self, links: list[LinkRecord] | None, services: Sequence[ServiceRecord],
                      slices: Sequence[SliceRecord]) -> None:
        topic = "linkerd-multicluster"
        health = mirror_health(services, {(s.namespace, s.service_name) for s in slices}, links)
        for cluster, h in sorted(health.items()):
            if h.orphaned:
                continue
            counts = f"{h.pod_mirrors} per-pod and {h.gateway_mirrors} gateway mirrors"
            if h.slices_mirrored:
                extra = (f"; {len(h.missing_gateway_slices)} gateway mirrors without endpoints "
                         "(their remote service has no ready endpoint)"
                         if h.missing_gateway_slices else "")
                self.add(topic, True, f"link {cluster}: mirrors have EndpointSlices "
                         f"({counts}){extra}")
                continue
            missing = h.missing_pod_slices + h.missing_gateway_slices
            self.add(topic, False,
                     f"link {cluster}: {len(missing)} mirrors have no EndpointSlice "
                     f"({_names(missing)})",
                     "Linkerd's service mirror writes Endpoints; Kubernetes' "
                     "EndpointSliceMirroring controller turns them into the EndpointSlices "
                     "dnsside reads: check that kube-controller-manager runs it (--controllers "
                     "must not exclude endpointslicemirroring) and its log")
        if links is None:
            return
        orphans = {c: h for c, h in health.items() if h.orphaned}
        if not orphans:
            self.add(topic, True, "no orphaned mirrors")
            return
        for cluster, h in sorted(orphans.items()):
            self.add(topic, False,
                     f"{len(h.services)} mirrors of cluster {cluster} match no Link "
                     f"({_names(h.services)})",
                     "a Link was deleted without unlinking; dnsside leaves these out of every "
                     f"answer. Remove them: `linkerd multicluster unlink --cluster-name {cluster}"
                     " | kubectl delete -f -`")

    def check_cluster_name(self, install: _Install, links: list[LinkRecord] | None,
                           services: Sequence[ServiceRecord]) -> None:
        topic = "dnsside-config"
        configured = install.config.get(CLUSTER_KEY)
        name = (configured or self.options.cluster_name or "local").lower()
        source = (f"ConfigMap {install.namespace}/{CONFIG_NAME}" if configured
                  else "--cluster-name" if self.options.cluster_name else "the default")
        fix = ("the name the other clusters linked this one as (`linkerd multicluster link "
               "--cluster-name NAME`): `dnsside install --cluster-name NAME ... | kubectl "
               "apply -f -`")
        self.add(topic, name != "local", f"cluster name is not \"local\" ({name}, from "
                 f"{source})", f"\"local\" is the unset default; set {CLUSTER_KEY} to {fix}")
        linked = ({lk.target_cluster for lk in links} if links else
                  {s.cluster for s in services if s.cluster})
        self.add(topic, name not in linked, "cluster name is not a linked cluster's name",
                 f"{name} is also the name of a linked cluster: its members and this "
                 f"cluster's would share names; set {CLUSTER_KEY} to {fix}")

    async def check_workload(self, install: _Install) -> None:
        topic = "dnsside-workload"
        if not install.mode or install.deployment is None:
            return
        dep = install.deployment
        ns, name = install.namespace, dep["metadata"]["name"]
        if install.mode == "standalone":
            want = int((dep.get("spec") or {}).get("replicas", 1))
            status = dep.get("status") or {}
            ready = int(status.get("readyReplicas") or 0)
            updated = int(status.get("updatedReplicas") or 0)
            self.add(topic, ready >= want and want > 0,
                     f"Deployment {ns}/{name} is ready ({ready}/{want})",
                     f"`kubectl -n {ns} describe deployment {name}` and `kubectl -n {ns} logs "
                     f"deployment/{name}`: /readyz fails until the first sync from the API "
                     f"server ({updated} replicas updated)")
            return
        selector = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        label = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        try:
            pods = await self.list_all(f"/api/v1/namespaces/{quote(ns)}/pods", label)
        except ApiFailure as exc:
            self.add(topic, False, f"the {name} pods are readable", str(exc))
            return
        mine = pods
        running = 0
        for pod in mine:
            for st in (pod.get("status") or {}).get("containerStatuses") or []:
                if st.get("name") == CONFIG_NAME and st.get("ready") and "running" in (
                        st.get("state") or {}):
                    running += 1
        self.add(topic, bool(mine) and running == len(mine),
                 f"the {CONFIG_NAME} sidecar runs in the {name} pods ({running}/{len(mine)})",
                 f"`kubectl -n {ns} describe pods -l {label}` and `kubectl -n {ns} logs -l "
                 f"{label} -c {CONFIG_NAME}`")

    async def check_dns(self, install: _Install, services: Sequence[ServiceRecord],
                        slices: Sequence[SliceRecord], links: list[LinkRecord] | None) -> None:
        topic = "dnsside-dns"
        assert self.options.dns is not None
        address = self.options.dns
        try:
            host, port = _hostport(address)
        except ValueError as exc:
            self.add(topic, False, f"--dns {address}", str(exc))
            return
        zones = [z if z.endswith(".") else z + "." for z in
                 (install.config.get(ZONE_KEY) or "svc-global.").split(",") if z]
        ns = install.namespace or DEFAULT_NAMESPACE
        hint = (f"is dnsside reachable at {address}? e.g. `kubectl -n {ns} port-forward "
                "svc/dnsside 5353` (TCP only: check queries over TCP)")
        for zone in zones:
            try:
                rcode, answers = await _query(host, port, zone, "SOA", self.options.timeout)
            except (OSError, TimeoutError, ValueError) as exc:
                self.add(topic, False, f"SOA of {zone} answers through {address}",
                         f"{_describe(exc)}; {hint}")
                continue
            self.add(topic, rcode == "NOERROR" and bool(answers),
                     f"SOA of {zone} answers through {address} ({rcode}"
                     f"{', serial ' + answers[0].split()[2] if answers else ''})",
                     "SERVFAIL means dnsside has not synced yet; REFUSED means the zone is "
                     f"not one it serves (its {ZONE_KEY})")
        pick = _pick_service(services, slices, links, install.config.get(CLUSTER_KEY) or
                             self.options.cluster_name or "local", zones[0])
        if pick is None:
            self.add(topic, False, "a global service answers",
                     "no global service with a ready member in the cluster to ask for: export "
                     "a service (mirror.linkerd.io/exported) and link the clusters")
            return
        name, qtype, expected = pick
        try:
            rcode, answers = await _query(host, port, name, qtype, self.options.timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            self.add(topic, False, f"{name} {qtype} answers", f"{_describe(exc)}; {hint}")
            return
        self.add(topic, rcode == "NOERROR" and bool(answers),
                 f"{name} {qtype} answers ({rcode}, {len(answers)} records; "
                 f"the API objects give {expected})",
                 "dnsside and the API disagree: `dnsside explain` (or /debug/explain on the "
                 "pod) says member by member why")


# --------------------------------------------------------------------------- helpers


def _names(services: Sequence[ServiceRecord]) -> str:
    shown = ", ".join(f"{s.namespace}/{s.name}" for s in services[:3])
    return shown + (f" and {len(services) - 3} more" if len(services) > 3 else "")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        return value.strip("[]"), 53
    if not port.isdigit():
        raise ValueError(f"--dns {value!r}: expected HOST:PORT, e.g. 127.0.0.1:5353")
    return host.strip("[]"), int(port)


def _pick_service(services: Sequence[ServiceRecord], slices: Sequence[SliceRecord],
                  links: list[LinkRecord] | None, cluster_name: str, zone: str
                  ) -> tuple[str, str, int] | None:
    """A global service with ready members, as dnsside's own index builds it from these
    objects: (name to ask, A or AAAA, how many addresses the objects give)."""
    from dnsside.dns import ZoneOptions
    from dnsside.events import Kind, Replace, Synced
    from dnsside.index import Index, IndexOptions, make_responder

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


async def _connect(kubeconfig: str | None) -> tuple[Any, Any]:
    from dnsside.sources.kubeapi import KubeApi

    api = await KubeApi.connect(kubeconfig)
    return api.client, api.refresher


async def run_checks(options: CheckOptions,
                     connect: Callable[[str | None], Any] = _connect) -> list[Result]:
    """Every check's result; never raises for what it checks."""
    from dnsside.sources.kubeapi import KubeConfigError

    try:
        api, refresher = await connect(options.kubeconfig)
    except KubeConfigError as exc:
        return [Result("kubernetes-api", False, "can initialize the client",
                       f"{exc}: pass --kubeconfig, set $KUBECONFIG or create ~/.kube/config")]
    checker = Checker(options, api)
    checker.add("kubernetes-api", True, "can initialize the client")
    try:
        return await checker.run()
    finally:
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await refresher
        await api.close()


def render(results: Sequence[Result]) -> str:
    lines: list[str] = []
    topic = None
    for r in results:
        if r.topic != topic:
            if topic is not None:
                lines.append("")
            lines += [r.topic, "-" * len(r.topic)]
            topic = r.topic
        lines.append(f"{OK if r.ok else FAIL} {r.text}")
        if not r.ok and r.hint:
            lines.append(f"    hint: {r.hint}")
    failed = sum(1 for r in results if not r.ok)
    lines += ["", f"Status check results are {FAIL if failed else OK}"
              + (f" ({failed} failed)" if failed else "")]
    return "\n".join(lines) + "\n"
