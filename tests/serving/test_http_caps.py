"""HTTP connections capped per client and in all, and the descriptor limit raised at start
(issue 33: 1,300 idle HTTP connections ran dnsside out of its 1,024 descriptors, DNS over
TCP and /healthz were reset, nothing was logged).

Closure is read from the kernel's TCP state of our end, polled with a deadline."""

from __future__ import annotations

import socket
from pathlib import Path


from testkit.serve import DEMO, NGINX, NGINX_A, Dnsside, answers, wait_for

_ESTABLISHED = 1


def closed(sock: socket.socket) -> bool:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _ESTABLISHED


def idle(srv: Dnsside, n: int, source: str) -> list[socket.socket]:
    """``n`` HTTP connections from ``source`` that never send a request."""
    return [socket.create_connection(("127.0.0.1", srv.http_port), timeout=5,
                                     source_address=(source, 0)) for _ in range(n)]


def test_idle_http_connections_cost_only_their_clients_share(
        socks: list[socket.socket]) -> None:
    """10 idle connections from 127.0.0.2 under a per-client cap of 5: the newest 5 are
    held, each older one closed for a newer one; /healthz and /metrics from another address
    are answered, DNS over TCP too, counted and told once."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--http-max-connections", "40", "--http-max-connections-per-client", "5") as s:
        socks += idle(s, 10, "127.0.0.2")
        wait_for(lambda: sum(map(closed, socks)) >= 5, 10, "5 connections closed")
        assert [x for x in socks if not closed(x)] == socks[-5:], "the newest 5 are held"
        assert s.http("/healthz") == (200, "ok\n")
        assert answers(s.query(NGINX, tcp=True)) == NGINX_A
        assert s.metric("dnsside_dropped_connections_total", reason="http_client_cap") == 5
        told = [x for x in s.lines if "http: client 127.0.0.2 holds 5 connections" in x]
        assert len(told) == 1 and "--http-max-connections-per-client" in told[0], s.lines


def test_every_http_slot_taken_the_client_holding_the_most_pays(
        socks: list[socket.socket]) -> None:
    """Every slot taken (10 from one address, 2 from another): /healthz from a third is
    answered, at the cost of the heavy client's oldest connection only."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--http-max-connections", "12", "--http-max-connections-per-client", "10") as s:
        heavy, light = idle(s, 10, "127.0.0.2"), idle(s, 2, "127.0.0.4")
        socks += heavy + light
        assert s.http("/healthz") == (200, "ok\n")  # accepted after the 12 (in order)
        wait_for(lambda: closed(heavy[0]), 10, "the heavy client's oldest closed")
        assert not any(map(closed, heavy[1:] + light))
        assert s.metric("dnsside_dropped_connections_total", reason="http_connection_cap") >= 1


def limits(pid: int) -> tuple[int, int]:
    line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines()
                if x.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    """Started with 256 descriptors (soft) of 4,096 (hard), as container runtimes often
    start it with 1,024: it runs with 4,096 and logs the figure; below the caps' sum it
    warns, naming the flags."""
    wrap = ("prlimit", "--nofile=256:4096", "--")
    with Dnsside("--source", str(DEMO), "--cluster-name", "east", wrap=wrap) as s:
        assert limits(s.proc.pid) == (4096, 4096)
        s.wait_log("open files: the soft limit raised from 256 to 4096 (the hard limit)")
    with Dnsside("--source", str(DEMO), "--cluster-name", "east", "--tcp-max-connections",
                 "1000", wrap=("prlimit", "--nofile=512:512", "--")) as s:
        line = s.wait_log("open files: the limit 512 is below")
        assert "--tcp-max-connections" in line and "1256" in line, line
