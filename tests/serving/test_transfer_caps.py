"""Unread zone transfers cost one message each (issue 33: 500 clients that sent AXFR of a
20,000-member zone and never read took dnsside from 72 to 558 MiB in 3 s, not given back).

A real dnsside serves a zone of 10,000 members (about 50,000 records, 2.3 MB); 60
clients, each from its own address, ask for it and never read. Each transfer refers to the
version's records, packs its next message only once the socket took the last one, and its
socket's send buffer is small: an unread transfer costs one message in dnsside's memory
and at most 256 KiB in the kernel's (charged to the pod as well), where each used to push
up to 4 MiB into the kernel and keep the rest of the zone, a copy of its list and a
quarter of a megabyte of messages in ours. The kernel's share is read from /proc/net/tcp
(the send queues of dnsside's end). The caps hold meanwhile and a reading secondary gets
the whole zone."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import dns.query
import dns.rcode
import dns.zone
import pytest
import yaml

from testkit.rawdns import AXFR, bulk_objects, parse, query
from testkit.serve import DEMO, Dnsside, wait_for

MEMBERS = 10_000
UNREAD = 60


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def big_zone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    demo = yaml.safe_load(DEMO.read_text())
    for i in range(MEMBERS // 1000):
        demo["items"] += bulk_objects(f"big{i}", "bulk", 1000, i)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    return path


def unread_axfr(srv: Dnsside, source: str) -> socket.socket:
    """An AXFR from ``source`` whose answer is never read (a small receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect((srv.host, srv.port))
    wire = query("svc-global", AXFR)
    sock.sendall(struct.pack("!H", len(wire)) + wire)
    return sock


def send_queues(port: int) -> list[int]:
    """Bytes in the kernel's send queue of each established connection on ``port``."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "01":
            out.append(int(fields[4].split(":")[0], 16))
    return out


def first_reply(sock: socket.socket) -> bytes:
    size = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def test_unread_transfers_cost_one_message_each_and_are_capped(
        big_zone: Path, socks: list[socket.socket]) -> None:
    with Dnsside("--source", str(big_zone), "--cluster-name", "east", "--allow-transfer",
                 "127.0.0.0/8", "--transfer-max", str(UNREAD), "--transfer-max-per-client",
                 "1", "--tcp-idle-timeout", "60", timeout=60) as s:
        whole = dns.zone.from_xfr(dns.query.xfr(s.host, "svc-global", port=s.port))
        assert len(whole.nodes) > MEMBERS  # one transfer, for the baseline
        before = rss_mib(s.proc.pid)
        socks += [unread_axfr(s, f"127.0.1.{i + 1}") for i in range(UNREAD)]
        wait_for(lambda: s.metric("dnsside_transfers_total", result="ok", type="axfr")
                 == UNREAD + 1, 30, "every transfer under way")
        grown = rss_mib(s.proc.pid) - before
        assert grown < 24, f"{UNREAD} unread transfers took {grown:.1f} MiB"
        queued = send_queues(s.port)
        assert len(queued) >= UNREAD and max(queued) <= 256 * 1024, sorted(queued)[-5:]
        # the caps: one more from a client that has one, one more in all
        assert parse(first_reply(unread_axfr(s, "127.0.1.1"))).rcode() == dns.rcode.REFUSED
        assert parse(first_reply(unread_axfr(s, "127.0.2.1"))).rcode() == dns.rcode.REFUSED
        assert s.metric("dnsside_transfers_total", result="busy", type="axfr") == 2
        socks.pop().close()  # a slot comes back when its client goes
        wait_for(lambda: any("cut short" in x for x in s.lines), 10, "the cut-short line")
        again = dns.zone.from_xfr(dns.query.xfr(s.host, "svc-global", port=s.port,
                                                source="127.0.2.1"))
        assert again == whole


def test_transfers_being_sent_are_counted_until_done_or_gone(
        big_zone: Path, socks: list[socket.socket]) -> None:
    """`dnsside_transfers_sending` counts a transfer from its request to its last message or
    its client's going; while it is above 0 the interpreter's switch interval is lowered
    (serving/pacing.py), so a count that leaked would keep it low for good: a transfer read
    whole, one cut short and a refused one each leave the count as it was."""
    with Dnsside("--source", str(big_zone), "--cluster-name", "east", "--allow-transfer",
                 "127.0.0.0/8", "--transfer-max-per-client", "1", "--tcp-idle-timeout", "60",
                 timeout=60) as s:
        assert s.metric("dnsside_transfers_sending") == 0
        socks += [unread_axfr(s, "127.0.3.1"), unread_axfr(s, "127.0.3.2")]
        wait_for(lambda: s.metric("dnsside_transfers_sending") == 2, 30, "two being sent")
        assert parse(first_reply(unread_axfr(s, "127.0.3.1"))).rcode() == dns.rcode.REFUSED
        whole = dns.zone.from_xfr(dns.query.xfr(s.host, "svc-global", port=s.port,
                                                source="127.0.3.3"))
        assert len(whole.nodes) > MEMBERS
        assert s.metric("dnsside_transfers_sending") == 2
        socks.pop().close()
        wait_for(lambda: s.metric("dnsside_transfers_sending") == 1, 10, "one cut short")
        socks.pop().close()
        wait_for(lambda: s.metric("dnsside_transfers_sending") == 0, 10, "none")
