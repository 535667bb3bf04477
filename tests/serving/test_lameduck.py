"""Rollouts without errors: the lame-duck period after SIGTERM, and both address families.

A real `dnsside serve` gets SIGTERM while a client keeps asking over UDP and over
new TCP connections: /readyz must fail at once, every query must still be answered
for the lame-duck period, and the process must then exit 0 within the period plus
the TCP flush (generous margins: the machine is shared; this is about behaviour,
not speed).
"""

from __future__ import annotations

import signal
import socket
import time

import dns.message
import dns.query

from testkit.serve import answers, demo_server, wait_for

WEB = ["10.43.0.50", "10.43.100.7", "10.43.100.8", "10.43.100.9"]
LAMEDUCK = 4.0


def web_answers(host: str, port: int, tcp: bool) -> list[str]:
    q = dns.message.make_query("web.default.svc-global", "A")
    if tcp:
        reply = dns.query.tcp(q, host, port=port, timeout=3)
    else:
        reply = dns.query.udp(q, host, port=port, timeout=3)
    return answers(reply)


def test_sigterm_keeps_answering_udp_and_tcp_during_the_lame_duck() -> None:
    with demo_server("--lameduck", str(LAMEDUCK)) as srv:
        assert srv.http("/readyz")[0] == 200
        assert web_answers(srv.host, srv.port, tcp=False) == WEB
        srv.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # Not ready at once: the first poll after the signal is handled already sees 503.
        wait_for(lambda: srv.http("/readyz")[0] == 503, 3, "/readyz 503 after SIGTERM")
        srv.wait_log("lame duck: not ready, still answering for 4s")
        asked = 0
        # Keep asking for most of the lame-duck period; every query is answered.
        while time.monotonic() - signalled < LAMEDUCK * 0.6:
            assert web_answers(srv.host, srv.port, tcp=False) == WEB
            assert web_answers(srv.host, srv.port, tcp=True) == WEB  # a new connection each time
            asked += 2
            assert srv.proc.poll() is None, "exited during the lame-duck period"
        assert asked >= 4
        assert srv.http("/healthz") == (200, "ok\n")  # alive, just not ready
        code = srv.proc.wait(LAMEDUCK + 10)
        elapsed = time.monotonic() - signalled
        assert code == 0
        assert elapsed >= LAMEDUCK * 0.9, f"stopped after {elapsed:.1f}s, before the lame duck"
        srv.wait_log("stopped")
        lines = "\n".join(srv.lines)
        assert lines.index("lame duck") < lines.index("closing listeners")


def test_a_second_sigterm_cuts_the_lame_duck_short() -> None:
    with demo_server("--lameduck", "60") as srv:
        srv.proc.send_signal(signal.SIGTERM)
        srv.wait_log("lame duck: not ready")
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(20) == 0  # not 60 s
        srv.wait_log("lame duck cut short")


def test_sigint_skips_the_lame_duck() -> None:
    with demo_server("--lameduck", "60") as srv:
        assert srv.stop(signal.SIGINT, timeout=20) == 0
        assert not any("lame duck" in line for line in srv.lines)


def test_listen_on_the_ipv6_any_address_serves_both_families() -> None:
    with demo_server("--http-listen", "[::]:0", listen="[::]:0") as srv:
        assert srv.host == "0.0.0.0"  # the first socket logged: IPv4 ...
        srv.wait_log(f"dns listening on udp+tcp [::]:{srv.port}")  # ... and IPv6, same port
        for host in ("127.0.0.1", "::1"):
            assert web_answers(host, srv.port, tcp=False) == WEB
            assert web_answers(host, srv.port, tcp=True) == WEB
        with socket.create_connection(("::1", srv.http_port), timeout=5) as s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
