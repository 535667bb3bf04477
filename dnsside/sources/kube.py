"""The Kubernetes source: list then watch Services, EndpointSlices and Links, as an informer does.

Listing, watching, resuming and relisting are :mod:`dnsside.sources.reflector`'s;
this module orchestrates them for the local API server and owns the Link rules.
The flow, the Link rules and why there are no server-side label selectors:
``docs/kube-source.md``.

It keeps the sources' rule (:mod:`dnsside.sources`: no fault widens or empties an
answer), Links too, with one exception: a Link CRD that is missing or forbidden before
any list is a state (``LinksUnavailable``: nothing is filtered), not an error, and never
holds up the first sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from dnsside.config import default
from dnsside.kubeapi.client import (
    ApiError,
    KubeApi,
    describe_error,
    error_reason,
)
from dnsside.model.events import (
    Event,
    Kind,
    LinksUnavailable,
    LinkWatch,
    Replace,
    Synced,
)
from dnsside.model.linkerd import (
    LINK_GROUP,
    LINK_VERSIONS,
    Record,
    parse_link,
    parse_service,
    parse_slice,
)
from dnsside.sources.gcoff import paused
from dnsside.sources.pacing import DEFAULT_PACING, Pacing
from dnsside.sources.reflector import Reflector, RelistNeeded, Resource
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.kube")

SOURCE_NAME = "kube"
QUEUE_SIZE = 64  # batches of events waiting for the index


SERVICES = Resource(Kind.SERVICE, "services", "/api/v1", parse_service)
ENDPOINTSLICES = Resource(
    Kind.SLICE, "endpointslices", "/apis/discovery.k8s.io/v1", parse_slice
)
RESOURCES = (SERVICES, ENDPOINTSLICES)


def links_resource(version: str) -> Resource:
    """Linkerd's Link CRD at the version the API server prefers (found by discovery)."""
    return Resource(Kind.LINK, "links", f"/apis/{LINK_GROUP}/{version}", parse_link)


@dataclass(slots=True)
class _LinkView:
    """The outcome of listing Links: the resource and its records, or why there are none."""

    resource: Resource | None
    records: list[Record]
    version: str = ""  # the list's resourceVersion
    reason: str = ""  # why Links cannot be read (resource is None)


class _LinksGone(Exception):
    """The Link watch hit 403/404: RBAC was revoked or the CRD uninstalled."""


class _LinkHealth:
    """A Link watch that fails is the Link watch down (the last complete list stands);
    one that opens again follows changes again."""

    def down(self, where: str, message: str) -> Sequence[Event]:
        return [LinkWatch(message)]

    def up(self, where: str) -> Sequence[Event]:
        return [LinkWatch()]


class KubeSource:
    """Services and EndpointSlices from the Kubernetes API, as index events."""

    name = SOURCE_NAME

    def __init__(
        self,
        kubeconfig: str | None = None,
        namespaces: Sequence[str] = (),
        pacing: Pacing = DEFAULT_PACING,
        *,
        links_namespace: str = default("--links-namespace"),
    ) -> None:
        self.kubeconfig = kubeconfig
        # Links are listed and watched in this namespace only: a Link elsewhere is never
        # even read (Linkerd's controllers look only in theirs; docs/kube-source.md).
        self.links_namespace = links_namespace
        self.namespaces: tuple[str, ...] = tuple(dict.fromkeys(namespaces))
        self.pacing = pacing
        # While Links cannot be read, they are looked for again this often: the longest
        # a retry waits.
        self.links_retry = pacing.backoff_cap
        self._rng = random.Random()
        self._crash: Exception | None = None

    # ------------------------------------------------------------------ public

    async def events(self) -> AsyncIterator[list[Event]]:
        """Yield batches forever: the initial Replace + Synced, then watch events."""
        api = await KubeApi.connect(self.kubeconfig, self.pacing.request_timeout)
        queue: asyncio.Queue[list[Event] | None] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self.reflector = Reflector(queue, self.namespaces, self.pacing, rng=self._rng)
        runner = asyncio.create_task(self._supervise(api, queue), name="kube-source")
        try:
            while True:
                batch = await queue.get()
                if batch is None:  # the runner died of a bug: surface it
                    assert self._crash is not None
                    raise self._crash
                yield batch
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
            await api.close()

    # ------------------------------------------------------------------ orchestration

    async def _supervise(self, api: KubeApi, queue: asyncio.Queue[list[Event] | None]) -> None:
        try:
            await self._run(api, queue)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: hand it to events() rather than hang
            log.exception("kube source failed")
            self._crash = exc
            await queue.put(None)

    async def _run(self, api: KubeApi, queue: asyncio.Queue[list[Event] | None]) -> None:
        link_listing = asyncio.create_task(self._list_links(api, queue, attempts=None))
        try:
            # Hundreds of thousands of records that live on: no GC passes over them while
            # they are made (see dnsside.sources.gcoff); the index collects, then freezes them.
            with paused():
                async with asyncio.TaskGroup() as tg:
                    listings = [tg.create_task(self.reflector.list_resource(api, res))
                                for res in RESOURCES]
            # The first answers wait for the Links (or for a definite "cannot be read"): a
            # transient failure must not start them wider than the Links allow.
            links = await link_listing
        finally:
            link_listing.cancel()
        results = [t.result() for t in listings]
        records = tuple(r for recs, _ in results for r in recs)
        kinds = frozenset(r.kind for r in RESOURCES)
        batch: list[Event]
        if links.resource is not None:
            batch = [Replace(kinds | {Kind.LINK}, records + tuple(links.records))]
        else:
            batch = [Replace(kinds, records), LinksUnavailable(links.reason)]
        await queue.put([*batch, Synced()])
        pairs = list(zip(RESOURCES, results, strict=True))
        log.info("initial sync: %s, %s", ", ".join(f"{len(r[1][0])} {r[0].plural}" for r in pairs),
                 f"{len(links.records)} links" if links.resource else "links unreadable")
        follow = [(res, versions) for res, (_, versions) in pairs]
        # The index holds the records now. This frame lives as long as the watches: were it
        # to keep the list (the tasks keep their results), every record churn replaced
        # since would stay alive next to its successor (bench/MEMORY_CHURN.md).
        del listings, results, records, batch, pairs
        async with asyncio.TaskGroup() as tg:
            for res, versions in follow:
                tg.create_task(self.reflector.follow(api, res, versions))
            tg.create_task(self._follow_links(api, links, queue))

    # ------------------------------------------------------------------ links

    async def _list_links(
        self, api: KubeApi, queue: asyncio.Queue[list[Event] | None], attempts: int | None = None,
        relist: bool = False,
    ) -> _LinkView:
        """Discover the Link CRD's version and list the Links of ``--links-namespace``
        (whatever ``--namespace`` says; no other Link counts). A missing CRD or a 403 is an
        answer, not an error: Links are then unavailable. Other failures are retried
        (``attempts`` times; None: until cancelled); in a ``relist`` each is reported as
        the Link watch being down, so the last complete list stands meanwhile."""
        backoff = self.pacing.backoff(self._rng)
        attempt = 0
        told: set[str] = set()  # the reasons of the failures the log has told
        while True:
            attempt += 1
            try:
                return await self._try_list_links(api)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = f"listing Links failed: {describe_error(exc)}"
                if attempts is not None and attempt >= attempts:
                    return _LinkView(None, [], reason=reason)
                why = error_reason(exc)
                metrics.LIST_RETRIES.labels(resource="links", reason=why).inc()
                delay = self.pacing.retry_delay(backoff, exc)
                message = f"{reason}; retrying in {delay:.1f}s"
                await self.reflector.report_and_wait(exc, message, delay,
                                                     [LinkWatch(message)] if relist else (),
                                                     again=why in told)
                told.add(why)

    async def _try_list_links(self, api: KubeApi) -> _LinkView:
        try:
            group = await self.reflector.get_json(api, f"/apis/{LINK_GROUP}", {})
        except ApiError as exc:
            if exc.status == 404:
                return _LinkView(None, [], reason=f"the Link CRD (links.{LINK_GROUP}) is not "
                                 "installed")
            if exc.status == 403:
                return _LinkView(None, [], reason=f"API discovery of {LINK_GROUP} is forbidden: "
                                 f"{exc.message or exc}")
            raise
        served = [v.get("version") for v in group.get("versions") or [] if isinstance(v, Mapping)]
        preferred = (group.get("preferredVersion") or {}).get("version")
        known = [v for v in LINK_VERSIONS if v in served]
        if not known:
            return _LinkView(None, [], reason=f"{LINK_GROUP} serves {served}, dnsside reads "
                             f"{', '.join(LINK_VERSIONS)}")
        version = preferred if preferred in known else known[0]
        res = links_resource(version)
        records: list[Record] = []
        try:
            rv = await self.reflector.list_into(api, res, self.links_namespace, records)
        except ApiError as exc:
            if exc.status in (403, 404):
                return _LinkView(None, [], reason=f"cannot list Links ({version}) in "
                                 f"{self.links_namespace}: {exc.message or exc}")
            raise
        return _LinkView(res, records, rv)

    async def _follow_links(
        self, api: KubeApi, view: _LinkView, queue: asyncio.Queue[list[Event] | None]
    ) -> None:
        """Watch Links while they can be read; while they cannot, look again every
        ``links_retry`` seconds. Only a complete list (a synced view) or a watch event
        changes a Link: every failure in between is reported and changes nothing."""
        while True:
            if view.resource is None:
                await asyncio.sleep(self.links_retry)
                view = await self._list_links(api, queue, attempts=1)
                if view.resource is None:
                    continue
                log.info("Links can be read (%s): %d", view.resource.prefix, len(view.records))
                await queue.put([Replace(frozenset({Kind.LINK}), tuple(view.records))])
            res = view.resource
            try:
                await self.reflector.watch(api, res, self.links_namespace, view.version,
                                           gone=_links_gone, health=_LinkHealth())
            except RelistNeeded as exc:
                log.warning("relisting links: watch links: 410 Expired (%s)", exc)
                metrics.RELISTS.labels(resource=res.plural).inc()
                await queue.put([LinkWatch(f"410 Expired ({exc}): relisting Links")])
            except _LinksGone as exc:
                view = _LinkView(None, [], reason=str(exc))
                await queue.put([LinksUnavailable(view.reason)])
                continue
            view = await self._list_links(api, queue, relist=True)
            if view.resource is None:
                await queue.put([LinksUnavailable(view.reason)])
            else:
                await queue.put([Replace(frozenset({Kind.LINK}), tuple(view.records))])

def _links_gone(exc: Exception) -> Exception | None:
    if isinstance(exc, ApiError) and exc.status in (403, 404):
        return _LinksGone(f"watching Links failed: {exc}")
    return None
