"""What an operator relies on: metrics, health, readiness, logs, explain, clean stop."""

from __future__ import annotations

import json
import re
import signal
import socket
import struct
import time

import dns.message

from testkit.serve import DEMO, answers, demo_server, expect_udp_io, run_cli, wait_for


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
            if got == want:
                return float(m.group(3))
    return 0.0


def test_metrics_move_with_queries_and_describe_the_index(udp_io: str) -> None:
    with demo_server() as srv:
        expect_udp_io(srv, udp_io)
        before = srv.http("/metrics")[1]
        for _ in range(3):
            srv.query("nginx-svc.default.svc-global", "A")
        srv.query("_http._tcp.nginx-svc.default.svc-global", "SRV", tcp=True)
        srv.query("metrics.default.svc-global", "A")
        srv.query("example.com", "A")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"\x12\x34\x80\x00" + b"\x00" * 8, (srv.host, srv.port))  # QR=1: dropped
        text = wait_for(lambda: (t := srv.http("/metrics")[1]) and metric(
            t, "dnsside_dropped_packets_total") == 1 and t, what="dropped packet counted")
        q = "dnsside_queries_total"
        assert metric(text, q, qtype="A", rcode="NOERROR", transport="udp") == 3 + metric(
            before, q, qtype="A", rcode="NOERROR", transport="udp")
        assert metric(text, q, qtype="SRV", rcode="NOERROR", transport="tcp") == 1
        assert metric(text, q, qtype="A", rcode="NXDOMAIN", transport="udp") == 1
        assert metric(text, q, qtype="A", rcode="REFUSED", transport="udp") == 1
        assert metric(text, "dnsside_global_services") == 5  # nginx, cockroachdb, web, kafka, payments
        assert metric(text, "dnsside_members", cluster="north", ready="false") == 5
        assert metric(text, "dnsside_members", cluster="west", ready="true") == 7
        assert metric(text, "dnsside_source_synced", source="file") == 1
        assert metric(text, "dnsside_source_last_event_timestamp_seconds", source="file") > 0
        assert metric(text, "dnsside_zone_serial") > 0
        assert 'dnsside_build_info{version="0.1.0"} 1.0' in text
        assert "dnsside_answer_duration_seconds_bucket" in text
        assert srv.http("/healthz") == (200, "ok\n")
        assert srv.http("/readyz")[0] == 200
        assert srv.http("/nope")[0] == 404


def test_sigterm_finishes_open_tcp_and_exits_zero() -> None:
    # No lame duck here: this is about the close itself (tests/serving/test_lameduck.py has the rest).
    with demo_server("--lameduck", "0") as srv:
        conn = socket.create_connection((srv.host, srv.port), timeout=5)
        wire = dns.message.make_query("web.default.svc-global", "A").to_wire()
        conn.sendall(struct.pack("!H", len(wire)) + wire)
        size = struct.unpack("!H", conn.recv(2))[0]
        reply = b""
        while len(reply) < size:
            reply += conn.recv(size - len(reply))
        assert answers(dns.message.from_wire(reply)) == [
                "10.43.0.50", "10.43.100.7", "10.43.100.8", "10.43.100.9"]
        started = time.monotonic()
        assert srv.stop(signal.SIGTERM, timeout=5) == 0
        assert time.monotonic() - started < 5
        assert conn.recv(2) == b""  # closed cleanly by the server, not reset
        conn.close()
        srv.wait_log("stopped")
    with demo_server() as srv:
        assert srv.stop(signal.SIGINT, timeout=5) == 0


def test_explain_cli_names_the_objects() -> None:
    result = run_cli(["explain", "-o", "json", "--source", str(DEMO), "--cluster-name", "east",
                      "north.nginx-svc.default.svc-global", "A"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rcode"] == "NXDOMAIN"
    assert report["global_service"] == "default/nginx-svc"
    member = next(m for m in report["members"] if m["hostname"] == "nginx-set-0")
    assert member["from"] == ("Service default/nginx-set-0-north, "
                              "EndpointSlice default/nginx-set-0-north-bffce")
    assert member["status"].startswith("left out: not ready (gateway")
    srv_report = json.loads(run_cli(["explain", "-o", "json", "--source", str(DEMO), "--cluster-name", "east",
                                     "_grpc._tcp.cockroachdb.db.svc-global", "SRV"]).stdout)
    assert len(srv_report["answer"]) == 5
    statuses = {(m["cluster"], m["hostname"]): m["status"] for m in srv_report["members"]}
    assert statuses[("east", "cockroachdb-2")] == "left out: not ready (endpoint condition ready is false)"
    assert statuses[("west", "cockroachdb-2")] == "in the answer"
    none = json.loads(run_cli(["explain", "-o", "json", "--source", str(DEMO), "metrics.default.svc-global"]).stdout)
    assert none["rcode"] == "NXDOMAIN" and "not exported" in none["explanation"]


def test_explain_over_http_and_json_logs_and_query_log() -> None:
    with demo_server("--log-format", "json", "--query-log") as srv:
        status, body = srv.http("/debug/explain?name=web.default.svc-global&type=A")
        assert status == 200
        report = json.loads(body)
        assert {m["from"].split(",")[0] for m in report["members"]} == {
            "Service default/web", "Service default/web-west", "Service default/web-north",
            "Service default/web-federated", "Service default/web-south"}
        assert srv.http("/debug/explain")[0] == 400
        srv.query("web.default.svc-global", "A")
        line = srv.wait_log("web.default.svc-global")
        record = json.loads(line)
        assert record["logger"] == "dnsside.query" and "rcode=NOERROR" in record["msg"]
        for line in list(srv.lines):
            json.loads(line)  # every line is JSON


def test_tcp_answers_are_timed() -> None:
    """The TCP half of dnsside_answer_duration_seconds is observed, once per TCP query."""
    import dns.query

    with demo_server() as srv:
        for _ in range(3):
            dns.query.tcp(dns.message.make_query("nginx-svc.default.svc-global", "A"),
                          srv.host, port=srv.port, timeout=5)
        _, text = srv.http("/metrics")
        assert metric(text, "dnsside_answer_duration_seconds_count", transport="tcp") == 3


def test_explain_only_for_explain_from_and_metrics_for_all() -> None:
    """/debug/explain names objects, Secrets and failures: only clients in --explain-from
    (default loopback) read it; /metrics and the probes stay open to the listener's peers."""
    path = "/debug/explain?name=web.default.svc-global&type=A"
    with demo_server("--explain-from", "10.0.0.0/8", "--explain-from", "fd00::/8") as srv:
        status, body = srv.http(path)
        assert status == 403 and "--explain-from" in body
        assert srv.http("/metrics")[0] == 200 and srv.http("/readyz")[0] == 200
    # A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1: still loopback.
    with demo_server("--http-listen", "[::]:0") as srv:
        assert srv.http(path)[0] == 200


def test_explain_from_must_be_networks() -> None:
    out = run_cli(["serve", "--source", str(DEMO), "--explain-from", "loopback"])
    assert out.returncode != 0
    assert "--explain-from 'loopback' is not a network" in out.stderr
