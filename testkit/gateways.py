"""A linked cluster's gateway as dnsside's prober sees it: an HTTP endpoint on 127.0.0.1
that answers 200 (or 503), hangs, or is gone, and the probe Services pointed at it.

The port is chosen once and kept across stop/start, so a test can stop a gateway
("connection refused") and start it again where the probe Service still points.
"""

from __future__ import annotations

import http.server
import socket
import threading
from typing import Any


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
            def do_GET(self) -> None:  # noqa: N802
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
