"""DNS over UDP and TCP: these classes only move bytes to and from :class:`Responder`.

TCP follows RFC 7766: two-byte length framing, any number of queries per
connection (answered in order as they complete), an idle timeout, and a cap on
concurrent connections. The tricky part is slowloris: the idle timer is reset
only when a *complete* message has been answered, never by a stray byte, so a
client that trickles a length prefix or half a message loses its slot after
one idle timeout no matter how it paces itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

from dnsside import metrics
from dnsside.dns import Responder

log = logging.getLogger("dnsside.server")
query_log = logging.getLogger("dnsside.query")

_SAMPLE_MASK = 63  # observe latency on one UDP query in 64


class UdpServer(asyncio.DatagramProtocol):
    def __init__(self, responder: Responder, log_queries: bool = False) -> None:
        self.respond = responder.respond
        self.log_queries = log_queries
        self.transport: asyncio.DatagramTransport | None = None
        self._n = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's, hence cast, not isinstance.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self._n += 1
        if self._n & _SAMPLE_MASK and not self.log_queries:
            reply = self.respond(data)
            if reply is not None and self.transport is not None:
                self.transport.sendto(reply, addr)
            return
        started = time.perf_counter()
        reply = self.respond(data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)
        metrics.ANSWER_SECONDS.labels(transport="udp").observe(time.perf_counter() - started)
        if self.log_queries:
            _log_query("udp", addr, data, reply)

    def error_received(self, exc: Exception) -> None:
        log.debug("udp socket error: %s", exc)


class TcpConnections:
    """Shared state of all TCP connections: the cap, the idle timeout, the open set."""

    def __init__(
        self, responder: Responder, idle_timeout: float = 10.0, max_connections: int = 512,
        log_queries: bool = False,
    ) -> None:
        self.responder = responder
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.log_queries = log_queries
        self.open: set[TcpConnection] = set()

    def protocol(self) -> TcpConnection:
        return TcpConnection(self)

    async def close_all(self, grace: float) -> None:
        """Let every connection flush what it has answered, then close; give up after grace."""
        for conn in list(self.open):
            conn.close()
        deadline = time.monotonic() + grace
        while self.open and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.open):
            conn.abort()


class TcpConnection(asyncio.Protocol):
    def __init__(self, shared: TcpConnections) -> None:
        self.shared = shared
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.peer: tuple[str | int, ...] = ()
        self.paused = False  # the client is not reading its answers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if len(self.shared.open) >= self.shared.max_connections:
            metrics.DROPPED.labels(reason="tcp_connection_cap").inc()
            self.transport.abort()
            return
        self.peer = transport.get_extra_info("peername") or ()
        self.shared.open.add(self)
        self._arm()

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.shared.idle_timeout, self._expire)

    def _expire(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._answer_buffered()

    def _answer_buffered(self) -> None:
        buf = self.buffer
        answered = False
        while len(buf) >= 2 and not self.paused:
            size = buf[0] << 8 | buf[1]
            if len(buf) < 2 + size:
                break
            message = bytes(buf[2 : 2 + size])
            del buf[: 2 + size]
            reply = self.shared.responder.respond(message, udp=False)
            answered = True
            if self.shared.log_queries:
                _log_query("tcp", self.peer, message, reply)
            if reply is not None and self.transport is not None:
                self.transport.write(len(reply).to_bytes(2, "big") + reply)
        if answered:
            self._arm()

    # Flow control: a client that pipelines queries but does not read its answers would
    # make us buffer replies without bound. When the transport's write buffer is full,
    # stop reading (and answering) until it drains; nothing re-arms the idle timer
    # meanwhile, so a client that never reads loses its connection after the timeout.
    # Reading is paused, so the query buffer holds at most one read's worth.

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None:
            self.transport.resume_reading()
        self._answer_buffered()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.shared.open.discard(self)


def _log_query(
    transport: str, peer: tuple[str | int, ...], query: bytes, reply: bytes | None
) -> None:
    from dnslib import QTYPE, RCODE, DNSError, DNSRecord  # --query-log only

    try:
        q = DNSRecord.parse(query).q
        what = f"{q.qname} {QTYPE.get(q.qtype)}"
    except (DNSError, ValueError, IndexError):
        what = f"<{len(query)} undecodable bytes>"
    rcode = "dropped" if reply is None else RCODE.get(reply[3] & 0xF)
    query_log.info("%s %s %s rcode=%s size=%d", transport, peer[0] if peer else "?", what, rcode,
                   len(reply or b""))
