"""One linked cluster's watch (``--flat-network``): its Secret, its client, its reflector.

:class:`LinkedCluster` reads the Secret its Link names (``spec.clusterCredentialsSecret``,
key ``kubeconfig``, in the Link's namespace) from the local API, connects to the linked
cluster with it, and runs a :class:`~dnsside.sources.reflector.Reflector` over that
cluster's Services and EndpointSlices, or its v1 Endpoints where the credentials may not
read slices (Linkerd's remote-access role before 2.14), through the cluster's
:class:`~dnsside.sources.limits.Gate` (its caps and event budget). Its events reach the
index wrapped as that cluster's (``Remote``), and how the watch fares as
``RemoteStatus``. It reports to the source through its own methods (its budget is
charged, its state asked), never by writing the source's state.

A fault of the credentials must be told from a fault of the network. A missing or
unreadable Secret, a kubeconfig that does not load or is refused, a server whose
certificate the Secret's CA does not vouch for, and a 401 or 403 from the linked cluster
are the operator's to fix: the state is ``CREDENTIALS``, the Secret is read again before
every retry (and every minute while synced: a rotated one is picked up), and nothing
learnt is dropped. The kubeconfig is read as data only
(:mod:`dnsside.kubeapi.linkcreds`): one that holds an exec plugin, a file name or
weakened TLS is refused before anything is run, read or connected to, and the refusal
names the Secret, the Link and the field. Anything else (a refused connection, a
timeout, a 5xx) is the API being away: ``LOST`` once it had synced, with its last-known
members standing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import quote

from dnsside.kubeapi.caps import CapExceeded, Limits
from dnsside.kubeapi.client import (
    SECRET_KUBECONFIG_KEY,
    TRANSIENT,
    ApiError,
    Forbidden,
    KubeApi,
    KubeConfigError,
    NotFound,
    Unauthorized,
    describe_error,
    kubeconfig_in_secret,
)
from dnsside.kubeapi.linkcreds import MAX_SECRET_BYTES
from dnsside.model.events import (
    Event,
    Kind,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
    SourceError,
)
from dnsside.model.linkerd import (
    LinkRecord,
    Record,
    parse_endpoints,
    parse_remote_service,
    parse_slice,
)
from dnsside.model.printable import printable
from dnsside.model.selectors import LabelSelector
from dnsside.sources.budget import Change, EventBudget
from dnsside.sources.gcoff import paused
from dnsside.sources.limits import Gate
from dnsside.sources.pacing import Pacing
from dnsside.sources.reflector import Reflector, Resource
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.remote")

ENDPOINTSLICES = Resource(Kind.SLICE, "endpointslices", "/apis/discovery.k8s.io/v1",
                          parse_slice)
ENDPOINTS = Resource(Kind.SLICE, "endpoints", "/api/v1", parse_endpoints)


@dataclass(frozen=True, slots=True)
class LinkedOptions:
    """What the flags say of every linked cluster (built once, serving.app.linked_options)."""

    limits: Limits = field(default_factory=Limits)  # its caps (--flat-network-max-*, ...)
    index_share: float = 0.05  # --flat-network-index-share (dnsside.sources.budget)
    insecure_tls: bool = False  # --insecure-remote-tls: its Secret may weaken TLS (linkcreds)
    secret_recheck: float = 60.0  # seconds between two reads of a synced cluster's Secret


@dataclass(frozen=True, slots=True)
class Target:
    """What a linked cluster's watch depends on: any change restarts it."""

    cluster: str
    namespace: str  # the Link's, and so the Secret's
    link: str
    secret: str  # spec.clusterCredentialsSecret
    selector: LabelSelector
    selector_error: str = ""  # why the Link's remoteDiscoverySelector selects nothing

    @property
    def secret_ref(self) -> str:
        return f"{self.namespace}/{self.secret}" if self.secret else f"(none on Link {self.link})"

    @staticmethod
    def of(links: Iterable[LinkRecord]) -> dict[str, Target]:
        """One target per linked cluster (the index hands one Link per cluster already:
        core.links.choose; of two, the first by namespace and name)."""
        targets: dict[str, Target] = {}
        for link in sorted(links, key=lambda lk: (lk.namespace, lk.name)):
            targets.setdefault(link.target_cluster, Target(
                link.target_cluster, link.namespace, link.name, link.credentials_secret,
                link.remote_selector, link.selector_error))
        return targets


class CredentialsError(Exception):
    """The Secret, its kubeconfig or the linked cluster's verdict on it: the operator's to
    fix, not the network's. The message says which and why."""


class SecretChanged(Exception):
    """The Link's Secret holds other credentials now: connect again with them."""


def _rejected(exc: Exception) -> bool:
    return isinstance(exc, Unauthorized | Forbidden)


def _untrusted(cluster: str, link: str, exc: Exception) -> str | None:
    """What a linked cluster's TLS certificate failing verification means (None for any
    other error): the Secret's CA (or server name) does not vouch for that server. The
    operator's to fix, like a rejected token, and never worth a request: nothing is sent
    over a connection whose server is not the one the Secret names."""
    if not isinstance(exc, ssl.SSLCertVerificationError):  # aiohttp's wraps it as one
        return None
    return (f"the API server of cluster {cluster} failed TLS verification against the "
            f"Secret's certificate-authority-data and server name (Link {link}): "
            + printable(str(exc)))


def _leaf(group: BaseExceptionGroup[Exception]) -> Exception:
    """The first exception of a (nested: a TaskGroup's tasks run TaskGroups) group."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    assert isinstance(first, Exception)
    return first


class _Health:
    """A linked cluster's watches (services and slices, per namespace): LOST when the
    first one fails, SYNCED again when none is down."""

    def __init__(self, status: Callable[[RemoteState, str], RemoteStatus], label: str) -> None:
        self.status = status
        self.label = label  # the reflector's "cluster west: ", which the notice says anyway
        self.down_watches: set[str] = set()

    def down(self, where: str, message: str) -> Sequence[Event]:
        first = not self.down_watches
        self.down_watches.add(where)
        # The detail is told once: no retry delay or resourceVersion in it.
        detail = message.split("; resuming")[0].removeprefix(self.label)
        return [self.status(RemoteState.LOST, detail)] if first else []

    def up(self, where: str) -> Sequence[Event]:
        self.down_watches.discard(where)
        return [] if self.down_watches else [self.status(RemoteState.SYNCED, "")]


class LinkedCluster:
    """The watch of one linked cluster: its Secret, its client, its reflector, and whether
    a complete list of it ever reached the index (a fault is LOST after, CONNECTING before)."""

    def __init__(self, local: KubeApi, target: Target, queue: asyncio.Queue[list[Event] | None],
                 *, namespaces: Sequence[str], pacing: Pacing, options: LinkedOptions) -> None:
        self.local = local
        self.target = target
        self.cluster = target.cluster
        self.queue = queue
        self.namespaces = tuple(namespaces)  # asked of the cluster: one list and watch each
        self.pacing = pacing
        self.options = options
        self.rng = random.Random()
        self.backoff = pacing.backoff(self.rng)
        self.synced = False
        # It sent what dnsside refuses (past a cap, not JSON): a list that works again is
        # not "synced" until its watches have followed it for a while without that (or
        # every retry would say synced, then capped), and the retries keep backing off.
        self.refused = False
        # The kubeconfig text last refused and why: a retry that reads the same text gets
        # the same verdict without parsing it again (the Secret is still read each time).
        self.refused_kubeconfig: tuple[str, CredentialsError] | None = None
        self.budget = EventBudget(self.cluster, options.index_share, self.put_changes,
                                  notify=self.throttle_changed)
        self.last: tuple[RemoteState, str, str] = (RemoteState.CONNECTING, "", "")
        # How its Secret weakens TLS (--insecure-remote-tls), as last warned about.
        self.weakened: tuple[str, ...] = ()

    def charge(self, seconds: float) -> None:
        """The index spent ``seconds`` on this cluster's watch events (its budget's)."""
        self.budget.charge(seconds)

    async def put_changes(self, changes: list[Change]) -> None:
        await self.queue.put([Remote(self.cluster, change) for change in changes])

    async def throttle_changed(self, throttled: bool) -> None:
        """Tell the index (for `explain`): the last state again, throttled or not."""
        await self.queue.put([self.status(*self.last)])

    def status(self, state: RemoteState, detail: str = "", cap: str = "") -> RemoteStatus:
        # The detail quotes the linked cluster's words (a Status, a TLS error): escaped, as
        # it reaches the log, `explain` and `dnsside check`.
        self.last = (state, detail, cap)
        return RemoteStatus(self.cluster, state, printable(detail, 1024),
                            self.target.secret_ref, self.weakened,
                            cap, self.budget.throttled)

    def tls_weakened(self, weakened: tuple[str, ...]) -> None:
        """Warn once per cluster (and change) that its Secret weakens TLS, as the operator
        allowed with --insecure-remote-tls."""
        if self.weakened == weakened:
            return
        self.weakened = weakened
        if weakened:
            target = self.target
            log.warning("cluster %s: TLS is weakened for it (--insecure-remote-tls): Secret "
                        "%s of Link %s/%s: %s", self.cluster, target.secret_ref,
                        target.namespace, target.link, "; ".join(weakened))

    async def run(self) -> None:
        """Connect, sync and follow, forever; every failure is reported and retried after a
        backoff, the Secret read again first."""
        try:
            await self._run()
        finally:
            await self.budget.close()

    async def _run(self) -> None:
        await self.queue.put([self.status(RemoteState.CONNECTING)])
        if self.target.selector_error:
            log.warning("cluster %s: %s: it selects nothing, so no Service of %s is served "
                        "directly", self.cluster, self.target.selector_error, self.cluster)
        while True:
            capped = False
            try:
                api, kubeconfig = await self.connect()
                try:
                    await self.follow(api, kubeconfig)
                finally:
                    await api.close()
            except asyncio.CancelledError:
                raise
            except SecretChanged:
                log.info("cluster %s: Secret %s changed: connecting with it", self.cluster,
                         self.target.secret_ref)
                continue  # at once: nothing failed
            except CredentialsError as exc:
                await self.queue.put([self.status(RemoteState.CREDENTIALS, str(exc))])
            except CapExceeded as exc:
                # Told once (RemoteState.CAPPED); every cut request counted.
                metrics.REMOTE_CAP_HITS.labels(cluster=self.cluster, cap=exc.cap).inc()
                detail = str(exc).replace(f"cluster {self.cluster}: ", "")
                log.debug("cluster %s: capped: %s", self.cluster, detail)
                self.refused = capped = True
                await self.queue.put([self.status(RemoteState.CAPPED, detail, exc.cap)])
            except Exception as exc:
                detail = describe_error(exc).replace(f"cluster {self.cluster}: ", "")
                self.refused = self.refused or isinstance(exc, ValueError)
                if not isinstance(exc, TRANSIENT):
                    log.error("cluster %s: %s", self.cluster, detail, exc_info=exc)
                state = RemoteState.LOST if self.synced else RemoteState.CONNECTING
                await self.queue.put([SourceError(f"cluster {self.cluster}: {detail}"),
                                      self.status(state, detail)])
            # A cap does not go away in seconds: each retry may read up to the caps again,
            # so a capped cluster is listed once per --flat-network-timeout at most.
            delay = self.backoff.next()
            await asyncio.sleep(max(delay, self.options.limits.timeout) if capped else delay)

    @property
    def secret_path(self) -> str:
        return (f"/api/v1/namespaces/{quote(self.target.namespace, safe='')}/secrets/"
                f"{quote(self.target.secret, safe='')}")

    async def connect(self) -> tuple[KubeApi, str]:
        """A client for the linked cluster, from the Link's Secret as it is now, and the
        kubeconfig it was made from."""
        target = self.target
        if not target.secret:
            raise CredentialsError(f"Link {target.namespace}/{target.link} names no "
                                   "spec.clusterCredentialsSecret")
        where = f"Secret {target.namespace}/{target.secret}"
        try:
            secret = await self.local.get_link_secret(self.secret_path)
        except NotFound:
            raise CredentialsError(f"{where} does not exist") from None
        except Forbidden as exc:
            raise CredentialsError(f"reading {where} is forbidden ({exc.message}): "
                                   "`dnsside install --flat-network` grants it") from None
        except CapExceeded:
            raise CredentialsError(
                f"{where} is over {MAX_SECRET_BYTES} bytes (a Link's kubeconfig is 3-5 KB): "
                f"not read further (Link {target.namespace}/{target.link})") from None
        try:
            text = kubeconfig_in_secret(secret)
        except ValueError as exc:
            raise CredentialsError(f"{where}: {exc}") from None
        del secret
        if self.refused_kubeconfig is not None and self.refused_kubeconfig[0] == text:
            raise self.refused_kubeconfig[1]  # the same text, the same verdict: not parsed again
        try:
            api = await KubeApi.from_kubeconfig_text(
                text, f"{where}, key {SECRET_KUBECONFIG_KEY}",
                self.pacing.request_timeout, self.options.insecure_tls)
        except KubeConfigError as exc:
            self.weakened = ()  # nothing is connected now
            # Told once (the index tells a credentials state again only when its detail
            # changes, and this one is the same at every retry): Secret, Link and field.
            refused = CredentialsError(f"{exc} (Link {target.namespace}/{target.link})")
            self.refused_kubeconfig = (text, refused)
            raise refused from None
        self.refused_kubeconfig = None
        self.tls_weakened(api.weakened)
        return api, text

    async def secret_unchanged(self, kubeconfig: str) -> None:
        """Read the Secret again every ``secret_recheck`` seconds; raise SecretChanged when
        it holds another kubeconfig (rotated credentials, a re-created cluster), so the
        watch starts again with it. A Secret that cannot be read meanwhile changes nothing:
        the connection in hand works, and the next reconnection reports it."""
        while True:
            await asyncio.sleep(self.options.secret_recheck)
            try:
                now = kubeconfig_in_secret(await self.local.get_link_secret(self.secret_path))
            except CapExceeded:
                raise SecretChanged() from None  # grown past the cap: connect() says so
            except TRANSIENT:
                continue
            if now != kubeconfig:
                raise SecretChanged()

    async def settle(self, health: _Health) -> None:
        """After a refusal, synced once the watches have followed for twice as long as one
        event may take (``--flat-network-timeout``) without another. The backoff is not
        reset: a cluster that misbehaves again is retried as slowly as before."""
        await asyncio.sleep(2 * self.options.limits.timeout)
        self.refused = False
        if not health.down_watches:
            await self.queue.put([self.status(RemoteState.SYNCED)])

    async def follow(self, api: KubeApi, kubeconfig: str) -> None:
        """List the linked cluster's Services and slices as one Replace, then follow both;
        returns never. A 401/403 ends it as a CredentialsError."""
        cluster = self.cluster
        link = f"{self.target.namespace}/{self.target.link}"
        gate = Gate(cluster, self.options.limits, self.budget)  # its caps and budget
        reflector = Reflector(self.queue, self.namespaces, self.pacing, rng=self.rng, trust=gate)
        services = Resource(Kind.SERVICE, "services", "/api/v1",
                            partial(parse_remote_service, cluster=cluster,
                                    selector=self.target.selector))
        slices = ENDPOINTSLICES
        try:
            with paused():  # records that live on: no GC passes over them (dnsside.sources.gcoff)
                service_records, service_versions = await reflector.list_resource(
                    api, services)
                try:
                    slice_records, slice_versions = await reflector.list_resource(api, slices)
                except (Forbidden, NotFound) as exc:
                    # Linkerd's remote-access role before 2.14 grants Endpoints, not slices.
                    log.info("cluster %s: cannot list endpointslices (%s): reading v1 "
                             "Endpoints", cluster, exc)
                    slices = ENDPOINTS
                    slice_records, slice_versions = await reflector.list_resource(api, slices)
        except (Unauthorized, Forbidden) as exc:
            raise CredentialsError(_rejection(cluster, exc)) from None
        except ssl.SSLCertVerificationError as exc:
            raise CredentialsError(_untrusted(cluster, link, exc) or str(exc)) from None
        records: tuple[Record, ...] = (*service_records, *slice_records)
        del service_records, slice_records
        replace = Remote(cluster, Replace(frozenset({Kind.SERVICE, Kind.SLICE}), records))
        self.budget.superseded((Kind.SERVICE, Kind.SLICE))  # held from a previous connection
        await self.queue.put([replace] if self.refused else [replace,
                                                             self.status(RemoteState.SYNCED)])
        del records, replace
        self.synced = True
        if not self.refused:
            self.backoff.reset()
        log.info("cluster %s: synced (%s)", cluster, slices.plural)
        health = _Health(self.status, reflector.label)

        def gone(exc: Exception) -> Exception | None:
            if isinstance(exc, ApiError) and _rejected(exc):
                return CredentialsError(_rejection(cluster, exc))
            if (untrusted := _untrusted(cluster, link, exc)) is not None:
                return CredentialsError(untrusted)
            if isinstance(exc, CapExceeded):  # relisted afresh, within the caps or not
                return CapExceeded(exc.cap, str(exc))
            if isinstance(exc, ValueError):  # not what an API server sends: as a cap
                return ValueError(str(exc))
            return None

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(reflector.follow(api, services, service_versions, health, gone))
                tg.create_task(reflector.follow(api, slices, slice_versions, health, gone))
                tg.create_task(self.secret_unchanged(kubeconfig))
                if self.refused:
                    tg.create_task(self.settle(health))
        except* SecretChanged:
            raise SecretChanged() from None
        except* CredentialsError as group:
            raise _leaf(group) from None
        except* (Unauthorized, Forbidden) as group:  # a relist's
            first = _leaf(group)
            assert isinstance(first, ApiError)
            raise CredentialsError(_rejection(cluster, first)) from None
        except* Exception as group:  # a cap, a malformed relist: the cluster's state says it
            raise _leaf(group) from None


def _rejection(cluster: str, exc: ApiError) -> str:
    if isinstance(exc, Unauthorized):
        return f"cluster {cluster} rejected the credentials: {exc}"
    return f"the credentials may not read what dnsside needs in cluster {cluster}: {exc}"



__all__ = ["ENDPOINTS", "ENDPOINTSLICES", "CredentialsError", "LinkedCluster", "LinkedOptions",
           "SecretChanged", "Target"]
