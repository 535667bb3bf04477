"""The Kubernetes source: list then watch Services, EndpointSlices and Links, as an informer does.

Each resource is listed in pages (parsed straight into slim records, no whole
object kept), then watched from the list's resourceVersion with bookmarks; a
stream that ends is reopened from the last resourceVersion seen, an error is
retried after a jittered exponential backoff, and 410 Expired relists the
resource. The flow, the Link rules and why there are no server-side label
selectors: ``docs/kube-source.md``.

The one tricky thing: no fault may ever make the answers wider or emptier than
what was learnt. So the first answers wait for one complete list of every
resource (one ``Replace`` + ``Synced``), a relist reaches the index as one
``Replace`` that is diffed and swapped in at once, and errors are only ever
reported (``SourceError``, ``LinkWatch``), never turned into deletions. Links
obey the same rule with one exception, a Link CRD that is missing or forbidden
before any list: that is a state (``LinksUnavailable``: nothing is filtered),
not an error, and never holds up the first sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from dnsside import metrics
from dnsside.bulk import paused
from dnsside.events import (
    Delete,
    Event,
    Kind,
    LinksUnavailable,
    LinkWatch,
    Replace,
    SourceError,
    Synced,
    Upsert,
)
from dnsside.linkerd import (
    LINK_GROUP,
    LINK_VERSIONS,
    ObjectError,
    Record,
    parse_link,
    parse_service,
    parse_slice,
)
from dnsside.sources.kubeapi import (
    TRANSIENT,
    ApiError,
    Backoff,
    KubeApi,
    decode,
    describe_error,
    error_reason,
    read_error,
)

log = logging.getLogger("dnsside.kube")

SOURCE_NAME = "kube"


@dataclass(frozen=True, slots=True)
class _Resource:
    kind: Kind
    plural: str
    prefix: str  # URL of the group version
    # List items carry no `kind` (the API server leaves it out of list items), so
    # each resource names its parser instead of going through parse_object.
    parse: Callable[[Mapping[str, Any], str], Record]

    def path(self, namespace: str | None) -> str:
        if namespace is None:
            return f"{self.prefix}/{self.plural}"
        return f"{self.prefix}/namespaces/{quote(namespace, safe='')}/{self.plural}"

    def where(self, verb: str, namespace: str | None) -> str:
        return f"{verb} {self.plural}" + (f" in {namespace}" if namespace else "")


SERVICES = _Resource(Kind.SERVICE, "services", "/api/v1", parse_service)
ENDPOINTSLICES = _Resource(
    Kind.SLICE, "endpointslices", "/apis/discovery.k8s.io/v1", parse_slice
)
RESOURCES = (SERVICES, ENDPOINTSLICES)


def links_resource(version: str) -> _Resource:
    """Linkerd's Link CRD at the version the API server prefers (found by discovery)."""
    return _Resource(Kind.LINK, "links", f"/apis/{LINK_GROUP}/{version}", parse_link)


@dataclass(slots=True)
class _LinkView:
    """The outcome of listing Links: the resource and its records, or why there are none."""

    resource: _Resource | None
    records: list[Record]
    version: str = ""  # the list's resourceVersion
    reason: str = ""  # why Links cannot be read (resource is None)


class _LinksGone(Exception):
    """The Link watch hit 403/404: RBAC was revoked or the CRD uninstalled."""


class _Expired(Exception):
    """A watch's resourceVersion is gone from the server's history: relist."""

    def __init__(self, resource: _Resource, namespace: str | None, detail: str) -> None:
        super().__init__(detail)
        self.resource = resource
        self.namespace = namespace


@dataclass(slots=True)
class _Cursor:
    """Where a watch resumes, and whether the current stream delivered anything."""

    resource_version: str
    progressed: bool = False


class KubeSource:
    """Services and EndpointSlices from the Kubernetes API, as index events."""

    name = SOURCE_NAME

    def __init__(
        self,
        kubeconfig: str | None = None,
        namespaces: Sequence[str] = (),
        *,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        watch_timeout: float = 300.0,
        page_size: int = 500,
        request_timeout: float = 60.0,
        queue_size: int = 64,
        links_retry: float = 30.0,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespaces: tuple[str, ...] = tuple(dict.fromkeys(namespaces))
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.request_timeout = request_timeout
        self.queue_size = queue_size
        self.links_retry = links_retry
        self._rng = random.Random()
        self._crash: Exception | None = None

    # ------------------------------------------------------------------ public

    async def events(self) -> AsyncIterator[list[Event]]:
        """Yield batches forever: the initial Replace + Synced, then watch events."""
        metrics.SOURCE_SYNCED.labels(source=self.name).set(0)
        api = await KubeApi.connect(self.kubeconfig, self.request_timeout)
        queue: asyncio.Queue[list[Event] | None] = asyncio.Queue(maxsize=self.queue_size)
        runner = asyncio.create_task(self._supervise(api, queue), name="kube-source")
        try:
            while True:
                batch = await queue.get()
                if batch is None:  # the runner died of a bug: surface it
                    assert self._crash is not None
                    raise self._crash
                metrics.SOURCE_LAST_EVENT.labels(source=self.name).set(time.time())
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
            # they are made (see dnsside.bulk); the index collects, then freezes them.
            with paused():
                async with asyncio.TaskGroup() as tg:
                    listings = [tg.create_task(self._list_resource(api, res, queue))
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
        metrics.SOURCE_SYNCED.labels(source=self.name).set(1)
        pairs = list(zip(RESOURCES, results, strict=True))
        log.info("initial sync: %s, %s", ", ".join(f"{len(r[1][0])} {r[0].plural}" for r in pairs),
                 f"{len(links.records)} links" if links.resource else "links unreadable")
        follow = [(res, versions) for res, (_, versions) in pairs]
        # The index holds the records now. This frame lives as long as the watches: were it
        # to keep the list (the tasks keep their results), every record churn replaced
        # since would stay alive next to its successor (issue 17).
        del listings, results, records, batch, pairs
        async with asyncio.TaskGroup() as tg:
            for res, versions in follow:
                tg.create_task(self._follow(api, res, versions, queue))
            tg.create_task(self._follow_links(api, links, queue))

    # ------------------------------------------------------------------ links

    async def _list_links(
        self, api: KubeApi, queue: asyncio.Queue[list[Event] | None], attempts: int | None = None,
        relist: bool = False,
    ) -> _LinkView:
        """Discover the Link CRD's version and list every Link, cluster-wide (they live in
        linkerd-multicluster whatever ``--namespace`` says). A missing CRD or a 403 is an
        answer, not an error: Links are then unavailable. Other failures are retried
        (``attempts`` times; None: until cancelled); in a ``relist`` each is reported as
        the Link watch being down, so the last complete list stands meanwhile."""
        backoff = Backoff(self.backoff_base, self.backoff_cap, self._rng)
        attempt = 0
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
                delay = self._retry_delay(backoff, exc)
                message = f"{reason}; retrying in {delay:.1f}s"
                await self._report_and_wait(queue, exc, message, delay,
                                            LinkWatch(message) if relist else None)

    async def _try_list_links(self, api: KubeApi) -> _LinkView:
        try:
            group = await self._get_json(api, f"/apis/{LINK_GROUP}", {})
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
            rv = await self._list(api, res, None, records)
        except ApiError as exc:
            if exc.status in (403, 404):
                return _LinkView(None, [], reason=f"cannot list Links ({version}): "
                                 f"{exc.message or exc}")
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
                await self._watch(api, res, None, view.version, queue, gone=_links_gone,
                                  links=True)
            except _Expired as exc:
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

    async def _follow(
        self,
        api: KubeApi,
        res: _Resource,
        versions: dict[str | None, str],
        queue: asyncio.Queue[list[Event] | None],
    ) -> None:
        """Watch one resource in every namespace; relist it when its history expired."""
        while True:
            try:
                async with asyncio.TaskGroup() as tg:
                    for namespace, rv in versions.items():
                        tg.create_task(self._watch(api, res, namespace, rv, queue))
            except* _Expired as group:
                first = group.exceptions[0]
                assert isinstance(first, _Expired)
                where = res.where("watch", first.namespace)
                log.warning("relisting %s: %s: 410 Expired (%s)", res.plural, where, first)
            metrics.RELISTS.labels(resource=res.plural).inc()
            with paused():
                records, versions = await self._list_resource(api, res, queue)
            log.info("relisted %s: %d objects", res.plural, len(records))
            await queue.put([Replace(frozenset({res.kind}), tuple(records))])
            del records  # not kept through the watches that follow (see _run)

    # ------------------------------------------------------------------ lists

    async def _list_resource(
        self, api: KubeApi, res: _Resource, queue: asyncio.Queue[list[Event] | None]
    ) -> tuple[list[Record], dict[str | None, str]]:
        """List ``res`` in every namespace, retrying until it works."""
        backoff = Backoff(self.backoff_base, self.backoff_cap, self._rng)
        scopes: Sequence[str | None] = self.namespaces or (None,)
        while True:
            try:
                records: list[Record] = []
                versions: dict[str | None, str] = {}
                for namespace in scopes:
                    versions[namespace] = await self._list(api, res, namespace, records)
                return records, versions
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self._retry_delay(backoff, exc)
                message = (f"list {res.plural} failed: {describe_error(exc)}; "
                           f"retrying in {delay:.1f}s")
                await self._report_and_wait(queue, exc, message, delay)

    async def _list(
        self, api: KubeApi, res: _Resource, namespace: str | None, out: list[Record]
    ) -> str:
        """One paged list into ``out``; returns the list's resourceVersion.

        The next page is requested before this one is decoded and parsed, so the API
        server prepares (and the network carries) page n+1 while dnsside works on page
        n: the continue token is read off the start of the raw page (ListMeta comes
        before the items), and checked against the decoded one, which wins. The parse
        yields to the event loop every few dozen items, which is when that request goes
        out and its answer comes in (it takes a few loop turns, with real I/O between).
        """
        where = res.where("list", namespace)
        path = res.path(namespace)
        start = len(out)
        while True:  # restarted when a continue token expires mid-list
            params = {"limit": str(self.page_size)}
            version = ""
            ahead: tuple[str, asyncio.Task[bytes]] | None = None  # (its token, the request)
            try:
                data = await self._get_raw(api, path, params)
                while True:
                    guess = _continue_token(data)
                    if guess:
                        ahead = (guess, asyncio.create_task(
                            self._get_raw(api, path, {**params, "continue": guess})))
                    body = decode(data, path)
                    meta = body.get("metadata") or {}
                    version = version or str(meta.get("resourceVersion") or "")
                    items = body.get("items") or []
                    if not isinstance(items, list):
                        raise ValueError(f"{where}: items is not a list")
                    for i, item in enumerate(items):
                        if i % _PARSE_BATCH == _PARSE_BATCH - 1:
                            await asyncio.sleep(0)
                        record = self._parse(res, item, where)
                        if record is not None:
                            out.append(record)
                    del body, items
                    token = meta.get("continue")
                    if not token:
                        break
                    params["continue"] = str(token)
                    if ahead is not None and ahead[0] == params["continue"]:
                        data = await ahead[1]
                    else:
                        if ahead is not None:
                            ahead[1].cancel()
                        data = await self._get_raw(api, path, params)
                    ahead = None
            except ApiError as exc:
                if not (exc.expired and "continue" in params):
                    raise
                log.warning("%s: continue token expired (%s); listing again", where, exc.message)
                del out[start:]
                continue
            finally:
                if ahead is not None:
                    ahead[1].cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await ahead[1]
            if not version:
                raise ValueError(f"{where}: the list has no metadata.resourceVersion")
            return version

    async def _get_raw(self, api: KubeApi, path: str, params: Mapping[str, str]) -> bytes:
        return await api.get_raw(path, params, timeout=self.request_timeout)

    async def _get_json(self, api: KubeApi, path: str, params: Mapping[str, str]
                        ) -> dict[str, Any]:
        return decode(await self._get_raw(api, path, params), path)

    @staticmethod
    def _parse(res: _Resource, obj: Any, where: str) -> Record | None:
        if not isinstance(obj, Mapping):
            log.warning("%s: skipping an item that is not an object", where)
            return None
        try:
            return res.parse(obj, where)
        except ObjectError as exc:
            log.warning("skipping %s", exc)
            return None

    # ------------------------------------------------------------------ watches

    async def _watch(
        self,
        api: KubeApi,
        res: _Resource,
        namespace: str | None,
        resource_version: str,
        queue: asyncio.Queue[list[Event] | None],
        gone: Callable[[Exception], Exception | None] | None = None,
        links: bool = False,
    ) -> None:
        """Keep one watch open forever, resuming from the last resourceVersion.

        Returns never; raises _Expired when the server no longer has that version, and
        what ``gone`` makes of an error it recognises as final for this resource. With
        ``links``, a failure is also reported as ``LinkWatch`` down, and the next stream
        that opens as up again.
        """
        where = res.where("watch", namespace)
        cursor = _Cursor(resource_version)
        backoff = Backoff(self.backoff_base, self.backoff_cap, self._rng)
        loop = asyncio.get_running_loop()
        down = False

        async def reopened() -> None:
            nonlocal down
            if down:
                down = False
                await queue.put([LinkWatch()])

        while True:
            cursor.progressed = False
            opened = loop.time()
            try:
                await self._stream(api, res, namespace, cursor, queue,
                                   reopened if links else None)
            except asyncio.CancelledError:
                raise
            except _Expired:
                metrics.WATCH_RESTARTS.labels(resource=res.plural, reason="expired").inc()
                raise
            except Exception as exc:
                if isinstance(exc, ApiError) and exc.expired:
                    metrics.WATCH_RESTARTS.labels(resource=res.plural, reason="expired").inc()
                    raise _Expired(res, namespace, str(exc)) from exc
                final = gone(exc) if gone is not None else None
                reason = error_reason(exc)
                if final is not None:
                    metrics.WATCH_RESTARTS.labels(resource=res.plural, reason=reason).inc()
                    raise final from exc
                metrics.WATCH_RESTARTS.labels(resource=res.plural, reason=reason).inc()
                if cursor.progressed:
                    backoff.reset()
                delay = self._retry_delay(backoff, exc)
                message = (
                    f"{where} failed ({reason}): {describe_error(exc)}; resuming from "
                    f"resourceVersion {cursor.resource_version} in {delay:.1f}s"
                )
                down = links
                await self._report_and_wait(queue, exc, message, delay,
                                            LinkWatch(message) if links else None)
                continue
            # The server closed the stream cleanly (timeoutSeconds): reopen at once,
            # unless it keeps doing so without delivering anything.
            metrics.WATCH_RESTARTS.labels(resource=res.plural, reason="closed").inc()
            if cursor.progressed or loop.time() - opened >= 1.0:
                backoff.reset()
                delay = 0.0
            else:
                delay = backoff.next()
            log.info(
                "%s: stream closed by the server; resuming from resourceVersion %s%s",
                where, cursor.resource_version, f" in {delay:.1f}s" if delay else "",
            )
            if delay:
                await asyncio.sleep(delay)

    @staticmethod
    async def _report_and_wait(
        queue: asyncio.Queue[list[Event] | None], exc: BaseException, message: str, delay: float,
        also: Event | None = None,
    ) -> None:
        """Log a failed request (with a traceback only when it is not an expected network or
        API error), tell the index (``also``, when the failure means more to it), and back
        off before the retry."""
        if isinstance(exc, TRANSIENT):
            log.warning("%s", message)
        else:
            log.exception("%s", message)
        await queue.put([SourceError(message)] if also is None else [SourceError(message), also])
        await asyncio.sleep(delay)

    def _retry_delay(self, backoff: Backoff, exc: BaseException) -> float:
        delay = backoff.next()
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.backoff_cap))
        return delay

    async def _stream(
        self,
        api: KubeApi,
        res: _Resource,
        namespace: str | None,
        cursor: _Cursor,
        queue: asyncio.Queue[list[Event] | None],
        opened: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """One watch request: read events until the server closes the stream; ``opened``
        is awaited once the server accepted it."""
        where = res.where("watch", namespace)
        # Jitter the server-side timeout (like client-go) so watches don't renew in step.
        seconds = max(1, round(self.watch_timeout * self._rng.uniform(1.0, 1.25)))
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": cursor.resource_version,
            "timeoutSeconds": str(seconds),
        }
        timeout = aiohttp.ClientTimeout(
            total=seconds + self.request_timeout, sock_connect=self.request_timeout
        )
        resp = await api.request(res.path(namespace), params, timeout)
        complete = False
        try:
            if resp.status != 200:
                raise await read_error(resp)
            if opened is not None:
                await opened()
            lines = _Lines()
            async for chunk in resp.content.iter_any():
                found = lines.feed(chunk)
                if found:
                    await self._deliver(self._decode(res, namespace, found, cursor, where), queue)
            tail = lines.rest()
            if tail.strip():
                await self._deliver(self._decode(res, namespace, [tail], cursor, where), queue)
            complete = True
        finally:
            if complete:
                resp.release()
            else:
                resp.close()

    @staticmethod
    async def _deliver(
        decoded: tuple[list[Event], Exception | None], queue: asyncio.Queue[list[Event] | None]
    ) -> None:
        batch, error = decoded
        if batch:
            await queue.put(batch)
        if error is not None:
            raise error

    def _decode(
        self,
        res: _Resource,
        namespace: str | None,
        lines: list[bytes],
        cursor: _Cursor,
        where: str,
    ) -> tuple[list[Event], Exception | None]:
        """Events of complete lines, and the error that ends the stream, if any.

        Events before an error are valid (the cursor already moved past them), so
        the caller delivers them first, then raises the error.
        """
        batch: list[Event] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                self._event(res, namespace, json.loads(line), cursor, where, batch)
            except (_Expired, ApiError, ValueError) as exc:
                return batch, exc
        return batch, None

    @staticmethod
    def _event(
        res: _Resource,
        namespace: str | None,
        event: Any,
        cursor: _Cursor,
        where: str,
        batch: list[Event],
    ) -> None:
        if not isinstance(event, Mapping) or not isinstance(event.get("object"), Mapping):
            raise ValueError(f"{where}: a watch event without an object")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            error = ApiError.from_status(obj, 500)
            if error.expired:
                raise _Expired(res, namespace, error.message or str(error))
            raise error
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            raise ValueError(f"{where}: a {kind} event without metadata")
        version = meta.get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            try:
                batch.append(Upsert(res.parse(obj, where)))
            except ObjectError as exc:
                log.warning("skipping %s event, keeping the previous state: %s", kind, exc)
        elif kind == "DELETED":
            ns, name = meta.get("namespace"), meta.get("name")
            if isinstance(ns, str) and isinstance(name, str) and ns and name:
                batch.append(Delete(res.kind, ns, name))
            else:
                log.warning("%s: skipping a DELETED event without namespace/name", where)
        elif kind != "BOOKMARK":
            log.warning("%s: skipping an event of unknown type %r", where, kind)
        if isinstance(version, str) and version:
            cursor.resource_version = version
        cursor.progressed = True


class _Lines:
    """Complete lines out of a watch stream's chunks, copying as little as possible.

    The API server flushes each event as it is written, so a chunk nearly always ends
    on a line: it is handed on as is when it holds one event (``json.loads`` ignores the
    newline) and split once when it holds several. Only a line cut by a chunk boundary
    is kept, as its pieces, joined once when its end arrives. (A growing bytearray with
    two copies of every chunk was transient garbage in odd sizes at every event: heap
    fragmentation under churn, issue 17.)
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        end = chunk.rfind(b"\n")
        if end < 0:
            if chunk:
                self._parts.append(chunk)
            return []
        if self._parts:
            self._parts.append(chunk)
            chunk = b"".join(self._parts)
            self._parts.clear()
            end = chunk.rfind(b"\n")
        if end == len(chunk) - 1 and chunk.find(b"\n") == end:
            return [chunk]
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if rest:
            self._parts.append(rest)
        return lines

    def rest(self) -> bytes:
        """What is left without a newline (a stream that ended mid-line)."""
        return b"".join(self._parts)


_PARSE_BATCH = 50  # items parsed between two turns of the event loop while listing
_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"\\]+)"')


def _continue_token(data: bytes) -> str:
    """The continue token of a raw list page, guessed from its first bytes (the API
    server writes ``metadata`` before ``items``); "" when none is seen. Only a guess:
    the caller checks it against the decoded page."""
    found = _CONTINUE.search(data, 0, 4096)
    return found.group(1).decode("ascii", "replace") if found else ""


def _links_gone(exc: Exception) -> Exception | None:
    if isinstance(exc, ApiError) and exc.status in (403, 404):
        return _LinksGone(f"watching Links failed: {exc}")
    return None
