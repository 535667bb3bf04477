"""The one Kubernetes API client: connect, GET, page through lists, errors by status.

The kube source, `dnsside check` and `install`'s lookups reach the API server
only through :class:`KubeApi`, and only with GET: dnsside never writes. A
non-2xx answer (or an ERROR watch event) becomes an :class:`ApiError`, of the
subclass its status names (:class:`Forbidden`, :class:`NotFound`,
:class:`Expired`, ...), carrying the Status message and any ``Retry-After``.

Authentication (kubeconfig, exec plugins and their token
refresh, in-cluster service accounts, TLS, proxies) comes from
kubernetes-asyncio's ``ApiClient`` for the operator's own kubeconfig, and from
:class:`~dnsside.kubeapi.dataclient.DataClient` for a Link's (data only, never the
library's loader); but the requests are raw: a watch is read
line by line off the response and a list page is parsed straight into records,
so no generated model object ever holds a whole Kubernetes object.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from dnsside import __version__
from dnsside.kubeapi.caps import BYTES, ERROR_BODY_BYTES, CapExceeded
from dnsside.kubeapi.dataclient import DataClient
from dnsside.kubeapi.errors import (
    ApiError,
    Expired,
    Forbidden,
    KubeConfigError,
    NotFound,
    RefusedCredentials,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from dnsside.kubeapi.kubeconfig import load as load_client
from dnsside.kubeapi.linkcreds import MAX_SECRET_BYTES, Refused, Unusable, parse_credentials
from dnsside.model.printable import printable

log = logging.getLogger("dnsside.kube")

_client = load_client()  # kubernetes-asyncio without its generated API: see kubeapi.kubeconfig
ApiClient: Any = _client["ApiClient"]
Configuration: Any = _client["Configuration"]
ConfigException: type[Exception] = _client["ConfigException"]
load_kube_config: Any = _client["load_kube_config"]
load_incluster_config: Any = _client["load_incluster_config"]
refresh_token: Any = _client["refresh_token"]


SECRET_KUBECONFIG_KEY = "kubeconfig"  # where `linkerd multicluster link` puts a Link's
# Where a Link's kubeconfig is parsed: one thread, so that at most one parse (bounded by
# linkcreds.MAX_KUBECONFIG) competes with the event loop for the interpreter at a time,
# however many Links there are.
_KUBECONFIG_PARSER = ThreadPoolExecutor(1, thread_name_prefix="dnsside-kubeconfig")


def kubeconfig_in_secret(secret: Mapping[str, Any], key: str = SECRET_KUBECONFIG_KEY) -> str:
    """The kubeconfig a Secret holds under ``key`` (a Link's credentials), as text;
    ValueError saying what is wrong with it."""
    data = secret.get("data") or {}
    raw = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(raw, str) or not raw:
        keys = ", ".join(sorted(str(k) for k in data)) if isinstance(data, Mapping) else ""
        raise ValueError(f"it has no data key {key} (keys: {keys or 'none'})")
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"its data key {key} is not base64 of a text kubeconfig: {exc}"
                         ) from None


# How to give dnsside a configuration; `check` adds it to an error that does not say it.
KUBECONFIG_FIX = "pass --kubeconfig, set $KUBECONFIG, create ~/.kube/config, or run in a pod"


def decode(data: bytes, path: str) -> dict[str, Any]:
    """A response body that must be a JSON object; ValueError otherwise."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"GET {path}: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ValueError(f"GET {path}: expected a JSON object")
    return body


async def read_error(resp: aiohttp.ClientResponse) -> ApiError:
    """Read a failed response's Status body into an ApiError."""
    retry_after: float | None = None
    with contextlib.suppress(ValueError, TypeError):
        retry_after = float(resp.headers.get("Retry-After", ""))
    try:
        # Bounded: a Status is a few hundred bytes, and a linked cluster's API is not trusted.
        body = await read_body(resp, ERROR_BODY_BYTES, "an error body")
        status = json.loads(body)
    except (ValueError, aiohttp.ClientError, TimeoutError):
        status = None
    if isinstance(status, Mapping) and status.get("kind") == "Status":
        told = ApiError.from_status(status, resp.status)
        error = ApiError.of(resp.status, told.reason, told.message, told.retry_after)
    else:
        error = ApiError.of(resp.status, resp.reason or "", "")
    if error.retry_after is None:
        error.retry_after = retry_after
    return error


async def read_body(resp: aiohttp.ClientResponse, limit: int | None, what: str) -> bytes:
    """A response's body, read while counting: CapExceeded (``BYTES``) once it holds more
    than ``limit`` bytes (None: no limit), before any more of it is read."""
    if limit is None:
        return await resp.read()
    if resp.content_length is not None and resp.content_length > limit:
        raise CapExceeded(BYTES, f"{what} of {resp.content_length} bytes, more than {limit}")
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise CapExceeded(BYTES, f"{what} of more than {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def drop(resp: aiohttp.ClientResponse) -> None:
    """Drop a response's connection at once, unread. A TLS connection closed politely
    first waits for the server's close_notify, reading (and discarding) whatever the
    server still sends meanwhile: a hostile server would go on streaming for as long as
    the SSL shutdown timeout."""
    connection = resp.connection
    transport = connection.transport if connection is not None else None
    if transport is not None:
        transport.abort()
    resp.close()


class KubeApi:
    """An authenticated connection to one API server, for GET requests."""

    def __init__(self, client: Any, refresher: asyncio.Task[None] | None = None,
                 request_timeout: float = 60.0) -> None:
        self.client = client
        self.refresher = refresher
        self.request_timeout = request_timeout
        self.weakened: tuple[str, ...] = ()  # how TLS is weakened (--insecure-remote-tls)

    @property
    def host(self) -> str:
        return str(self.client.configuration.host)

    @classmethod
    async def connect(cls, kubeconfig: str | None = None,
                      request_timeout: float = 60.0) -> KubeApi:
        """A client for ``kubeconfig``, $KUBECONFIG, ~/.kube/config or the pod's account."""
        config = Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG") or ""
        default = Path.home() / ".kube" / "config"
        if not path and default.is_file():
            path = str(default)
        loader: Any = None
        if path and not any(Path(p).is_file() for p in path.split(os.pathsep) if p):
            # (kubectl skips the missing files of a list; none at all is a mistake)
            where = "--kubeconfig" if kubeconfig else "$KUBECONFIG"
            raise KubeConfigError(f"{where} names {path}, which is no readable file")
        try:
            if path:
                loader = await load_kube_config(
                    config_file=path, client_configuration=config, persist_config=False
                )
                log.info("using kubeconfig %s: API server %s", path, config.host)
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                load_incluster_config(client_configuration=config)
                log.info("using the in-cluster service account: API server %s", config.host)
            else:
                raise KubeConfigError(f"no Kubernetes configuration: {KUBECONFIG_FIX}")
        except (ConfigException, OSError, ValueError, KeyError) as exc:
            raise KubeConfigError(f"{path or 'in-cluster config'}: {exc}") from exc
        return cls.of(config, loader, request_timeout)

    @classmethod
    async def from_kubeconfig_text(cls, text: str | bytes, where: str,
                                   request_timeout: float = 60.0,
                                   insecure_tls: bool = False) -> KubeApi:
        """A client for a Link's kubeconfig (its credentials Secret), read as data only:
        kubernetes-asyncio's loader never sees it (:mod:`dnsside.kubeapi.linkcreds` says
        why). ``insecure_tls`` (``--insecure-remote-tls``) allows insecure-skip-tls-verify,
        http:// and proxy-url; :attr:`weakened` then says which. KubeConfigError (a
        :class:`RefusedCredentials` naming the field) names ``where`` and what is wrong."""
        loop = asyncio.get_running_loop()
        try:
            # Off the event loop: a large or crafted kubeconfig must not stall DNS and the
            # probes while it is read (the size cap bounds the thread's work).
            creds = await loop.run_in_executor(
                _KUBECONFIG_PARSER, partial(parse_credentials, text, insecure_tls))
            client = DataClient(creds, f"dnsside/{__version__}")
        except Refused as exc:
            raise RefusedCredentials(f"{where}: {exc}", exc.field) from None
        except Unusable as exc:
            raise KubeConfigError(f"{where}: {exc}") from None
        api = cls(client, None, request_timeout)
        api.weakened = creds.weakened
        return api

    @classmethod
    def of(cls, config: Any, loader: Any, request_timeout: float) -> KubeApi:
        """The client of a loaded configuration; exec-plugin and GCP tokens kept fresh."""
        client = ApiClient(configuration=config)
        client.user_agent = f"dnsside/{__version__}"
        refresher = None
        user = getattr(loader, "_user", None) or {}
        if getattr(loader, "provider", None) == "gcp" or "exec" in user:
            refresher = asyncio.create_task(_keep_token_fresh(loader, config))
        return cls(client, refresher, request_timeout)

    async def close(self) -> None:
        if self.refresher is not None:
            self.refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.refresher
        await self.client.close()

    async def request(
        self, path: str, params: Mapping[str, str], timeout: aiohttp.ClientTimeout,
        user: str | None = None,
    ) -> aiohttp.ClientResponse:
        """A raw GET (auth, TLS, proxy); the caller reads and releases the body. ``user``
        impersonates (``dnsside check --as``)."""
        headers = {"Accept": "application/json"}
        if user:
            headers["Impersonate-User"] = user
        resp = await self.client.call_api(
            path,
            "GET",
            query_params=list(params.items()),
            header_params=headers,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        assert isinstance(resp, aiohttp.ClientResponse)
        return resp

    async def get_raw(self, path: str, params: Mapping[str, str] | None = None,
                      user: str | None = None, timeout: float | None = None,
                      max_bytes: int | None = None) -> bytes:
        """The body of a 200 answer; ApiError for any other status. With ``max_bytes``,
        a longer body is not read on: CapExceeded."""
        limit = aiohttp.ClientTimeout(total=timeout or self.request_timeout)
        resp = await self.request(path, params or {}, limit, user)
        complete = False
        try:
            if resp.status != 200:
                raise await read_error(resp)
            body = await read_body(resp, max_bytes, f"GET {path}: a body")
            complete = True
            return body
        finally:
            if complete or max_bytes is None:
                resp.release()
            else:
                drop(resp)  # the rest of the body is not wanted: drop the connection

    async def get_json(self, path: str, params: Mapping[str, str] | None = None,
                       user: str | None = None, timeout: float | None = None,
                       max_bytes: int | None = None) -> dict[str, Any]:
        return decode(await self.get_raw(path, params, user, timeout, max_bytes), path)

    async def get_link_secret(self, path: str, user: str | None = None) -> dict[str, Any]:
        """A Link's credentials Secret, read with a byte cap (linkcreds.MAX_SECRET_BYTES):
        whoever writes it is not trusted, and a Secret may be 1.5 MiB in etcd (more on an
        API server that does not check). CapExceeded as soon as the body passes it; the
        rest is never read."""
        return await self.get_json(path, user=user, max_bytes=MAX_SECRET_BYTES)

    async def list_all(self, path: str, selector: str = "", page: int = 500,
                       timeout: float | None = None) -> list[dict[str, Any]]:
        """Every item of a list, page by page (``limit``/``continue``)."""
        items: list[dict[str, Any]] = []
        params = {"limit": str(page)}
        if selector:
            params["labelSelector"] = selector
        while True:
            body = await self.get_json(path, params, timeout=timeout)
            items.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items
            params["continue"] = str(token)


# Errors a list or watch recovers from by retrying (anything else is a bug, and is
# retried too, but logged with a traceback).
TRANSIENT = (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError)


# The HTTP statuses an API server answers a watch or a list with, by name in the restarts
# metric's reason; any other (a watch ERROR event's code is whatever its server wrote) is
# folded into its class, so a linked cluster cannot add series.
_KNOWN_STATUSES = frozenset({400, 401, 403, 404, 405, 406, 409, 410, 413, 422, 429,
                             500, 501, 502, 503, 504})


def error_reason(exc: BaseException) -> str:
    """A short, low-cardinality reason for logs and the restarts metric (a fixed set)."""
    if isinstance(exc, ApiError):
        if exc.status in _KNOWN_STATUSES:
            return f"http-{exc.status}"
        return "http-4xx" if 400 <= exc.status < 500 else (
            "http-5xx" if 500 <= exc.status < 600 else "http-other")
    if isinstance(exc, CapExceeded):
        return "capped"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)):
        return "dropped"
    if isinstance(exc, (aiohttp.ClientConnectionError, OSError)):
        return "connection"
    if isinstance(exc, ValueError):
        return "bad-response"
    return "error"


def describe_error(exc: BaseException) -> str:
    """An error as a log line or a state's detail says it: escaped (a TLS error, a
    connection error or an API's Status carries text the server chose)."""
    text = str(exc) or type(exc).__name__
    return printable(text if isinstance(exc, ApiError) else f"{type(exc).__name__}: {text}",
                     1024)


class WatchLines:
    """Complete lines out of a watch stream's chunks, copying as little as possible.

    The API server flushes each event as it is written, so a chunk nearly always ends
    on a line: it is handed on as is when it holds one event (``json.loads`` ignores the
    newline) and split once when it holds several. Only a line cut by a chunk boundary
    is kept, as its pieces, joined once when its end arrives. (A growing bytearray with
    two copies of every chunk was transient garbage in odd sizes at every event: heap
    fragmentation under churn.)

    With ``limit`` (a linked cluster's stream), a line longer than ``limit`` bytes is
    refused (CapExceeded) as soon as that many of it have arrived: the pieces of a line
    without its end are all that is ever held.
    """

    __slots__ = ("_parts", "_size", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self._parts: list[bytes] = []
        self._size = 0  # bytes in _parts (counted only with a limit)
        self.limit = limit

    @property
    def pending(self) -> bool:
        """A line has begun and not ended."""
        return bool(self._parts)

    def feed(self, chunk: bytes) -> list[bytes]:
        end = chunk.rfind(b"\n")
        if end < 0:
            if chunk:
                self._parts.append(chunk)
                if self.limit is not None:
                    self._size += len(chunk)
                    self._refuse(self._size)
            return []
        if self._parts:
            self._parts.append(chunk)
            chunk = b"".join(self._parts)
            self._parts.clear()
            self._size = 0
            end = chunk.rfind(b"\n")
        if end == len(chunk) - 1 and chunk.find(b"\n") == end:
            if self.limit is not None:
                self._refuse(len(chunk) - 1)
            return [chunk]
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if self.limit is not None:
            self._refuse(max(len(line) for line in lines))
            self._size = len(rest)
            self._refuse(self._size)
        if rest:
            self._parts.append(rest)
        return lines

    def _refuse(self, size: int) -> None:
        assert self.limit is not None
        if size > self.limit:
            self._parts.clear()
            self._size = 0
            raise CapExceeded(BYTES, f"a watch event of more than {self.limit} bytes")

    def rest(self) -> bytes:
        """What is left without a newline (a stream that ended mid-line)."""
        return b"".join(self._parts)


_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"\\]+)"')


def continue_token(data: bytes) -> str:
    """The continue token of a raw list page, guessed from its first bytes (the API
    server writes ``metadata`` before ``items``); "" when none is seen. Only a guess:
    the caller checks it against the decoded page."""
    found = _CONTINUE.search(data, 0, 4096)
    return found.group(1).decode("ascii", "replace") if found else ""


async def _keep_token_fresh(loader: Any, config: Any) -> None:
    """Keep exec-plugin / GCP tokens fresh for as long as the client lives."""
    while True:
        try:
            await refresh_token(loader, config)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("refreshing the kubeconfig credentials failed: %s", exc)
            await asyncio.sleep(60)


__all__ = [
    "KUBECONFIG_FIX",
    "MAX_SECRET_BYTES",
    "SECRET_KUBECONFIG_KEY",
    "TRANSIENT",
    "ApiError",
    "CapExceeded",
    "Expired",
    "Forbidden",
    "KubeApi",
    "KubeConfigError",
    "NotFound",
    "RefusedCredentials",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "WatchLines",
    "continue_token",
    "decode",
    "describe_error",
    "drop",
    "error_reason",
    "kubeconfig_in_secret",
    "read_body",
    "read_error",
]
