"""`dnsside check` under ``--flat-network``: can dnsside read each Link's credentials, and
do they open the linked cluster's API?

The checks run over a :class:`FlatNetworkSetup` that :mod:`dnsside.ops.check` hands them
when dnsside's ConfigMap turns the flag on, or when ``dnsside check --flat-network``
asks (before installing it); they need nothing else from it.

First the grant: dnsside's identity (``--as``) gets Secrets in each Link's namespace,
as the Role of ``dnsside install --flat-network`` allows; a GET of a Secret that does
not exist answers 404, not 403, to an identity that may get it, so existence is left to
the per-Link checks. Then per Link, as the kubeconfig's user (like every check that is
not about RBAC): the Secret exists with a ``kubeconfig`` key, the kubeconfig holds data
only and loads (read as dnsside reads it, through :meth:`KubeApi.from_kubeconfig_text`:
nothing in it is run or opened), and the linked cluster's API lists services and
endpointslices with it (``limit=1``: permission and reachability, not contents).
A remote that forbids endpointslices but lists v1 Endpoints runs Linkerd older than
2.14, whose remote-access ClusterRole has no endpointslices: dnsside falls back to
Endpoints there, so that is a warning, not a failure. Every remote client is closed
when its Link's checks are done.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from dnsside.config import flag
from dnsside.core.diagnosis import CREDENTIALS_FIX
from dnsside.kubeapi.client import (
    MAX_SECRET_BYTES,
    SECRET_KUBECONFIG_KEY,
    TRANSIENT,
    ApiError,
    CapExceeded,
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
from dnsside.ops.checker import Check, Finding, Findings, ForEach, Severity, Step, check, once
from dnsside.ops.manifests import LINKS_NAMESPACE

KUBECONFIG_KEY = SECRET_KUBECONFIG_KEY  # the key of Linkerd's credentials Secret
INSECURE_REMOTE_TLS = flag("--insecure-remote-tls")
SERVICES = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
ENDPOINTS = "/api/v1/endpoints"  # what a pre-2.14 remote-access ClusterRole grants instead
ONE = {"limit": "1"}
CHECK_PAGE_BYTES = 2 * flag("--flat-network-max-object-bytes").default  # one page of one
RBAC_PROBE_SECRET = "dnsside-rbac-check"  # a name no Link uses: GET it, 404 = may get
_REMOTE = "link {cluster}: the API at {server} lists {resource}{selector}"


@dataclass
class FlatNetworkSetup:
    """What the flat-network checks read with: the local API, who dnsside is, the Links."""

    api: KubeApi  # the local API server, as the kubeconfig's user
    as_user: str | None  # dnsside's identity for the RBAC check (Impersonate-User)
    timeout: float
    insecure_tls: bool  # --insecure-remote-tls: a kubeconfig may weaken TLS
    links: Sequence[LinkRecord]  # none when they could not be read (the Link checks said so)
    namespace: str = LINKS_NAMESPACE  # --links-namespace: where the Links and Secrets are

    def __post_init__(self) -> None:
        self.links = sorted(self.links, key=lambda lk: (lk.target_cluster, lk.namespace,
                                                        lk.name))


@dataclass(frozen=True)
class SecretRead:
    text: str | None = None  # the kubeconfig, when the Secret has one
    missing: bool = False  # no such Secret (404)
    error: str = ""  # why there is no kubeconfig


@dataclass(frozen=True)
class Listing:
    """What one page of each resource of the linked cluster's API said."""

    listed: str = ""  # what it lists, when it does
    fallback: Forbidden | None = None  # endpointslices forbidden, v1 Endpoints listed
    resource: str = ""  # what it does not list, when it fails
    error: BaseException | None = None


@dataclass
class LinkCredentials:
    """One Link and what its credentials open, each read once."""

    net: FlatNetworkSetup
    link: LinkRecord
    client: KubeApi | None = field(init=False, default=None)  # to close, once loaded

    @property
    def secret_name(self) -> str:
        return f"{self.link.namespace}/{self.link.credentials_secret}"

    @property
    def names(self) -> dict[str, str]:
        return {"cluster": self.link.target_cluster, "namespace": self.link.namespace,
                "name": self.link.name}

    @once
    async def secret(self) -> SecretRead:
        if not self.link.credentials_secret:
            return SecretRead(error="spec.clusterCredentialsSecret is empty")
        try:
            obj = await self.net.api.get_link_secret(
                f"/api/v1/namespaces/{quote(self.link.namespace)}/secrets/"
                f"{quote(self.link.credentials_secret)}")
            return SecretRead(kubeconfig_in_secret(obj))
        except NotFound:
            return SecretRead(missing=True, error=f"Secret {self.secret_name} not found")
        except CapExceeded:
            return SecretRead(error=f"Secret {self.secret_name} is over {MAX_SECRET_BYTES} "
                              "bytes (a Link's kubeconfig is 3-5 KB): not read further")
        except TRANSIENT as exc:
            return SecretRead(error=describe_error(exc))

    @once
    async def remote(self) -> KubeApi | KubeConfigError | None:
        """A client of the linked cluster's API, as dnsside loads it: data only, nothing
        run or opened; or why not; None without a kubeconfig."""
        text = (await self.secret()).text
        if text is None:
            return None
        try:
            self.client = await KubeApi.from_kubeconfig_text(
                text, f"Secret {self.secret_name} key {KUBECONFIG_KEY}",
                request_timeout=self.net.timeout, insecure_tls=self.net.insecure_tls)
        except KubeConfigError as exc:
            return exc
        return self.client

    @once
    async def listing(self) -> Listing | None:
        """One page of one object of each resource, as dnsside's watch would read them."""
        remote = await self.remote()
        if not isinstance(remote, KubeApi):
            return None
        try:
            await remote_page(remote, SERVICES)
        except TRANSIENT as exc:
            return Listing(resource="services", error=exc)
        try:
            await remote_page(remote, SLICES)
        except Forbidden as forbidden:
            try:
                await remote_page(remote, ENDPOINTS)
            except TRANSIENT as exc:
                return Listing(resource="endpointslices or endpoints", error=exc)
            return Listing("services and v1 endpoints", fallback=forbidden)
        except TRANSIENT as exc:
            return Listing(resource="endpointslices", error=exc)
        return Listing("services and endpointslices")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


async def remote_page(remote: KubeApi, path: str) -> dict[str, Any]:
    """One object of a linked cluster's list, its body capped as serve caps one list page
    (the linked cluster is not trusted by check either: a body without end fails, as
    not what an API server sends)."""
    return decode(await remote.get_raw(path, ONE, max_bytes=CHECK_PAGE_BYTES), path)


@check("flat-rbac", "{who} can get secrets in {namespace}",
       "{error}; dnsside reads each Link's credentials Secret there: re-apply `dnsside install "
       "--flat-network ...` (its Role grants get on secrets in that namespace only; "
       "--links-namespace {namespace} when it is not linkerd-multicluster), then `kubectl auth "
       "can-i get secrets -n {namespace} --as {user}`")
async def flat_rbac(net: FlatNetworkSetup) -> Findings:
    """Only get is granted (and needed): the Secrets the Links name, or a name no Link
    uses when none is named; 404 is allowed to get it."""
    who = net.as_user or "the kubeconfig's user"
    for ns in sorted({lk.namespace for lk in net.links}) or [net.namespace]:
        secrets = f"/api/v1/namespaces/{quote(ns)}/secrets"
        names = sorted({lk.credentials_secret for lk in net.links
                        if lk.namespace == ns and lk.credentials_secret})
        try:
            for name in names or [RBAC_PROBE_SECRET]:
                with contextlib.suppress(NotFound):
                    await net.api.get_json(f"{secrets}/{quote(name)}", user=net.as_user)
        except TRANSIENT as exc:
            yield Finding(False, who=who, namespace=ns, error=describe_error(exc),
                          user=net.as_user or "<user>")
            continue
        yield Finding(True, who=who, namespace=ns)


async def each_link(net: FlatNetworkSetup) -> AsyncGenerator[LinkCredentials, None]:
    for link in net.links:
        creds = LinkCredentials(net, link)
        try:
            yield creds
        finally:
            await creds.close()


@check("flat-selector", "link {cluster}: remoteDiscoverySelector is readable",
       "{error}: it selects nothing, so dnsside serves none of {cluster}'s pods directly; fix "
       "the Link (`kubectl -n {namespace} edit links.multicluster.linkerd.io {name}`) or link "
       "again")
async def flat_selector(creds: LinkCredentials) -> Findings:
    if creds.link.selector_error:
        yield Finding(False, error=creds.link.selector_error, **creds.names)


@check("flat-secret", "link {cluster}: Secret {secret} has a " + KUBECONFIG_KEY,
       "{error}; " + CREDENTIALS_FIX)
async def flat_secret(creds: LinkCredentials) -> Findings:
    read = await creds.secret()
    cluster = creds.link.target_cluster
    text = (f"link {cluster}: names no credentials Secret" if not creds.link.credentials_secret
            else f"link {cluster}: Secret {creds.secret_name} exists" if read.missing else None)
    yield Finding(read.text is not None, text, error=read.error,
                  secret=creds.secret_name if creds.link.credentials_secret else "",
                  **creds.names)


@check("flat-kubeconfig-refused", "link {cluster}: its " + KUBECONFIG_KEY + " holds data only",
       "{error}; a Link's kubeconfig may hold a server URL (https), certificate-authority-data, "
       "tls-server-name, a token, client-certificate-data and client-key-data: nothing that "
       "runs a command or names a file (" + INSECURE_REMOTE_TLS.name + " allows "
       "insecure-skip-tls-verify, http:// and proxy-url, never exec); " + CREDENTIALS_FIX)
async def flat_kubeconfig_refused(creds: LinkCredentials) -> Findings:
    remote = await creds.remote()
    if isinstance(remote, RefusedCredentials):
        yield Finding(False, error=remote, **creds.names)


@check("flat-kubeconfig", "link {cluster}: its " + KUBECONFIG_KEY + " loads{server}",
       "{error}; " + CREDENTIALS_FIX)
async def flat_kubeconfig(creds: LinkCredentials) -> Findings:
    remote = await creds.remote()
    if isinstance(remote, KubeApi):
        yield Finding(True, server=f" (API server {remote.host})", **creds.names)
    elif remote is not None and not isinstance(remote, RefusedCredentials):
        yield Finding(False, server="", error=remote, **creds.names)


@check("flat-tls-weakened", "link {cluster}: TLS to {server} is verified",
       "{weakened}: its kubeconfig weakens TLS, as " + INSECURE_REMOTE_TLS.name + " allows; "
       "whoever is on the path to it can read the token and answer in its place. Put the API "
       "server's CA in certificate-authority-data and an https server in the Secret (`linkerd "
       "multicluster link --api-server-address https://...`)", Severity.WARNING)
async def flat_tls_weakened(creds: LinkCredentials) -> Findings:
    remote = await creds.remote()
    if isinstance(remote, KubeApi) and remote.weakened:
        yield Finding(False, server=remote.host, weakened="; ".join(remote.weakened),
                      **creds.names)


def _remote_facts(creds: LinkCredentials) -> dict[str, str]:
    """The facts of a line about the linked cluster's API (it has a client: it was listed)."""
    assert creds.client is not None
    return {"cluster": creds.link.target_cluster, "server": creds.client.host,
            "secret": creds.secret_name}


@check("flat-endpoints", "link {cluster}: the API at {server} lists endpointslices",
       "{error}: the linked cluster's Linkerd is older than 2.14 (its remote-access ClusterRole "
       "has no endpointslices); dnsside reads its v1 Endpoints instead, which it may list. "
       "Upgrading Linkerd there ends the fallback", Severity.WARNING)
async def flat_endpoints(creds: LinkCredentials) -> Findings:
    listing = await creds.listing()
    if listing is not None and listing.fallback is not None:
        yield Finding(False, error=describe_error(listing.fallback), **_remote_facts(creds))


def failure(exc: BaseException) -> str:
    """How a linked cluster's API failed, as the check that names the fix: rejected (401),
    forbidden (403), reach (no answer), error (any other status)."""
    return ("rejected" if isinstance(exc, Unauthorized) else
            "forbidden" if isinstance(exc, Forbidden) else
            "error" if isinstance(exc, ApiError) else "reach")


def _remote_fails(kind: str) -> Callable[[LinkCredentials], Findings]:
    """The function of the check that says how to fix a ``kind`` of :func:`failure`."""

    async def run(creds: LinkCredentials) -> Findings:
        listing = await creds.listing()
        if listing is not None and listing.error is not None and failure(listing.error) == kind:
            yield Finding(False, resource=listing.resource, error=describe_error(listing.error),
                          selector="", **_remote_facts(creds))

    return run


flat_remote_rejected: Check[LinkCredentials] = Check(
    "flat-remote-rejected", _REMOTE,
    "{error}: the linked cluster rejects the token in Secret {secret} (revoked, or its "
    "ServiceAccount re-created); " + CREDENTIALS_FIX, Severity.ERROR, _remote_fails("rejected"))
flat_remote_forbidden: Check[LinkCredentials] = Check(
    "flat-remote-forbidden", _REMOTE,
    "{error}; `linkerd --context={cluster} multicluster install | kubectl --context={cluster} "
    "apply -f -` grants it to the remote-access ServiceAccount whose token the Secret holds",
    Severity.ERROR, _remote_fails("forbidden"))
flat_remote_reach: Check[LinkCredentials] = Check(
    "flat-remote-reach", _REMOTE,
    "{error}; `dnsside check` runs here and dnsside in its pod: both need a route to {server}, "
    "the address `linkerd multicluster link --api-server-address` wrote into the Secret",
    Severity.ERROR, _remote_fails("reach"))
flat_remote_error: Check[LinkCredentials] = Check(
    "flat-remote-error", _REMOTE,
    "{error}; the linked cluster's API server fails: `kubectl --context={cluster} get --raw "
    "/readyz?verbose`", Severity.ERROR, _remote_fails("error"))


@check("flat-remote", _REMOTE)
async def flat_remote(creds: LinkCredentials) -> Findings:
    """The Link's line when it lists; its failures are the four checks above."""
    listing = await creds.listing()
    if listing is not None and listing.error is None:
        yield Finding(True, resource=listing.listed,
                      selector=f" (remoteDiscoverySelector {creds.link.remote_selector})",
                      **_remote_facts(creds))


PER_LINK: tuple[Step[LinkCredentials], ...] = (
    flat_selector, flat_secret, flat_kubeconfig_refused, flat_kubeconfig, flat_tls_weakened,
    flat_endpoints, flat_remote_rejected, flat_remote_forbidden, flat_remote_reach,
    flat_remote_error, flat_remote)
CHECKS: tuple[Step[FlatNetworkSetup], ...] = (flat_rbac, ForEach(each_link, PER_LINK))

__all__ = ["CHECKS", "INSECURE_REMOTE_TLS", "KUBECONFIG_KEY", "FlatNetworkSetup"]
