"""What only a socket shows of the protocol: over TCP (RFC 7766) pipelined and trickled
queries, idle and half-sent connections, the connection cap; responses and runts dropped
without closing the connection. The rules themselves (EDNS, truncation, header rules...)
are in test_protocol.py, in-process and through sockets.

Queries are built byte by byte (testkit/rawdns.py) so that broken ones can be
sent too; replies are read with dnspython and, where the rule is about bytes
(0x20 case echo, sizes), compared raw.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.inprocess import ask, no_reply_udp
from testkit.rawdns import (
    SRV,
    A,
    Tcp,
    bulk_objects,
    parse,
    query,
    question_of,
    same_but_turn,
)
from testkit.serve import DEMO, NGINX, NGINX_A, ROACH, Dnsside, answers, expect_udp_io

AD = 0x0020


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, udp_io: str) -> Iterator[Dnsside]:
    """The demo plus `mid.bulk` (50 addresses: > 512 B, < 1232 B) and `big.bulk` (120: > 1232 B)."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("mid", "bulk", 50, 98) + bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    with Dnsside("--source", str(path), "--cluster-name", "east") as s:
        yield expect_udp_io(s, udp_io)


@pytest.fixture(scope="module")
def short_idle() -> Iterator[Dnsside]:
    """Slow clients lose their slot fast here."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--tcp-max-connections", "20", "--tcp-idle-timeout", "1") as s:
        yield s


def test_responses_are_dropped_tcp_connection_kept(srv: Dnsside) -> None:
    with Tcp(srv.host, srv.port) as conn:
        conn.send(query(NGINX, flags=0x8000, qid=1), query(NGINX, qid=2))
        reply = conn.recv()
        assert reply is not None and reply[:2] == b"\x00\x02"


@pytest.mark.parametrize("size", [0, 1, 2, 5, 11])
def test_packets_shorter_than_a_header_are_dropped(srv: Dnsside, size: int) -> None:
    assert no_reply_udp(srv, query(NGINX)[:size])
    with Tcp(srv.host, srv.port) as conn:
        conn.send(query(NGINX)[:size], query(NGINX, qid=7))
        reply = conn.recv()
        assert reply is not None and reply[:2] == b"\x00\x07"


# --------------------------------------------------------------------------- TCP (RFC 7766)


def test_tcp_pipelined_queries_answered_with_their_ids(srv: Dnsside) -> None:
    names = [(NGINX, A), (ROACH, SRV), ("nope.svc-global", A), ("default.svc-global", A),
             ("example.com", A), ("_http._tcp.nginx-svc.default.svc-global", SRV)] * 5
    wires = {0x100 + i: query(n, t, qid=0x100 + i) for i, (n, t) in enumerate(names)}
    with Tcp(srv.host, srv.port) as conn:
        conn.send(*wires.values())
        got: dict[int, bytes] = {}
        for _ in wires:
            reply = conn.recv()
            assert reply is not None
            got[reply[0] << 8 | reply[1]] = reply
    assert got.keys() == wires.keys()
    for qid, reply in got.items():
        assert question_of(reply) == question_of(wires[qid])
        assert same_but_turn(reply, ask(srv, wires[qid], "tcp"))


def test_tcp_message_trickled_byte_by_byte_is_answered(srv: Dnsside) -> None:
    wire = query(NGINX, qid=0x7777)
    framed = struct.pack("!H", len(wire)) + wire
    with Tcp(srv.host, srv.port) as conn:
        for b in framed:
            conn.send_raw(bytes([b]))
        reply = conn.recv()
    assert reply is not None and answers(parse(reply)) == NGINX_A


def test_tcp_burst_of_pipelined_queries_all_answered(srv: Dnsside) -> None:
    """A burst far larger than one read: every query answered, none dropped, no reset."""
    n = 20000
    names = [query(NGINX, qid=i) if i % 2 else query(ROACH, SRV, qid=i) for i in range(n)]
    with Tcp(srv.host, srv.port, timeout=30) as conn:
        sender = threading.Thread(target=conn.send, args=names, daemon=True)
        sender.start()  # we must read while it writes: the server may stop reading us
        ids = set()
        for _ in range(n):
            reply = conn.recv(timeout=30)
            assert reply is not None, f"connection closed after {len(ids)} answers"
            ids.add(reply[0] << 8 | reply[1])
        sender.join(30)
    assert ids == set(range(n))


def test_tcp_idle_connection_is_closed(short_idle: Dnsside) -> None:
    with Tcp(short_idle.host, short_idle.port) as conn:
        assert conn.exchange(query(NGINX)) is not None
        assert conn.closed_within(10), "an idle connection must be closed by the idle timeout"
    with Tcp(short_idle.host, short_idle.port) as silent:
        assert silent.closed_within(10)


@pytest.mark.parametrize(
    "partial",
    [b"\x00", struct.pack("!H", 40) + b"\x12\x34" + b"\x00" * 8, struct.pack("!H", 65535)],
    ids=["half-length-prefix", "half-message", "length-only"],
)
def test_tcp_partial_message_loses_its_slot(short_idle: Dnsside, partial: bytes) -> None:
    with Tcp(short_idle.host, short_idle.port) as conn:
        conn.send_raw(partial)
        assert conn.closed_within(10)


def test_tcp_trickling_a_message_does_not_extend_the_deadline(short_idle: Dnsside) -> None:
    """One byte every 0.2 s of a 300-byte message: closed after the idle timeout, never served."""
    with Tcp(short_idle.host, short_idle.port) as conn:
        conn.send_raw(struct.pack("!H", 300))
        sent = 0
        closed = False
        for _ in range(60):  # 60 x 0.2 s = 12 s at most, the deadline
            if conn.closed_within(0.2):
                closed = True
                break
            try:
                conn.send_raw(b"\x00")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sent += 1
        assert closed, f"still open after trickling {sent} bytes"


def test_tcp_connection_cap(tmp_path: Path) -> None:
    """Every slot taken: a new connection is served, and the one closed for it is the
    quietest (the one whose last answer is oldest), never the newcomer (issue 33: refusing
    the newcomer let one client keep everyone else out); UDP is unaffected."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--tcp-max-connections", "20", "--tcp-idle-timeout", "60") as s:
        held = [Tcp(s.host, s.port) for _ in range(20)]
        try:
            for i, conn in enumerate(held):
                reply = conn.exchange(query(NGINX, qid=i))
                assert reply is not None and reply[:2] == struct.pack("!H", i)
            assert held[1].exchange(query(NGINX)) is not None  # held[1]: no longer quiet
            for i in (0, 2, 3):
                extra = Tcp(s.host, s.port)
                held.append(extra)  # kept open: every slot stays taken
                reply = extra.exchange(query(NGINX, qid=999))
                assert reply is not None and reply[:2] == struct.pack("!H", 999)
                assert held[i].recv() is None, f"the quietest connection ({i}) was not closed"
                assert answers(parse(ask(s, query(NGINX)))) == NGINX_A  # UDP unaffected
            for conn in [held[1], *held[4:]]:  # the others are still served
                assert conn.exchange(query(NGINX)) is not None
        finally:
            for conn in held:
                conn.close()


def tcp_answer(s: Dnsside) -> bytes | None:
    with Tcp(s.host, s.port) as conn:
        conn.send(query(NGINX))
        return conn.recv()
