"""The issue's "done when" rows, through a real process and real clients (dnspython and dig)."""

from __future__ import annotations

import subprocess

import dns.rcode

from testkit.serve import answers, demo_server, expect_udp_io


def test_demo_answers_over_udp_tcp_and_dig(udp_io: str) -> None:
    with demo_server() as srv:
        expect_udp_io(srv, udp_io)
        for tcp in (False, True):
            a = srv.query("nginx-svc.default.svc-global", "A", tcp=tcp)
            assert answers(a) == sorted(
                ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]
            )
        out = subprocess.run(
            ["dig", "@127.0.0.1", "-p", str(srv.port), "+short", "nginx-svc.default.svc-global", "A"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split()
        assert sorted(out) == answers(a)
        nx = srv.query("metrics.default.svc-global", "A")
        assert nx.rcode() == dns.rcode.NXDOMAIN and nx.authority[0].rdtype == 6
        assert srv.stop() == 0
