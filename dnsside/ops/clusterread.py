"""What `dnsside check` reads of the cluster: its options, and each fact read once.

The checks (:mod:`dnsside.ops.check`) ask a :class:`Cluster` for what they look at; the
first check that asks reads it from the API server (GET only, like dnsside itself) and
every later one gets the same answer, so a check run costs one read per object kind
whatever the number of checks. Reading is kept apart from judging: nothing here decides
whether a check passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from dnsside.config import flag
from dnsside.core.diagnosis import ClusterMirrors, mirror_health
from dnsside.core.links import choose
from dnsside.kubeapi.client import ApiError, KubeApi, NotFound
from dnsside.model import linkerd
from dnsside.model.linkerd import LINK_GROUP, LinkRecord, ObjectError, ServiceRecord, SliceRecord
from dnsside.ops.checker import once

DEFAULT_NAMESPACE = "dnsside"
SIDECAR_NAMESPACE = "kube-system"
CONFIG_NAME = "dnsside"
CLUSTER_KEY = flag("--cluster-name").env
LINKS_NAMESPACE = flag("--links-namespace")
PAGE = 500  # items per list request
# What a GET can fail with that a check reports: a status, a body that is not an object.
API_ERRORS = (ApiError, ValueError)



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
    links_namespace: str | None = None  # None: the ConfigMap's --links-namespace, else Linkerd's


@dataclass
class Install:
    mode: str = ""  # "" = not found
    namespace: str = ""
    deployment: Mapping[str, Any] | None = None
    config: Mapping[str, str] = field(default_factory=dict)  # the ConfigMap's settings
    has_config: bool = False  # there is a ConfigMap


@dataclass
class LinkList:
    version: str | None  # the Link CRD's preferred version; None: not served
    # The Links dnsside counts (core.links.choose: in the links namespace, one per cluster);
    # None: not read (then nothing is an orphan).
    records: list[LinkRecord] | None = None
    error: Exception | None = None
    broken: list[str] = field(default_factory=list)  # why each unreadable Link is
    # Each Link read that does not count ("namespace/name"), and why.
    refused: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Mirrors:
    services: list[ServiceRecord] = field(default_factory=list)
    slices: list[SliceRecord] = field(default_factory=list)
    error: Exception | None = None


@dataclass
class Pods:
    label: str  # the workload's selector
    items: list[dict[str, Any]] | None = None
    error: Exception | None = None


class Cluster:
    """What the checks read of the cluster: the client the first check opens, then each
    fact read once, by the first check that asks for it."""

    def __init__(self, options: CheckOptions) -> None:
        self.options = options
        self.client: KubeApi | None = None

    @property
    def api(self) -> KubeApi:
        assert self.client is not None, "the client check is fatal"
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def get(self, path: str, params: Mapping[str, str] | None = None,
                  user: str | None = None) -> dict[str, Any]:
        return await self.api.get_json(path, params, user=user)

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.get(path)
        except NotFound:
            return None

    async def list_all(self, path: str, selector: str = "") -> list[dict[str, Any]]:
        return await self.api.list_all(path, selector, page=PAGE)

    @once
    async def install(self) -> Install:
        """Where dnsside runs, and its settings (read even when it is not found, for the
        checks that follow)."""
        o = self.options
        standalone_ns = o.namespace or DEFAULT_NAMESPACE
        sidecar_ns = o.namespace or SIDECAR_NAMESPACE
        found = Install(namespace=sidecar_ns if o.mode == "sidecar" else standalone_ns)
        if o.mode in ("auto", "standalone"):
            dep = await self.get_or_none(
                f"/apis/apps/v1/namespaces/{quote(standalone_ns)}/deployments/{CONFIG_NAME}")
            if dep is not None:
                found = Install("standalone", standalone_ns, dep)
        if not found.mode and o.mode in ("auto", "sidecar"):
            dep = await self.get_or_none(f"/apis/apps/v1/namespaces/{quote(sidecar_ns)}/"
                                         f"deployments/{quote(o.coredns_deployment)}")
            containers = (((dep or {}).get("spec") or {}).get("template") or {}).get(
                "spec", {}).get("containers") or []
            if any(c.get("name") == CONFIG_NAME for c in containers):
                found = Install("sidecar", sidecar_ns, dep)
        cm = await self.get_or_none(
            f"/api/v1/namespaces/{quote(found.namespace)}/configmaps/{CONFIG_NAME}")
        if cm is not None:
            found.has_config = True
            found.config = {k: v for k, v in (cm.get("data") or {}).items()
                            if isinstance(v, str)}
        return found

    @once
    async def link_version(self) -> str | None:
        """The Link CRD's preferred version, None when the CRD is not served."""
        group = await self.get_or_none(f"/apis/{LINK_GROUP}")
        if group is None:
            return None
        return str(((group.get("preferredVersion") or {}).get("version")) or "")

    @once
    async def links_namespace(self) -> str:
        """Where dnsside reads Links: --links-namespace, its ConfigMap's, or Linkerd's."""
        config = (await self.install()).config
        return (self.options.links_namespace or config.get(LINKS_NAMESPACE.env)
                or LINKS_NAMESPACE.default)

    @once
    async def links(self) -> LinkList:
        """Every Link, cluster-wide (the kubeconfig's user may: what dnsside ignores is worth
        telling), and those dnsside counts; the links namespace alone where only it may be
        listed."""
        version, namespace = await self.link_version(), await self.links_namespace()
        if not version:
            return LinkList(version)
        items: list[dict[str, Any]] = []
        for scope in ("", f"/namespaces/{quote(namespace)}"):  # the namespace if forbidden
            try:
                items = await self.list_all(f"/apis/{LINK_GROUP}/{version}{scope}/links")
                break
            except API_ERRORS as exc:
                if scope or not (isinstance(exc, ApiError) and exc.status == 403):
                    return LinkList(version, error=exc)
        records: list[LinkRecord] = []
        broken: list[str] = []
        for item in items:
            try:
                records.append(linkerd.parse_link(item))
            except ObjectError as exc:
                broken.append(str(exc))
        chosen, refused = choose(records, namespace)
        return LinkList(version, list(chosen.values()), broken=broken,
                        refused=[(f"{ns}/{name}", text) for (ns, name), (_, text)
                                 in sorted(refused.items())])

    @once
    async def mirrors(self) -> Mirrors:
        """The Services and EndpointSlices, as many as could be read."""
        read = Mirrors()
        try:
            for item in await self.list_all("/api/v1/services"):
                with contextlib.suppress(ObjectError):
                    read.services.append(linkerd.parse_service(item))
            for item in await self.list_all("/apis/discovery.k8s.io/v1/endpointslices"):
                with contextlib.suppress(ObjectError):
                    read.slices.append(linkerd.parse_slice(item))
        except API_ERRORS as exc:
            read.error = exc
        return read

    @once
    async def health(self) -> dict[str, ClusterMirrors]:
        """The mirrors of each linked cluster (:func:`diagnosis.mirror_health`)."""
        mirrors, links = await self.mirrors(), await self.links()
        return mirror_health(mirrors.services,
                             {(s.namespace, s.service_name) for s in mirrors.slices},
                             links.records)

    @once
    async def pods(self) -> Pods:
        """The pods of the workload dnsside runs in (as a sidecar)."""
        install = await self.install()
        assert install.deployment is not None
        selector = ((install.deployment.get("spec") or {}).get("selector") or {}).get(
            "matchLabels") or {}
        pods = Pods(",".join(f"{k}={v}" for k, v in sorted(selector.items())))
        try:
            pods.items = await self.list_all(
                f"/api/v1/namespaces/{quote(install.namespace)}/pods", pods.label)
        except API_ERRORS as exc:
            pods.error = exc
        return pods

    async def cluster_name(self) -> tuple[str, str]:
        """The cluster name dnsside uses, and where it comes from."""
        install = await self.install()
        configured = install.config.get(CLUSTER_KEY)
        name = (configured or self.options.cluster_name or "local").lower()
        return name, (f"ConfigMap {install.namespace}/{CONFIG_NAME}" if configured
                      else "--cluster-name" if self.options.cluster_name else "the default")
