"""`/metrics`, `/healthz`, `/readyz` and `/debug/explain` over a deliberately tiny HTTP/1.1.

Four GET routes for Prometheus and the kubelet do not justify a web framework
at run time: this reads one request line and its headers (bounded in size and
time), answers (the write bounded in time too), and closes the connection.

Connections are capped per client and in all (``--http-max-connections-per-client``,
``--http-max-connections``, :mod:`dnsside.serving.caps`): a full cap closes the
oldest connection of that client, or of the client holding the most, never the new
one, so idle connections cannot keep the kubelet's probe out nor run dnsside out of
file descriptors (issue 33: 1,300 of them did, and DNS over TCP was reset).

The listener is meant to be reachable by Prometheus and the kubelet from the pod
network, but ``/debug/explain`` says more than DNS does (the objects behind each
member, the Secret a linked cluster's credentials come from, why a cluster
failed): it answers only clients in ``--explain-from``, loopback by default, which
is where ``kubectl port-forward`` connects from (docs/security.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import cast
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dnsside.netvalues import IPNetwork, allowed_peer
from dnsside.serving.caps import ConnectionCaps
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.http")

Explain = Callable[[str, str], dict[str, object]]
_HEAD_SECONDS = 5.0  # to send the request head
_WRITE_SECONDS = 10.0  # to take the answer (/metrics is the large one)
_MAX_HEAD = 64 * 1024  # bytes of a request head
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 503: "Service Unavailable"}


class HttpServer:
    def __init__(self, not_ready_because: Callable[[], str | None], explain: Explain | None = None,
                 explain_from: Sequence[IPNetwork] = (), max_connections: int = 128,
                 max_per_client: int = 16) -> None:
        self.not_ready_because = not_ready_because
        self.explain = explain
        self.explain_from = tuple(explain_from)  # empty: nobody may read /debug/explain
        self.caps = ConnectionCaps("http", max_connections, max_per_client,
                                   "--http-max-connections",
                                   "--http-max-connections-per-client")

    def protocol(self) -> HttpConnection:
        """A new connection (``loop.create_server``'s factory)."""
        return HttpConnection(self)

    def route(self, head: bytes, may_explain: bool = False) -> tuple[int, str, bytes]:
        """The answer to one request head; ``may_explain``: the client is in
        ``--explain-from``."""
        try:
            method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        except ValueError:
            return 400, "text/plain", b"bad request\n"
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET\n"
        url = urlsplit(target)
        if url.path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(metrics.REGISTRY)
        if url.path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if url.path == "/readyz":
            why = self.not_ready_because()
            if why is None:
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", f"not ready: {why}\n".encode()
        if url.path == "/debug/explain" and self.explain is not None:
            if not may_explain:
                return 403, "text/plain", (
                    b"/debug/explain is served only to --explain-from (default loopback: "
                    b"kubectl port-forward, or `dnsside explain` in the pod)\n")
            query = parse_qs(url.query)
            name = query.get("name", [""])[0]
            if not name:
                return 400, "text/plain", b"name= is required\n"
            report = self.explain(name, query.get("type", ["A"])[0])
            return 200, "application/json", json.dumps(report, indent=2).encode() + b"\n"
        return 404, "text/plain", b"not found\n"


class HttpConnection(asyncio.Protocol):
    """One request: its head read (at most ``_MAX_HEAD`` bytes, within ``_HEAD_SECONDS``),
    answered, the connection closed once the answer has gone (within ``_WRITE_SECONDS``).

    A protocol, not a stream and a task: a client that re-opens every connection its cap
    closes keeps its connections queued in the listen backlog, ahead of the kubelet's
    probe, and each one costs the event loop what accepting and closing it costs; here
    that is a few microseconds."""

    busy = False  # (the caps) any HTTP connection may be closed for a newcomer

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.head = bytearray()
        self.transport: asyncio.Transport | None = None
        self.host = ""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.server.caps.admit(self, self.host)
        self.timer = asyncio.get_running_loop().call_later(_HEAD_SECONDS, self.abort)

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > _MAX_HEAD:
                self.abort()
            return
        self.transport.pause_reading()
        server = self.server
        status, ctype, body = server.route(bytes(self.head[: end + 4]),
                                           allowed_peer(self.host, server.explain_from))
        self.transport.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        if self.timer is not None:
            self.timer.cancel()
        # close() flushes first; a client that does not read is aborted after the timeout
        self.timer = asyncio.get_running_loop().call_later(_WRITE_SECONDS, self.abort)
        self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.server.caps.release(self)
