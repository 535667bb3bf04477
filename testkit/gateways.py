"""A linked cluster's gateway as dnsside's prober sees it: an HTTP endpoint that answers
200 (or 503), hangs, or is gone, and the probe Services pointed at it.

`FakeGateway` runs on threads of its own, for blocking tests and benchmarks; its port is
chosen once and kept across stop/start, so a test can stop a gateway ("connection
refused") and start it again where the probe Service still points. `AsyncGateway` runs
on the caller's event loop (bench/soak.py) and records every path it answered 200 on,
the oracle of what dnsside may have seen alive.
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from testkit.serve import DEMO


class FakeGateway:
    """A gateway's probe endpoint: ``mode`` is "ok" (200), "fail" (503) or "hang"."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.mode = "ok"
        self.release = threading.Event()
        self.server: http.server.ThreadingHTTPServer | None = None
        self.hits = 0

    def start(self) -> FakeGateway:
        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                gateway.hits += 1
                if gateway.mode == "hang":
                    gateway.release.wait(30)
                    return
                self.send_response(200 if gateway.mode == "ok" else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.release.clear()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening: probes now get 'connection refused'."""
        if self.server is not None:
            self.release.set()
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def point_probes(items: list[dict[str, Any]], gateways: dict[str, FakeGateway],
                 prefix: str) -> None:
    """Each link's probe Service (``<prefix><link>``) at that link's loopback gateway."""
    for obj in items:
        name = obj["metadata"]["name"]
        if obj["kind"] == "Service" and name.startswith(prefix):
            gateway = gateways[name.removeprefix(prefix)]
            obj["spec"]["clusterIP"], obj["spec"]["clusterIPs"] = "127.0.0.1", ["127.0.0.1"]
            obj["spec"]["ports"][0]["port"] = gateway.port


def probed_demo(tmp: Path, gateways: dict[str, FakeGateway]) -> Path:
    """The demo, with each link's probe Service pointing at its loopback gateway."""
    doc = yaml.safe_load(DEMO.read_text())
    point_probes(doc["items"], gateways, "probe-")
    path = tmp / "demo-probed.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class AsyncGateway:
    """A stand-in for a linked cluster's gateway behind its probe Service: answers 200 on
    ``paths`` while alive, accepts and never answers while hung, refuses while dead.
    ``answered`` is the oracle the model needs: every path it served a 200 on."""

    def __init__(self, cluster: str, host: str, paths: Sequence[str] = ("/ready", "/live")
                 ) -> None:
        self.cluster, self.host, self.port = cluster, host, 0
        self.paths = tuple(paths)
        self.mode = "dead"
        self.answered: set[str] = set()
        self.served = 0
        self.on_request: Callable[[str], None] | None = None  # called as a request arrives
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def set_mode(self, mode: str) -> None:
        """Switch to alive, hung or dead; a killed or revived gateway drops its connections,
        as a restarted process does."""
        if mode == self.mode:
            return
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        if mode == "dead":
            if self._server is not None:
                self._server.close()
                self._server = None
        elif self._server is None:
            self._server = await self._bind()
        self.mode = mode

    async def _bind(self) -> asyncio.Server:
        # The port is ours from the first bind; a rebind right after closing can race with
        # nothing but our own sockets in TIME_WAIT (reuse_address covers that).
        for _ in range(50):
            try:
                server = await asyncio.start_server(self._handle, self.host, self.port,
                                                    reuse_address=True)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            self.port = server.sockets[0].getsockname()[1]
            return server
        raise RuntimeError(f"cannot bind gateway {self.cluster} on {self.host}:{self.port}")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            request = await reader.readline()
            if self.on_request is not None and request:
                self.on_request(self.cluster)
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            if self.mode == "hung":
                await reader.read()  # until the client gives up
                return
            parts = request.decode(errors="replace").split()
            path = parts[1] if len(parts) >= 2 else ""
            ok = path in self.paths
            body = b"ok\n" if ok else b"not found\n"
            status = b"200 OK" if ok else b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: " + str(len(body)).encode()
                         + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
            if ok and self.mode == "alive":
                self.answered.add(path)
                self.served += 1
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
