"""`dnsside check` under ``--flat-network``: can dnsside read each Link's credentials, and
do they open the linked cluster's API?

The checks are declared in :data:`dnsside.ops.check.CHECKS` (category
``dnsside-flat-network``) like every other; this module runs them and reports each
through the checker's ``report``, so that check.py stays one screenful per topic and
this module needs nothing from it. They run when dnsside's ConfigMap turns the flag
on, or when ``dnsside check --flat-network`` asks (before installing it).

First the grant: dnsside's identity (``--as``) lists and gets Secrets in each Link's
namespace, as the Role of ``dnsside install --flat-network`` allows; a GET of a Secret
that does not exist answers 404, not 403, to an identity that may get it, so
existence is left to the per-Link checks. Then per Link, as the kubeconfig's user
(like every check that is not about RBAC): the Secret exists with a ``kubeconfig``
key, the kubeconfig holds data only and loads (read as dnsside reads it, through
:meth:`KubeApi.from_kubeconfig_text`: nothing in it is run or opened), and the
linked cluster's API lists services and endpointslices with it (``limit=1``:
permission and reachability, not contents).
A remote that forbids endpointslices but lists v1 Endpoints runs Linkerd older than
2.14, whose remote-access ClusterRole has no endpointslices: dnsside falls back to
Endpoints there, so that is a warning, not a failure. Every remote client is closed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from dnsside.config import flag
from dnsside.kubeapi.client import (
    SECRET_KUBECONFIG_KEY,
    TRANSIENT,
    ApiError,
    Forbidden,
    KubeApi,
    KubeConfigError,
    NotFound,
    RefusedCredentials,
    Unauthorized,
    decode,
    describe_error,
    kubeconfig_in_secret,
)
from dnsside.model.linkerd import LinkRecord
from dnsside.ops.manifests import LINKS_NAMESPACE

KUBECONFIG_KEY = SECRET_KUBECONFIG_KEY  # the key of Linkerd's credentials Secret
SERVICES = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
ENDPOINTS = "/api/v1/endpoints"  # what a pre-2.14 remote-access ClusterRole grants instead
ONE = {"limit": "1"}
CHECK_PAGE_BYTES = 2 * flag("--flat-network-max-object-bytes").default  # one page of one
RBAC_PROBE_SECRET = "dnsside-rbac-check"  # a name no Link uses: GET it, 404 = may get


class Report(Protocol):
    """:meth:`dnsside.ops.check.Checker.report`."""

    def __call__(self, check_id: str, ok: bool, text: str | None = None,
                 **facts: Any) -> None: ...


async def remote_page(remote: KubeApi, path: str) -> dict[str, Any]:
    """One object of a linked cluster's list, its body capped as serve caps one list page
    (the linked cluster is not trusted by check either: a body without end fails, as
    not what an API server sends)."""
    return decode(await remote.get_raw(path, ONE, max_bytes=CHECK_PAGE_BYTES), path)


@dataclass
class FlatNetworkChecks:
    api: KubeApi  # the local API server, as the kubeconfig's user
    report: Report
    as_user: str | None  # dnsside's identity for the RBAC check (Impersonate-User)
    timeout: float
    insecure_tls: bool = False  # --insecure-remote-tls: a kubeconfig may weaken TLS

    async def run(self, links: Sequence[LinkRecord] | None) -> None:
        """The grant in every Links' namespace, then each Link (none when the Links
        could not be read: the Link checks already said so)."""
        links = sorted(links or (), key=lambda lk: (lk.target_cluster, lk.namespace, lk.name))
        await self.check_rbac(links)
        for link in links:
            await self.check_link(link)

    async def check_rbac(self, links: Sequence[LinkRecord]) -> None:
        who = self.as_user or "the kubeconfig's user"
        for ns in sorted({lk.namespace for lk in links}) or [LINKS_NAMESPACE]:
            secrets = f"/api/v1/namespaces/{quote(ns)}/secrets"
            names = sorted({lk.credentials_secret for lk in links
                            if lk.namespace == ns and lk.credentials_secret})
            try:
                # Only get is granted (and needed); a name no Link uses when none is named.
                for name in names or [RBAC_PROBE_SECRET]:
                    # 404 is allowed to get it; whether it exists is the Link's check.
                    with contextlib.suppress(NotFound):
                        await self.api.get_json(f"{secrets}/{quote(name)}", user=self.as_user)
            except TRANSIENT as exc:
                self.report("flat-rbac", False, who=who, namespace=ns, error=describe_error(exc),
                            user=self.as_user or "<user>")
                continue
            self.report("flat-rbac", True, who=who, namespace=ns)

    async def check_link(self, link: LinkRecord) -> None:
        cluster = link.target_cluster
        facts = {"cluster": cluster, "namespace": link.namespace, "name": link.name}
        if link.selector_error:
            self.report("flat-selector", False, error=link.selector_error, **facts)
        secret = f"{link.namespace}/{link.credentials_secret}"
        if not link.credentials_secret:
            self.report("flat-secret", False, f"link {cluster}: names no credentials Secret",
                        error="spec.clusterCredentialsSecret is empty", secret="", **facts)
            return
        try:
            obj = await self.api.get_json(f"/api/v1/namespaces/{quote(link.namespace)}/"
                                          f"secrets/{quote(link.credentials_secret)}")
            text = kubeconfig_in_secret(obj)
        except NotFound:
            self.report("flat-secret", False, f"link {cluster}: Secret {secret} exists",
                        error=f"Secret {secret} not found", secret=secret, **facts)
            return
        except TRANSIENT as exc:
            self.report("flat-secret", False, secret=secret, error=describe_error(exc), **facts)
            return
        self.report("flat-secret", True, secret=secret, **facts)
        try:  # as dnsside reads it: data only, nothing run or opened (linkcreds)
            remote = await KubeApi.from_kubeconfig_text(
                text, f"Secret {secret} key {KUBECONFIG_KEY}", request_timeout=self.timeout,
                insecure_tls=self.insecure_tls)
        except RefusedCredentials as exc:
            self.report("flat-kubeconfig-refused", False, error=exc, **facts)
            return
        except KubeConfigError as exc:
            self.report("flat-kubeconfig", False, server="", error=exc, **facts)
            return
        try:
            self.report("flat-kubeconfig", True, server=f" (API server {remote.host})",
                        **facts)
            if remote.weakened:
                self.report("flat-tls-weakened", False, server=remote.host,
                            weakened="; ".join(remote.weakened), **facts)
            await self.check_remote(link, remote, secret)
        finally:
            await remote.close()

    async def check_remote(self, link: LinkRecord, remote: KubeApi, secret: str) -> None:
        """One page of one object of each resource, as dnsside's watch would read them."""
        facts = {"cluster": link.target_cluster, "server": remote.host, "secret": secret}
        try:
            await remote_page(remote, SERVICES)
        except TRANSIENT as exc:
            self.remote_failed(exc, "services", facts)
            return
        try:
            await remote_page(remote, SLICES)
            listed = "services and endpointslices"
        except Forbidden as forbidden:
            try:
                await remote_page(remote, ENDPOINTS)
            except TRANSIENT as exc:
                self.remote_failed(exc, "endpointslices or endpoints", facts)
                return
            self.report("flat-endpoints", False, error=describe_error(forbidden), **facts)
            listed = "services and v1 endpoints"
        except TRANSIENT as exc:
            self.remote_failed(exc, "endpointslices", facts)
            return
        self.report("flat-remote", True, resource=listed,
                    selector=f" (remoteDiscoverySelector {link.remote_selector})", **facts)

    def remote_failed(self, exc: BaseException, resource: str, facts: Mapping[str, str]
                      ) -> None:
        check = ("flat-remote-rejected" if isinstance(exc, Unauthorized) else
                 "flat-remote-forbidden" if isinstance(exc, Forbidden) else
                 "flat-remote-reach" if not isinstance(exc, ApiError) else "flat-remote-error")
        self.report(check, False, resource=resource, error=describe_error(exc), selector="",
                    **facts)


__all__ = ["KUBECONFIG_KEY", "FlatNetworkChecks", "Report"]
