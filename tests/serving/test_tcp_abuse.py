"""TCP abuse: hundreds of idle and half-sent connections, connections past the cap, and a
client that never reads; UDP must keep answering throughout and TCP must recover.

Closure is detected with select() and recv() against deadlines, never with sleeps.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import pytest

from testkit.rawdns import SRV, Tcp, parse, query, udp
from testkit.serve import DEMO, Dnsside, answers, wait_for

NGINX = "nginx-svc.default.svc-global"
NGINX_A = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]


def server(*flags: str) -> Dnsside:
    return Dnsside("--source", str(DEMO), "--cluster-name", "east", *flags)


def junk_connections(s: Dnsside, n: int) -> list[socket.socket]:
    """``n`` connections: a third silent, a third half a length prefix, a third half a message."""
    socks = []
    for i in range(n):
        sock = socket.create_connection((s.host, s.port), timeout=5)
        try:
            if i % 3 == 1:
                sock.sendall(b"\x00")
            elif i % 3 == 2:
                sock.sendall(struct.pack("!H", 60) + query(NGINX)[:20])
        except (BrokenPipeError, ConnectionResetError):
            pass  # already closed by the server (past the cap): counted below
        socks.append(sock)
    return socks


_ESTABLISHED = 1


def closed(sock: socket.socket) -> bool:
    """Has the server closed this connection (FIN or RST)? Reads nothing, never blocks:
    the kernel's TCP state of our end (Linux TCP_INFO), unread answers or not."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _ESTABLISHED


def udp_answers(s: Dnsside, count: int) -> None:
    for i in range(count):
        reply = udp(s.host, s.port, query(NGINX, qid=i), timeout=3)
        assert reply is not None, f"UDP query {i} unanswered"
        assert reply[:2] == struct.pack("!H", i) and answers(parse(reply)) == NGINX_A


def tcp_served(s: Dnsside) -> bool:
    try:
        with Tcp(s.host, s.port) as conn:
            reply = conn.exchange(query(NGINX))
            return reply is not None and answers(parse(reply)) == NGINX_A
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        return False


@pytest.fixture
def socks() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def test_hundreds_of_idle_and_half_sent_connections(socks: list[socket.socket]) -> None:
    """300 junk connections under a high cap: UDP and new TCP clients are served meanwhile,
    and every junk connection is closed once the idle timeout passes."""
    with server("--tcp-max-connections", "1000", "--tcp-idle-timeout", "2") as s:
        socks += junk_connections(s, 300)
        udp_answers(s, 300)
        assert tcp_served(s)
        wait_for(lambda: all(closed(x) for x in socks), 30, "every junk connection closed")
        udp_answers(s, 10)
        assert tcp_served(s)
        assert s.proc.poll() is None


def test_connections_past_the_cap_are_closed(socks: list[socket.socket]) -> None:
    """Cap 100, 300 junk connections: 200 closed at once, 100 held (idle timeout 60 s);
    UDP is unaffected; once the held ones go, TCP serves again."""
    with server("--tcp-max-connections", "100", "--tcp-idle-timeout", "60") as s:
        socks += junk_connections(s, 300)
        wait_for(lambda: sum(map(closed, socks)) >= 200, 30, "200 connections closed")
        udp_answers(s, 200)
        held = [x for x in socks if not closed(x)]
        assert len(held) == 100, "exactly the cap is held"
        assert not tcp_served(s), "the cap is full: a new connection is not served"
        udp_answers(s, 10)
        for x in held:
            x.close()
        wait_for(lambda: tcp_served(s), 10, "TCP served again once the slots are free")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_client_that_never_reads_its_answers() -> None:
    """Pipelined queries with ~18x larger answers, never read: the server stops reading
    (its send buffer full) instead of buffering replies, then drops the client after
    the idle timeout; its memory stays flat and everyone else is served."""
    with server("--tcp-idle-timeout", "2") as s:
        rss_before = rss_kib(s.proc.pid)
        one = query("cockroachdb.db.svc-global", SRV)
        chunk = (struct.pack("!H", len(one)) + one) * 1000  # 45 kB of queries, 770 kB answers
        sock = socket.create_connection((s.host, s.port), timeout=5)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sent = 0
        limit = 40 << 20  # 40 MB of queries would be ~700 MB of unread answers
        deadline = time.monotonic() + 60
        try:
            sock.settimeout(3)  # blocked this long: the server has stopped reading us
            while sent < limit and time.monotonic() < deadline:
                sock.sendall(chunk)
                sent += len(chunk)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass
        assert sent < limit, "the server kept reading queries whose answers nobody reads"
        growth_mib = (rss_kib(s.proc.pid) - rss_before) / 1024
        assert growth_mib < 64, f"server grew {growth_mib:.0f} MiB"
        wait_for(lambda: closed(sock), 30, "the never-reading client to be dropped")
        sock.close()
        udp_answers(s, 20)
        assert tcp_served(s)
        msg = dns.message.from_wire(udp(s.host, s.port, query(NGINX)) or b"")
        assert answers(msg) == NGINX_A
