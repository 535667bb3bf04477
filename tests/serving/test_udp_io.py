"""UDP in batches (recvmmsg/sendmmsg, dnsside/mmsg.py) and one by one (recvfrom/sendto).

The protocol suites run against `dnsside serve` in both modes (the `udp_io`
fixture in conftest.py); here the UDP server runs in-process on real loopback
sockets, so the replies can be compared byte for byte with `Responder.respond`
on the very same responder, and so the queries can be queued *before* the server
reads its socket: the first `recvmmsg` then returns a full batch for certain.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from dnsside.serving import mmsg
from dnsside.serving.server import UdpServer
from dnsside.telemetry import metrics
from testkit.fuzzing import MUTATIONS, PROFILE, mutate, queries, responder
from testkit.rawdns import SRV, A, opt_rr, query, same_but_turn
from testkit.serve import wait_for

pytestmark = pytest.mark.quick

NAMES = ["nginx-svc.default.svc-global", "cockroachdb.db.svc-global", "NgInX-sEt-0.EaSt.nginx-svc"
         ".default.svc-global", "web.default.svc-global", "nope.svc-global", "default.svc-global",
         "example.com"]
MARKER_ID = 0xFFFF
# The marker's name has one address: its reply is the same bytes every time (--round-robin
# turns only answers of several records; the others are compared with same_but_turn).
ONE_ADDRESS = "nginx-set-0.east.nginx-svc.default.svc-global"


@pytest.fixture(params=["batch", "plain"])
def server(request: pytest.FixtureRequest) -> Iterator[UdpServer]:
    """A UdpServer on 127.0.0.1, not started yet (a test queues queries first)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    srv = UdpServer(sock, responder(), io=request.param)
    assert srv.io == request.param, "batch I/O must work on the Linux machines tests run on"
    yield srv
    srv.close()
    assert not udp_threads(), "close() stops the thread"


def udp_threads() -> list[threading.Thread]:
    """The UDP server threads alive in this process (a UdpServer names its thread)."""
    return [t for t in threading.enumerate() if t.name == "dnsside-udp" and t.is_alive()]


def client() -> socket.socket:
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    c.bind(("127.0.0.1", 0))
    c.settimeout(5.0)
    return c


def burst(qid: int) -> bytes:
    """Query ``qid`` of a burst: answers of every kind, FORMERR, and packets to drop."""
    kind = qid % 11
    name = NAMES[qid % len(NAMES)]
    if kind == 3:
        return struct.pack("!H", qid) + b"\x80\x00" + b"\x00" * 8  # QR set: dropped
    if kind == 7:
        return struct.pack("!H", qid) + b"\x01\x00\x00"  # shorter than a header: dropped
    if kind == 5:
        return query(name, A, qid=qid, qdcount=2)  # FORMERR
    edns = opt_rr(payload=[512, 1232, 4096][qid % 3]) if qid % 2 else None
    return query(name, SRV if kind in (1, 9) else A, qid=qid, edns=edns)


def receive_until_marker(c: socket.socket) -> dict[int, bytes]:
    """Replies by ID until the marker's: UDP over loopback keeps order, and one thread
    answers in order, so anything the server would send for earlier queries is in."""
    got: dict[int, bytes] = {}
    while True:
        reply = c.recv(65535)
        qid = struct.unpack("!H", reply[:2])[0]
        assert qid not in got, f"two replies to query {qid}"
        got[qid] = reply
        if qid == MARKER_ID:
            return got


def test_a_burst_is_answered_byte_for_byte_with_drops_in_between(server: UdpServer) -> None:
    """Three clients queue 3 x 200 queries (some to drop) before the server reads any:
    every reply is respond()'s, goes to its own client, and nothing answers a drop."""
    r = responder()
    clients = [client() for _ in range(3)]
    sent: list[dict[int, bytes]] = [{} for _ in clients]
    addr = server.sock.getsockname()
    for qid in range(200):
        for c, mine in zip(clients, sent, strict=True):
            mine[qid] = burst(qid + 1000 * clients.index(c))
            c.sendto(mine[qid], addr)
    marker = query(ONE_ADDRESS, A, qid=MARKER_ID)
    for c in clients:
        c.sendto(marker, addr)
    server.start()
    for c, mine in zip(clients, sent, strict=True):
        got = receive_until_marker(c)
        expected = {struct.unpack("!H", q[:2])[0]: r.respond(q) for q in mine.values()}
        want = {qid: reply for qid, reply in expected.items() if reply is not None}
        assert len(want) < len(mine), "the burst has packets to drop"
        assert got.pop(MARKER_ID) == r.respond(marker)
        assert got.keys() == want.keys()
        assert all(same_but_turn(got[qid], want[qid]) for qid in want)
        c.close()
    server.close()  # the counters are published at least every 64 queries, and at the end
    if server.io == "batch":
        assert server.received == 3 * 201
        assert server.receive_calls <= 3 * 201 // mmsg.BATCH + 2, "queued queries come in batches"


@pytest.mark.parametrize("io", ["batch", "plain"])
def test_ipv6(io: str) -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.bind(("::1", 0))
    srv = UdpServer(sock, responder(), io=io)
    assert srv.io == io
    c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    c.bind(("::1", 0))
    c.settimeout(5.0)
    q = query(NAMES[1], SRV, qid=7, edns=opt_rr())
    c.sendto(q, sock.getsockname())
    srv.start()
    try:
        assert same_but_turn(c.recv(65535), responder().respond(q))
    finally:
        srv.close()
        c.close()


@pytest.mark.parametrize("io", ["batch", "plain"])
def test_ipv4_client_of_an_ipv6_socket(io: str) -> None:
    """A dual-stack socket sees IPv4 senders as ::ffff:a.b.c.d (28-byte addresses)."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.bind(("::ffff:127.0.0.1", 0))
    srv = UdpServer(sock, responder(), io=io)
    c = client()
    q = query(NAMES[0], A, qid=8, edns=opt_rr())
    c.sendto(q, ("127.0.0.1", sock.getsockname()[1]))
    srv.start()
    try:
        assert same_but_turn(c.recv(65535), responder().respond(q))
    finally:
        srv.close()
        c.close()


@settings(parent=PROFILE, max_examples=min(PROFILE.max_examples, 150))
@given(packets=st.lists(queries().flatmap(
    lambda q: st.just(q) | MUTATIONS.map(lambda ops: mutate(q, ops))), min_size=1, max_size=40))
def test_any_packets_get_respond_s_reply_on_the_wire(packets: list[bytes]) -> None:
    """Fuzzed batches through both loops: each reply is respond()'s, in order, and a
    packet respond() drops gets nothing (the marker query after them says when to stop)."""
    r = responder()
    for io in ("batch", "plain"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        srv = UdpServer(sock, r, io=io)
        c = client()
        try:
            for p in packets:
                c.sendto(p, sock.getsockname())
            marker = query(ONE_ADDRESS, A, qid=MARKER_ID)
            c.sendto(marker, sock.getsockname())
            srv.start()
            want = [x for x in (r.respond(p) for p in packets) if x is not None]
            got = []
            while (reply := c.recv(65535)) != r.respond(marker):
                got.append(reply)
            assert len(got) == len(want)
            assert all(same_but_turn(a, b) for a, b in zip(got, want, strict=True))
        finally:
            srv.close()
            c.close()


def test_a_reply_that_cannot_be_sent_is_skipped_and_the_rest_go_out() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    io = mmsg.open_batch(sock)
    assert io is not None
    c = client()
    try:
        for i in range(3):
            c.sendto(b"query-%d" % i, sock.getsockname())
        assert io.receive(mmsg.MSG_DONTWAIT) == 3
        for i in range(3):
            io.put_reply(i, b"reply-%d" % i)
        # Message 1's sender becomes port 0, where UDP cannot send (EINVAL).
        port_at = io.names_at + 1 * 128 + 2
        io.mem[port_at : port_at + 2] = b"\x00\x00"
        io.send(3)
        assert c.recv(100) == b"reply-0"
        assert c.recv(100) == b"reply-2"
    finally:
        io.release()
        sock.close()
        c.close()


def test_without_recvmmsg_batch_falls_back_to_plain(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not Linux (or a libc without the calls): the plain loop, with a warning, still answers."""
    monkeypatch.setattr(mmsg.sys, "platform", "darwin")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    with caplog.at_level(logging.WARNING, logger="dnsside.server"):
        srv = UdpServer(sock, responder(), io="batch")
    assert srv.io == "plain"
    assert "recvmmsg/sendmmsg not available" in caplog.text
    c = client()
    srv.start()
    try:
        q = query(NAMES[0], A, qid=9)
        c.sendto(q, sock.getsockname())
        assert same_but_turn(c.recv(65535), responder().respond(q))
        plain = metrics.REGISTRY.get_sample_value("dnsside_udp_io", {"mode": "plain"})
        assert plain is not None and plain >= 1  # the fallback is visible in a metric too
    finally:
        srv.close()
        c.close()


def test_seccomp_style_enosys_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recvmmsg that fails (as under a seccomp filter answering ENOSYS): plain I/O."""
    calls = mmsg._libc_calls()
    assert calls is not None

    def failing_recvmmsg(*args: object) -> int:
        import ctypes

        ctypes.c_int.from_address(calls[2]()).value = errno.ENOSYS
        return -1

    monkeypatch.setattr(mmsg, "_libc_calls", lambda: (failing_recvmmsg, calls[1], calls[2]))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    assert mmsg.open_batch(sock) is None
    sock.close()


def test_close_wakes_the_thread_waiting_for_a_datagram(server: UdpServer) -> None:
    server.start()
    (thread,) = udp_threads()
    task = Path(f"/proc/self/task/{thread.native_id}/stat")
    wait_for(lambda: task.read_text().rsplit(") ", 1)[1][0] == "S", what="the thread to block")
    server.close()
    assert not thread.is_alive()


def test_batch_counters_are_exported() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    server = UdpServer(sock, responder(), io="batch")
    c = client()
    try:
        for qid in range(3):
            c.sendto(query(NAMES[0], A, qid=qid), server.sock.getsockname())
        server.start()
        for _ in range(3):
            c.recv(65535)
        text = generate_latest(metrics.REGISTRY).decode()
        assert "dnsside_udp_receive_calls_total 1.0" in text
        assert "dnsside_udp_received_datagrams_total 3.0" in text
        assert 'dnsside_udp_io{mode="batch"} 1.0' in text
    finally:
        server.close()
        c.close()
