"""DNS over UDP and TCP: these classes only move bytes to and from :class:`Responder`.

TCP follows RFC 7766: two-byte length framing, any number of queries per
connection (answered in order as they complete), an idle timeout, and caps on
concurrent connections, per client and in all (:mod:`dnsside.serving.caps`: a full cap
closes the quietest connection, of that client or of the client holding the most, never
the newcomer). Against slowloris, the idle timer is reset only when a *complete*
message has been answered, never by a stray byte, so a client that trickles a length
prefix or half a message loses its slot after one idle timeout no matter how it paces
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from typing import cast

from dnsside.dns.responder import Responder
from dnsside.dns.transfer import looks_like_transfer
from dnsside.serving import mmsg
from dnsside.serving.caps import ConnectionCaps
from dnsside.serving.pacing import SHARING
from dnsside.serving.transfer import Transfer, Transfers
from dnsside.telemetry import metrics
from dnsside.telemetry.udp import UdpCollector

log = logging.getLogger("dnsside.server")
query_log = logging.getLogger("dnsside.query")

_SAMPLE_MASK = 63  # observe latency on one UDP query in 64
_MAX_DATAGRAM = 65535
_RCVBUF = 4 << 20  # asked for; the kernel caps it at net.core.rmem_max


UDP_IO_MODES = ("batch", "plain")


class UdpServer:
    """UDP in a thread of its own: receive, :meth:`Responder.respond`, send; nothing else.

    Two ways to move the datagrams, the same answers (``--udp-io``):

    * ``batch`` (the default where it works, see :mod:`dnsside.serving.mmsg`): one
      ``recvmmsg`` takes every query waiting in the socket (blocking for the first
      only), the responder answers each into its buffer, one ``sendmmsg`` sends the
      lot. Under load the two system calls are shared by the whole batch; at a
      trickle every wakeup brings one query and a short path answers it.
    * ``plain``: a blocking ``recvfrom`` and a ``sendto`` per datagram, the fallback
      where batching is not available.

    Either way there is no event-loop machinery: an event loop also pays an
    ``epoll_wait`` and a ``recvfrom`` that fails with EAGAIN per wakeup.

    The responder's tables are shared with the event loop thread, which applies
    index updates: every lookup is one dict operation and the index inserts new
    answers before removing old ones, so under the GIL a query sees the old answer
    or the new one, never a gap. The receive buffer is raised so a burst, or the
    GIL held by a large index update, queues in the kernel instead of being lost.
    """

    def __init__(self, sock: socket.socket, responder: Responder,
                 log_queries: bool = False, io: str = "batch") -> None:
        if io not in UDP_IO_MODES:
            raise ValueError(f"--udp-io {io!r}: expected one of {', '.join(UDP_IO_MODES)}")
        sock.setblocking(True)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        self.sock = sock
        self.respond = responder.respond
        self.log_queries = log_queries
        self._closing = False
        self._thread: threading.Thread | None = None
        self._batch = mmsg.open_batch(sock) if io == "batch" else None
        #: what this server really does: "batch" falls back to "plain"
        self.io = io if self._batch is not None else "plain"
        if io == "batch" and self._batch is None:
            log.warning("udp: recvmmsg/sendmmsg not available here, using recvfrom/sendto")
        #: system calls that received datagrams, and the datagrams they received
        #: (published at least every 64 queries, and when the thread stops)
        self.receive_calls = 0
        self.received = 0

    def start(self) -> None:
        _COLLECTOR.add(self)
        target = self._serve_plain if self._batch is None else self._serve_batch
        self._thread = threading.Thread(target=target, name="dnsside-udp", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop answering: wake the thread out of its receive, wait for it, close."""
        self._closing = True
        with contextlib.suppress(OSError):  # ENOTCONN on Linux, but it wakes the reader
            self.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        _COLLECTOR.discard(self)
        if self._batch is not None and self._thread is not None and self._thread.is_alive():
            # Stuck (the GIL held by a huge index update?): the thread still has the fd
            # number, which a closed socket would hand to the next socket opened. It is a
            # daemon thread and the process is stopping; leave both alone.
            log.warning("udp thread did not stop within 2 s")
            return
        self.sock.close()
        if self._batch is not None:
            self._batch.release()
            self._batch = None

    def _serve_batch(self) -> None:
        io = self._batch
        assert io is not None
        recvmmsg, sendmmsg, fd, recv_headers, send_headers, batch = (
            io.recvmmsg, io.sendmmsg, io.fd, io.recv_headers, io.send_headers, io.batch)
        mem, lengths, reply_lengths, slots = io.mem, io.lengths, io.reply_lengths, io.slots
        respond, log_queries = self.respond, self.log_queries
        first_start, first_len, _ = slots[0]
        wait_for_one, slot_size, clock = mmsg.MSG_WAITFORONE, mmsg.SLOT, time.perf_counter
        latency = metrics.ANSWER_SECONDS.labels(transport="udp")
        # Datagrams received; below ``next_sample`` a lone query takes the short path
        # (at a trickle every wakeup brings one query, and then the cost of a query is
        # mostly the wakeup's: every bytecode saved there counts). Past ``next_sample``
        # one batch is timed and the counters are published, so both are at most 64
        # queries behind.
        calls = received = next_sample = 0  # the first batch is timed
        try:
            while True:
                got = recvmmsg(fd, recv_headers, batch, wait_for_one, None)
                if self._closing:
                    return
                if got == 1 and received < next_sample:
                    calls += 1
                    received += 1
                    try:
                        reply = respond(mem[first_start : first_start + lengths[first_len]])
                        if reply is not None:
                            size = len(reply)
                            mem[first_start : first_start + size] = reply
                            reply_lengths[1] = size
                            if sendmmsg(fd, send_headers, 1, 0) != 1:
                                io.send(1)  # logs why and gives up on this reply
                    except Exception:  # never let one datagram stop UDP service
                        log.exception("error answering a udp query from %s", io.peer(0)[0])
                    continue
                if got <= 0:
                    if got < 0:  # e.g. an ICMP error queued on the socket, or EINTR
                        log.debug("udp socket error: %s", os.strerror(io.last_errno()))
                    continue
                calls += 1
                received += got
                sample = received > next_sample
                if sample:
                    self.receive_calls, self.received = calls, received
                    started = clock()
                out = 0  # replies to send: those with one move up to close the gaps
                for i in range(got):
                    start, len_at, iov_at = slots[i]
                    try:
                        query = mem[start : start + lengths[len_at]]
                        reply = respond(query)
                        if log_queries:
                            _log_query("udp", io.peer(i), query, reply)
                        if reply is None:
                            continue
                        size = len(reply)
                        if size > slot_size:  # never from respond(): UDP stops at 65,535
                            continue
                        mem[start : start + size] = reply  # over the query, in its slot
                        reply_lengths[iov_at] = size
                    except Exception:  # never let one datagram stop UDP service
                        log.exception("error answering a udp query from %s", io.peer(i)[0])
                        continue
                    if out != i:
                        io.move(i, out)
                    out += 1
                if out:
                    sent = sendmmsg(fd, send_headers, out, 0)
                    if sent != out:  # a reply that could not be sent: skip it, send the rest
                        io.send(out, max(sent, 0))
                if out != got:
                    io.reset()
                if sample:
                    latency.observe(clock() - started)
                    # --query-log: every batch is timed, as every query is in plain mode
                    next_sample = received if log_queries else received + _SAMPLE_MASK
        finally:
            self.receive_calls, self.received = calls, received

    def _serve_plain(self) -> None:
        recvfrom, sendto, respond = self.sock.recvfrom, self.sock.sendto, self.respond
        n = 0
        try:
            while True:
                try:
                    data, addr = recvfrom(_MAX_DATAGRAM)
                except OSError as exc:  # e.g. an ICMP error queued on the socket
                    if self._closing:
                        return
                    log.debug("udp socket error: %s", exc)
                    continue
                if self._closing:
                    return
                n += 1
                try:
                    if n & _SAMPLE_MASK and not self.log_queries:
                        reply = respond(data)
                        if reply is not None:
                            sendto(reply, addr)
                        continue
                    started = time.perf_counter()
                    reply = respond(data)
                    if reply is not None:
                        sendto(reply, addr)
                    metrics.ANSWER_SECONDS.labels(transport="udp").observe(
                        time.perf_counter() - started)
                    if self.log_queries:
                        _log_query("udp", addr, data, reply)
                except OSError as exc:  # the reply could not be sent (unreachable, EPERM...)
                    log.debug("udp send to %s failed: %s", addr[0], exc)
                except Exception:  # never let one datagram stop UDP service
                    log.exception("error answering a udp query from %s", addr[0])
                self.receive_calls = self.received = n  # every 64 queries
        finally:
            self.receive_calls = self.received = n


_COLLECTOR = UdpCollector(UDP_IO_MODES)  # every UdpServer adds itself while it runs
# Every TCP query is timed (TCP is the rare transport: a truncated answer's retry, AXFR
# attempts, resolvers that prefer it), from the read of its message to the write.
_TCP_LATENCY = metrics.ANSWER_SECONDS.labels(transport="tcp")


# Bytes of a zone transfer written in one go before other queries get their turn.
TRANSFER_SLICE = 256 * 1024
# The kernel's send buffer of a connection that takes a transfer (Linux doubles it): what
# a client that does not read makes us pack before we stop (autotuned, the kernel would
# take 4 MiB, about 60 messages, every time one asks and hangs up). Enough for 100 MB/s
# at a 2 ms round trip.
TRANSFER_SNDBUF = 128 * 1024


class TcpConnections:
    """Shared state of all TCP connections: the caps, the idle timeout, the open set."""

    def __init__(
        self, responder: Responder, idle_timeout: float = 10.0, max_connections: int = 512,
        log_queries: bool = False, transfers: Transfers | None = None,
        max_per_client: int = 64,
    ) -> None:
        self.responder = responder
        # Zone transfers (AXFR, IXFR): several replies to one query; nobody may by default.
        self.transfers = transfers if transfers is not None else Transfers(responder)
        self.idle_timeout = idle_timeout
        self.caps = ConnectionCaps("tcp", max_connections, max_per_client,
                                   "--tcp-max-connections", "--tcp-max-connections-per-client")
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
        self.client = ""  # the peer as the caps count it (an IPv4 address, an IPv6 /64)
        self.paused = False  # the client is not reading its answers
        # A zone transfer being sent: its messages, made as they go (queries behind it
        # wait their turn, as they would behind any answer).
        self.sending: Transfer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername") or ()
        self.client = self.shared.caps.admit(self, str(self.peer[0]) if self.peer else "")
        self.shared.open.add(self)
        self._arm()

    @property
    def busy(self) -> bool:
        """Sending a zone transfer: not idle, so not closed for a newcomer (the caps)."""
        return self.sending is not None

    def _arm(self) -> None:
        """Activity: the idle timer starts again, and this is the client's last connection
        to be closed for a new one."""
        self.shared.caps.touch(self)
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
        while len(buf) >= 2 and not self.paused and self.sending is None:
            size = buf[0] << 8 | buf[1]
            if len(buf) < 2 + size:
                break
            message = bytes(buf[2 : 2 + size])
            del buf[: 2 + size]
            started = time.perf_counter()
            transfer = looks_like_transfer(message)
            if transfer:
                # The UDP thread gets the GIL sooner from here on (serving.pacing): a
                # version's records are taken now, the first time a tenth of a second.
                SHARING.enter()
            replies = self.shared.transfers.answer(
                message, str(self.peer[0]) if self.peer else "", self.client)
            if transfer != replies.streamed:  # a sent transfer leaves when it is done
                (SHARING.leave if transfer else SHARING.enter)()
            answered = True
            if not replies.streamed:  # one reply (or none): written at once
                reply = replies.only()
                if self.shared.log_queries:
                    _log_query("tcp", self.peer, message, reply)
                if reply is not None and self.transport is not None:
                    self.transport.write(len(reply).to_bytes(2, "big") + reply)
                _TCP_LATENCY.observe(time.perf_counter() - started)
            else:
                self.sending = replies
                if self.transport is not None:
                    # One message in flight: the protocol is paused as soon as the kernel
                    # does not take a whole message, and the next one is packed only once
                    # it has (a client that does not read costs one message, not the zone).
                    self.transport.set_write_buffer_limits(high=0)
                    sock = self.transport.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TRANSFER_SNDBUF)
                self._send_some()
        if answered:
            self._arm()

    def _send_some(self) -> None:
        """Write the transfer's next messages, about ``TRANSFER_SLICE`` bytes, then let the
        event loop answer other queries before the next slice; stop as soon as the socket
        does not take a whole message (:meth:`resume_writing` goes on once it has). Each
        slice it takes re-arms the idle timer: a client slowly reading a large zone is not
        idle."""
        sending, transport = self.sending, self.transport
        if sending is None or transport is None or self.paused:
            return
        written = 0
        for reply in sending:
            transport.write(len(reply).to_bytes(2, "big") + reply)
            written += len(reply)
            if written >= TRANSFER_SLICE or self.paused:
                self._arm()
                if not self.paused:
                    asyncio.get_running_loop().call_soon(self._send_some)
                return
        self.sending = None
        SHARING.leave()
        transport.set_write_buffer_limits()  # the usual flow control again (below)
        self._arm()
        self._answer_buffered()  # queries that came in behind the transfer

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
        if self.sending is not None:
            self._send_some()
        else:
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
        if self.sending is not None:
            sending, self.sending = self.sending, None
            sending.close()  # the transfer's log line says it was cut short
            SHARING.leave()
        self.shared.open.discard(self)
        self.shared.caps.release(self)


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
