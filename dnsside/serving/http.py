"""`/metrics`, `/healthz`, `/readyz` and `/debug/explain` over a deliberately tiny HTTP/1.1.

Four GET routes for Prometheus and the kubelet do not justify a web framework
at run time: this reads one request line and its headers (bounded in size and
time), answers, and closes the connection.

The listener is meant to be reachable by Prometheus and the kubelet from the pod
network, but ``/debug/explain`` says more than DNS does (the objects behind each
member, the Secret a linked cluster's credentials come from, why a cluster
failed): it answers only clients in ``--explain-from``, loopback by default, which
is where ``kubectl port-forward`` connects from (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dnsside.config import IPNetwork, allowed_peer
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.http")

Explain = Callable[[str, str], dict[str, object]]
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 503: "Service Unavailable"}


class HttpServer:
    def __init__(self, not_ready_because: Callable[[], str | None], explain: Explain | None = None,
                 explain_from: Sequence[IPNetwork] = ()) -> None:
        self.not_ready_because = not_ready_because
        self.explain = explain
        self.explain_from = tuple(explain_from)  # empty: nobody may read /debug/explain

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            peer = writer.get_extra_info("peername")
            host = peer[0] if isinstance(peer, tuple) and peer else ""
            status, ctype, body = self.route(head, allowed_peer(host, self.explain_from))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            writer.close()
            return
        writer.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

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
