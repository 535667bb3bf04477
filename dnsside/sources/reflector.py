"""List and watch one resource the way an informer does: the reflector both sources share.

Each resource is listed in pages (parsed straight into slim records, no whole
object kept), then watched from the list's resourceVersion with bookmarks; a
stream that ends is reopened from the last resourceVersion seen, an error is
retried after a jittered exponential backoff, and 410 Expired relists the
resource (how long each one waits: :mod:`dnsside.sources.pacing`). The local kube
source runs one for its own API server; under ``--flat-network`` each linked
cluster gets one of its own.

Whose API it reads is its :class:`~dnsside.sources.trust.Trust`'s business, asked at
the few points where that matters (caps, what is kept, what is said, what it gives up
on, how events reach the index): the loops here are the same for every server.

It keeps the sources' rule (:mod:`dnsside.sources`): a relist is one ``Replace``, and an
error is reported (``SourceError``, and what a ``WatchHealth`` makes of it), never
turned into deletions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp

from dnsside.kubeapi.caps import CapExceeded
from dnsside.kubeapi.client import (
    TRANSIENT,
    ApiError,
    KubeApi,
    WatchLines,
    continue_token,
    decode,
    describe_error,
    drop,
    error_reason,
    read_error,
)
from dnsside.model.events import Delete, Event, Kind, Replace, SourceError, Upsert
from dnsside.model.linkerd import ObjectError, Record
from dnsside.model.printable import printable
from dnsside.sources.gcoff import paused
from dnsside.sources.pacing import DEFAULT_PACING, Pacing, RelistPacing
from dnsside.sources.trust import NO_NAME, NOT_OBJECT, UNKNOWN_TYPE, Listing, Trust, Trusted
from dnsside.sources.watchline import OFF_LOOP_BYTES, Parsed, load_event, load_long_event
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.kube")


@dataclass(frozen=True, slots=True)
class Resource:
    kind: Kind
    plural: str
    prefix: str  # URL of the group version
    # List items carry no `kind` (the API server leaves it out of list items), so
    # each resource names its parser instead of going through parse_object. None: the
    # object is not one to keep (for a watch event: as good as deleted).
    parse: Callable[[Mapping[str, Any], str], Record | None]

    def path(self, namespace: str | None) -> str:
        if namespace is None:
            return f"{self.prefix}/{self.plural}"
        return f"{self.prefix}/namespaces/{quote(namespace, safe='')}/{self.plural}"

    def where(self, verb: str, namespace: str | None) -> str:
        return f"{verb} {self.plural}" + (f" in {namespace}" if namespace else "")


class RelistNeeded(Exception):
    """A watch's resourceVersion is gone from the server's history: relist."""

    def __init__(self, resource: Resource, namespace: str | None, detail: str) -> None:
        super().__init__(detail)
        self.resource = resource
        self.namespace = namespace


class WatchHealth(Protocol):
    """What a watch's failures and recoveries mean to the index beyond a SourceError."""

    def down(self, where: str, message: str) -> Sequence[Event]: ...

    def up(self, where: str) -> Sequence[Event]: ...


@dataclass(slots=True)
class _Cursor:
    """Where a watch resumes, and whether the current stream changed anything (a bookmark
    or an ignored event moves the resourceVersion, but is no change)."""

    resource_version: str
    progressed: bool = False


class Reflector:
    """Lists and watches resources of one API server into a queue of event batches."""

    def __init__(
        self,
        queue: asyncio.Queue[list[Event] | None],
        namespaces: Sequence[str] = (),
        pacing: Pacing = DEFAULT_PACING,
        *,
        rng: random.Random | None = None,
        trust: Trust | None = None,
    ) -> None:
        self.queue = queue
        self.namespaces = tuple(namespaces)
        self.pacing = pacing
        self._rng = rng or random.Random()
        self.trust: Trust = trust or Trusted()  # whose API: the local one unless told
        self.label = self.trust.label  # "cluster west: " for a linked cluster's API

    def _restarted(self, res: Resource, reason: str) -> None:
        metrics.WATCH_RESTARTS.labels(resource=self.label + res.plural, reason=reason).inc()

    def where(self, res: Resource, verb: str, namespace: str | None) -> str:
        return self.label + res.where(verb, namespace)

    async def put(self, batch: Sequence[Event]) -> None:
        await self.queue.put(self.trust.wrap(batch))

    async def follow(
        self,
        api: KubeApi,
        res: Resource,
        versions: dict[str | None, str],
        health: WatchHealth | None = None,
        gone: Callable[[Exception], Exception | None] | None = None,
    ) -> None:
        """Watch one resource in every namespace; relist it when its history expired (one
        ``Replace``, so nothing deleted meanwhile lingers and no answer empties), at once
        unless the watches it follows were short-lived (:class:`RelistPacing`)."""
        pacing = RelistPacing(self.pacing.backoff(self._rng))
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                async with asyncio.TaskGroup() as tg:
                    for namespace, rv in versions.items():
                        tg.create_task(self.watch(api, res, namespace, rv, gone, health))
            except* RelistNeeded as group:
                first = group.exceptions[0]
                assert isinstance(first, RelistNeeded)
                where = self.where(res, "watch", first.namespace)
                log.warning("relisting %s: %s: 410 Expired (%s)", res.plural, where, first)
            delay = pacing.delay(loop.time() - started)
            if delay:
                log.info("%s: watches expire within seconds of a list: relisting in %.1fs",
                         self.where(res, "watch", None), delay)
                await asyncio.sleep(delay)
            metrics.RELISTS.labels(resource=self.label + res.plural).inc()
            with paused():
                records, versions = await self.list_resource(api, res)
            log.info("relisted %s%s: %d objects", self.label, res.plural, len(records))
            self.trust.superseded((res.kind,))  # events it holds are older than the list
            await self.put([Replace(frozenset({res.kind}), tuple(records))])
            del records  # not kept through the watches that follow (see KubeSource._run)

    async def list_resource(
        self, api: KubeApi, res: Resource
    ) -> tuple[list[Record], dict[str | None, str]]:
        """List ``res`` in every namespace, retrying until it works (a failure is told once
        per reason, every retry counted)."""
        backoff = self.pacing.backoff(self._rng)
        scopes: Sequence[str | None] = self.namespaces or (None,)
        trust = self.trust
        told: set[str] = set()  # the reasons of the failures the log has told
        while True:
            # With a time cap, the list as a whole has a deadline: one that never ends (a
            # continue token after another) or trickles in is given up, not waited for.
            deadline = asyncio.timeout(trust.time_cap)
            listing = trust.listing(res.kind)
            try:
                records: list[Record] = []
                versions: dict[str | None, str] = {}
                async with deadline:
                    for namespace in scopes:
                        versions[namespace] = await self.list_into(api, res, namespace,
                                                                   records, listing)
                listing.complete()
                return records, versions
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, TimeoutError) and deadline.expired():
                    raise trust.overdue(f"{self.where(res, 'list', None)}: not complete"
                                        ) from None
                if trust.gives_up(exc):
                    raise
                reason = error_reason(exc)
                metrics.LIST_RETRIES.labels(resource=self.label + res.plural, reason=reason).inc()
                delay = self.pacing.retry_delay(backoff, exc)
                message = (f"{self.label}list {res.plural} failed: {describe_error(exc)}; "
                           f"retrying in {delay:.1f}s (told once per reason; retries counted "
                           "in dnsside_list_retries_total)")
                await self.report_and_wait(exc, message, delay, again=reason in told)
                told.add(reason)

    async def list_into(
        self, api: KubeApi, res: Resource, namespace: str | None, out: list[Record],
        listing: Listing | None = None,
    ) -> str:
        """One paged list into ``out``; returns the list's resourceVersion.

        The next page is requested before this one is decoded and parsed, so the API
        server prepares (and the network carries) page n+1 while dnsside works on page
        n: the continue token is read off the start of the raw page (ListMeta comes
        before the items), and checked against the decoded one, which wins. The parse
        yields to the event loop every few dozen items, which is when that request goes
        out and its answer comes in (it takes a few loop turns, with real I/O between).
        """
        where = self.where(res, "list", namespace)
        path = res.path(namespace)
        start = len(out)
        if listing is None:
            listing = self.trust.listing(res.kind)
        size = [self.pacing.page_size]  # items per page, for every page of this list
        while True:  # restarted when a continue token expires mid-list
            token = ""
            version = ""
            ahead: tuple[str, asyncio.Task[bytes]] | None = None  # (its token, the request)
            try:
                data = await self.page(api, path, token, size)
                while True:
                    guess = continue_token(data)
                    if guess:
                        ahead = (guess, asyncio.create_task(self.page(api, path, guess, size)))
                    body = decode(data, path)
                    meta = body.get("metadata") or {}
                    version = version or str(meta.get("resourceVersion") or "")
                    items = body.get("items") or []
                    if not isinstance(items, list):
                        raise ValueError(f"{where}: items is not a list")
                    for i, item in enumerate(items):
                        if i % _PARSE_BATCH == _PARSE_BATCH - 1:
                            await asyncio.sleep(0)
                        record = self.parse_item(res, item, where)
                        if record is not None and listing.keep(record, where):
                            out.append(record)
                    del body, items
                    if not meta.get("continue"):
                        break
                    token = str(meta["continue"])
                    if ahead is not None and ahead[0] == token:
                        data = await ahead[1]
                    else:
                        if ahead is not None:
                            ahead[1].cancel()
                        data = await self.page(api, path, token, size)
                    ahead = None
            except ApiError as exc:
                if not (exc.expired and token):
                    raise
                log.warning("%s: continue token expired (%s); listing again", where, exc.message)
                listing.forget(out[start:])
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

    async def page(self, api: KubeApi, path: str, token: str, size: list[int]) -> bytes:
        """One list page: ``size[0]`` items from ``token`` on. A page over the byte cap (the
        trust's, if any) is asked again with half as many items (the continue token does
        not depend on the limit), down to one, and the pages after it too: a cluster of big
        objects is listed in smaller pages, and only an object over the cap is refused."""
        while True:
            limit = size[0]
            params = {"limit": str(limit), **({"continue": token} if token else {})}
            try:
                return await self.get_raw(api, path, params)
            except CapExceeded as exc:
                if limit <= 1:
                    raise CapExceeded(exc.cap, f"{exc}, with one object in it") from None
                if size[0] == limit:  # (a page asked for meanwhile may have halved it)
                    size[0] = limit // 2
                    log.debug("%s: a page of %d items over the byte cap: asking for %d",
                              path, limit, size[0])

    async def get_raw(self, api: KubeApi, path: str, params: Mapping[str, str]) -> bytes:
        return await api.get_raw(path, params, timeout=self.pacing.request_timeout,
                                 max_bytes=self.trust.page_bytes)

    async def get_json(self, api: KubeApi, path: str, params: Mapping[str, str]
                        ) -> dict[str, Any]:
        return decode(await self.get_raw(api, path, params), path)

    def parse_item(self, res: Resource, obj: Any, where: str) -> Record | None:
        if not isinstance(obj, Mapping):
            self.ignored(where, NOT_OBJECT, "a list item that is not an object")
            return None
        try:
            return res.parse(obj, where)
        except ObjectError as exc:
            self.trust.refused(where, str(exc))
            return None

    def ignored(self, where: str, reason: str, what: str) -> None:
        """A watch event or list item that means nothing: the trust tells it once per
        reason, never once per event."""
        self.trust.ignored(where, reason, what)

    async def watch(
        self,
        api: KubeApi,
        res: Resource,
        namespace: str | None,
        resource_version: str,
        gone: Callable[[Exception], Exception | None] | None = None,
        health: WatchHealth | None = None,
    ) -> None:
        """Keep one watch open forever, resuming from the last resourceVersion.

        Returns never; raises RelistNeeded when the server no longer has that version, and
        what ``gone`` makes of an error it recognises as final for this resource. With
        ``health``, a failure also reports what ``health.down`` makes of it, and the next
        stream that opens what ``health.up`` says.
        """
        where = self.where(res, "watch", namespace)
        cursor = _Cursor(resource_version)
        backoff = self.pacing.backoff(self._rng)
        loop = asyncio.get_running_loop()
        down = False
        early = False  # the server closes the streams at once: told once, till one lives
        told: set[str] = set()  # reasons of failures told, once each till a stream opens

        async def reopened() -> None:
            nonlocal down
            told.clear()
            if down:
                down = False
                assert health is not None
                await self.put(health.up(where))

        while True:
            cursor.progressed = False
            opened = loop.time()
            try:
                await self._stream(api, res, namespace, cursor, reopened)
            except asyncio.CancelledError:
                raise
            except RelistNeeded:
                self._restarted(res, "expired")
                raise
            except Exception as exc:
                if isinstance(exc, ApiError) and exc.expired:
                    self._restarted(res, "expired")
                    raise RelistNeeded(res, namespace, str(exc)) from exc
                final = gone(exc) if gone is not None else None
                reason = error_reason(exc)
                if final is not None:
                    self._restarted(res, reason)
                    raise final from exc
                self._restarted(res, reason)
                if cursor.progressed:
                    backoff.reset()
                delay = self.pacing.retry_delay(backoff, exc)
                message = (
                    f"{where} failed ({reason}): {describe_error(exc)}; resuming from "
                    f"resourceVersion {cursor.resource_version} in {delay:.1f}s"
                )
                down = health is not None
                await self.report_and_wait(exc, message, delay,
                                           health.down(where, message) if health else (),
                                           again=reason in told)
                told.add(reason)
                continue
            # The server closed the stream cleanly (timeoutSeconds): reopen at once if it
            # lived or changed something, else after a backoff (client-go's reflector).
            lived = loop.time() - opened
            delay = self.pacing.reopen_delay(backoff, cursor.progressed, lived)
            self._restarted(res, "closed-early" if delay else "closed")
            if delay and not early:
                log.warning("%s: the server closed the stream after %.1fs without a change; "
                            "reopening such streams with backoff (up to %gs; told once, "
                            "counted in dnsside_watch_restarts_total{reason=\"closed-early\"})",
                            where, lived, self.pacing.backoff_cap)
            elif not delay:
                log.info("%s: stream closed by the server; resuming from resourceVersion %s",
                         where, cursor.resource_version)
            early = bool(delay)
            if delay:
                await asyncio.sleep(delay)

    async def report_and_wait(self, exc: BaseException, message: str, delay: float,
                              also: Sequence[Event] = (), *, again: bool = False) -> None:
        """Log a failed request (a traceback only for an unexpected error), tell the index
        (``also``: what the failure means to it), back off before the retry. A failure
        ``again`` (of the same request, for a reason already told) is a state the log has
        told: a debug line (the retries are counted in a metric)."""
        if again:
            log.debug("%s", message)
        elif isinstance(exc, TRANSIENT):
            log.log(self.trust.retry_level, "%s", message)
        else:
            log.exception("%s", message)
        await self.put([SourceError(message), *also])
        await asyncio.sleep(delay)

    async def _stream(
        self,
        api: KubeApi,
        res: Resource,
        namespace: str | None,
        cursor: _Cursor,
        opened: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """One watch request, read until the server closes it; ``opened`` is awaited once
        the server accepted it."""
        where = self.where(res, "watch", namespace)
        # Jitter the server-side timeout (like client-go) so watches don't renew in step.
        seconds = max(1, round(self.pacing.watch_timeout * self._rng.uniform(1.0, 1.25)))
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": cursor.resource_version,
            "timeoutSeconds": str(seconds),
        }
        timeout = aiohttp.ClientTimeout(
            total=seconds + self.pacing.request_timeout, sock_connect=self.pacing.request_timeout
        )
        # With a time cap: the answer's head, and then each event from its first byte to
        # its last, within it (a trickle ends there); each line within the size cap.
        event_time = self.trust.time_cap
        async with asyncio.timeout(event_time):
            resp = await api.request(res.path(namespace), params, timeout)
        complete = False
        try:
            if resp.status != 200:
                async with asyncio.timeout(event_time):
                    raise await read_error(resp)
            if opened is not None:
                await opened()
            lines = WatchLines(self.trust.line_bytes)
            content = resp.content
            loop = asyncio.get_running_loop()
            began = 0.0  # when the pending line's first byte came
            while True:
                if event_time is not None and lines.pending:
                    chunk = await self._within(content, began + event_time, where)
                else:
                    chunk = await content.readany()
                if not chunk:
                    break
                was = lines.pending
                try:
                    found = lines.feed(chunk)
                except CapExceeded as exc:
                    raise CapExceeded(exc.cap, f"{where}: {exc}") from None
                if event_time is not None and lines.pending and (found or not was):
                    began = loop.time()
                if found:
                    await self._deliver(await self._decode(res, namespace, found, cursor, where),
                                        len(found))
                    began = loop.time()  # (the budget may have made the reader wait)
            tail = lines.rest()
            if tail.strip():
                await self._deliver(await self._decode(res, namespace, [tail], cursor, where))
            complete = True
        finally:
            if complete:
                resp.release()
            else:
                drop(resp)  # at once, even over TLS: nothing more of it is read

    async def _within(self, content: aiohttp.StreamReader, deadline: float, where: str
                      ) -> bytes:
        """The next chunk of a watch stream whose event must end by ``deadline``."""
        try:
            async with asyncio.timeout_at(deadline):
                return await content.readany()
        except TimeoutError:
            raise self.trust.overdue(f"{where}: a watch event still incomplete") from None

    async def _deliver(self, decoded: tuple[list[Upsert | Delete], Exception | None],
                       lines: int = 0) -> None:
        batch, error = decoded
        await self.trust.deliver(batch, lines, self.put)  # at once, or within a budget
        if error is not None:
            raise error

    async def _decode(
        self,
        res: Resource,
        namespace: str | None,
        lines: list[bytes],
        cursor: _Cursor,
        where: str,
    ) -> tuple[list[Upsert | Delete], Exception | None]:
        """Events of complete lines, and the error that ends the stream, if any.

        Events before an error are valid (the cursor already moved past them), so
        the caller delivers them first, then raises the error. A line longer than
        :data:`OFF_LOOP_BYTES` is decoded and parsed in a worker thread, one line a
        call: a 12,000-endpoint slice (1 MB) costs 40-80 ms of JSON and parsing, and a
        linked cluster re-sending such slices must not hold the event loop that long
        (the interpreter hands the loop the GIL every switch interval meanwhile).
        """
        batch: list[Upsert | Delete] = []
        for line in lines:
            if not line.strip():
                continue
            if len(line) > OFF_LOOP_BYTES:
                event, parsed = await asyncio.to_thread(load_long_event, res.parse, line, where)
            else:
                event, parsed = load_event(res.parse, line, where, parse=False)
            if isinstance(event, ValueError):
                return batch, ValueError(f"{where}: an event that is not JSON ({event})")
            try:
                self._event(res, namespace, event, cursor, where, batch, parsed)
            except (RelistNeeded, ApiError, ValueError) as exc:
                return batch, exc
        return batch, None

    def _event(self, res: Resource, namespace: str | None, event: Any, cursor: _Cursor,
               where: str, batch: list[Upsert | Delete],
               parsed: Parsed | None = None) -> None:
        if not isinstance(event, Mapping) or not isinstance(event.get("object"), Mapping):
            raise ValueError(f"{where}: a watch event without an object")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            error = ApiError.from_status(obj, 500)
            if error.expired:
                raise RelistNeeded(res, namespace, error.message or str(error))
            raise error
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            raise ValueError(f"{where}: a {printable(str(kind), 32)} event without metadata")
        version = meta.get("resourceVersion")
        ns, name = meta.get("namespace"), meta.get("name")
        change: Upsert | Delete | None = None
        if kind in ("ADDED", "MODIFIED"):
            try:
                if parsed is None:
                    record = res.parse(obj, where)
                elif isinstance(parsed, ObjectError):
                    raise parsed
                else:
                    record = parsed.record
            except ObjectError as exc:
                self.trust.refused(where, str(exc),
                                   f" ({kind} event: the previous state is kept)")
            else:
                if record is not None:
                    change = Upsert(record)
                elif isinstance(ns, str) and isinstance(name, str):  # no longer one to keep
                    change = Delete(res.kind, ns, name)
        elif kind == "DELETED":
            if isinstance(ns, str) and isinstance(name, str) and ns and name:
                change = Delete(res.kind, ns, name)
            else:
                self.ignored(where, NO_NAME, "a DELETED event without namespace/name")
        elif kind != "BOOKMARK":
            self.ignored(where, UNKNOWN_TYPE, f"an event of unknown type {kind!r}")
        if change is not None and self.trust.admits(res.kind, change, where):
            batch.append(change)
            cursor.progressed = True  # a change: the stream was worth it
        if isinstance(version, str) and version:
            cursor.resource_version = version


_PARSE_BATCH = 50  # items parsed between two turns of the event loop while listing
