"""The attacks of issue 33 from outside, on loopback, bounded in count and time.

Each attack starts its own ``dnsside serve`` (the file source), runs the attacker from
127.0.0.2 and, meanwhile, a victim from 127.0.0.3 that asks one UDP and one TCP query
(a new connection each time) and ``/healthz`` every 50 ms. It prints what the victim saw
(answers and their worst latency; the same for 3 s before the attack, for what the machine
gives without it), dnsside's peak and final RSS, and the log lines that came during the
attack. Older code is measured the same way:

    .venv/bin/python -m bench.attacks qtypes tcp http axfr
    cd /tmp/old-checkout && PYTHONSAFEPATH=1 PYTHONPATH=$PWD \\
        /path/to/.venv/bin/python -m bench.attacks qtypes

The issue's "done" line: no victim answer slower than 50 ms (UDP, TCP), ``/healthz``
under 100 ms, RSS under 384 MiB, no flooding log line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import selectors
import socket
import struct
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import yaml

from testkit.rawdns import AXFR, bulk_objects, query
from testkit.serve import DEMO, NGINX, Dnsside

ATTACKER, VICTIM = "127.0.0.2", "127.0.0.3"


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class Victim(multiprocessing.Process):
    """Another client, in a process of its own (not waiting for the attacker's GIL): one
    UDP query, one TCP query and one /healthz every 50 ms."""

    def __init__(self, srv: Dnsside) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.http_port = srv.host, srv.port, srv.http_port
        self.pid_watched = srv.proc.pid
        self.stop = multiprocessing.Event()
        self.results: multiprocessing.Queue[Any] = multiprocessing.Queue()
        self.seen: dict[str, list[float | None]] = {"udp": [], "tcp": [], "healthz": []}
        self.peak_rss = 0.0
        self.peak_fds = 0

    def run(self) -> None:
        self.watch()
        self.results.put((self.seen, self.peak_rss, self.peak_fds))

    def collect(self) -> None:
        self.seen, self.peak_rss, self.peak_fds = self.results.get(timeout=30)

    def watch(self) -> None:
        while not self.stop.is_set():
            for what, ask in (("udp", self.udp), ("tcp", self.tcp), ("healthz", self.healthz)):
                started = time.perf_counter()
                try:
                    ok = ask()
                except OSError:
                    ok = False
                self.seen[what].append(time.perf_counter() - started if ok else None)
            self.peak_rss = max(self.peak_rss, rss_mib(self.pid_watched))
            with suppress(OSError):
                self.peak_fds = max(self.peak_fds, len(os.listdir(f"/proc/{self.pid_watched}/fd")))
            self.stop.wait(0.05)

    def udp(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((VICTIM, 0))
            s.settimeout(2)
            s.sendto(query(NGINX, qid=7), (self.host, self.port))
            return s.recv(4096)[:2] == b"\x00\x07"

    def tcp(self) -> bool:
        with socket.socket() as s:
            s.bind((VICTIM, 0))
            s.settimeout(2)
            s.connect((self.host, self.port))
            q = query(NGINX, qid=9)
            s.sendall(struct.pack("!H", len(q)) + q)
            return s.recv(4096)[2:4] == b"\x00\x09"

    def healthz(self) -> bool:
        with socket.socket() as s:
            s.bind((VICTIM, 0))
            s.settimeout(2)
            s.connect(("127.0.0.1", self.http_port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            return s.recv(4096).startswith(b"HTTP/1.1 200")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for what, seen in self.seen.items():
            ok = sorted(x for x in seen if x is not None)
            out[what] = {"answered": f"{len(ok)}/{len(seen)}",
                         "max_ms": round(ok[-1] * 1000, 1) if ok else None,
                         "p95_ms": round(ok[len(ok) * 95 // 100] * 1000, 1) if ok else None,
                         "median_ms": round(ok[len(ok) // 2] * 1000, 1) if ok else None,
                         "over_50ms": sum(1 for x in ok if x > 0.05)}
        return out


@contextmanager
def watched(srv: Dnsside) -> Iterator[dict[str, Any]]:
    """The victim runs, the log is marked; the result dict is filled on the way out."""
    result: dict[str, Any] = {"rss_before_mib": round(rss_mib(srv.proc.pid), 1)}
    idle = Victim(srv)  # the same victim for 3 s before the attack: what the machine gives
    idle.start()
    time.sleep(3)
    idle.stop.set()
    idle.collect()
    idle.join()
    result["victim_without_attack"] = idle.summary()
    first_line = len(srv.lines)
    victim = Victim(srv)
    victim.start()
    try:
        yield result
    finally:
        victim.stop.set()
        victim.collect()
        victim.join()
        result["victim"] = victim.summary()
        result["rss_peak_mib"] = round(max(victim.peak_rss, rss_mib(srv.proc.pid, "VmHWM")), 1)
        result["open_files_peak"] = victim.peak_fds
        result["rss_after_mib"] = round(rss_mib(srv.proc.pid), 1)
        lines = srv.lines[first_line:]
        result["log_lines"] = len(lines)
        result["log_sample"] = lines[:3]


def held_connections(port: int, count: int, seconds: float, first: bytes = b"") -> dict[str, int]:
    """Hold ``count`` connections from the attacker's address for ``seconds``, opening a
    new one for each the server closes; ``first`` is sent on each new connection."""
    sel = selectors.DefaultSelector()
    held: list[socket.socket] = []  # answered, never read
    opened = closed = 0

    def open_one() -> None:
        nonlocal opened
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((ATTACKER, 0))
        s.setblocking(False)
        with suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        opened += 1
        sel.register(s, selectors.EVENT_WRITE if first else selectors.EVENT_READ)

    for _ in range(count):
        open_one()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, events in sel.select(0.1):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            if events & selectors.EVENT_WRITE:  # connected: send ``first`` once, then wait
                with suppress(OSError):
                    s.send(first)
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(1, socket.MSG_PEEK)
            except OSError:
                data = b""
            if data:  # an answer we do not read (AXFR): still held, stop watching it
                sel.unregister(s)
                held.append(s)
                continue
            sel.unregister(s)
            s.close()
            closed += 1
            open_one()
        for s in list(held):  # unread connections the server closed: open another
            if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != 1:
                held.remove(s)
                s.close()
                closed += 1
                open_one()
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    for s in held:
        s.close()
    return {"opened": opened, "closed_by_server": closed}


def topology(tmp: Path, members: int) -> Path:
    docs = list(yaml.safe_load_all(DEMO.read_text()))
    if members:
        docs = [*docs, *({"kind": "List", "items": bulk_objects(f"big{i}", "bulk", 1000, i)}
                         for i in range(members // 1000))]
    path = tmp / "topology.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def server(tmp: Path, *flags: str, members: int = 0, wrap: Sequence[str] = ()) -> Dnsside:
    return Dnsside("--source", str(topology(tmp, members)), "--cluster-name", "east", *flags,
                   wrap=wrap, timeout=120)


def scrape(srv: Dnsside) -> str:
    """/metrics, however long it takes (a minute at most)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/metrics", timeout=60) as r:
        return str(r.read().decode())


def attack_qtypes(tmp: Path, seconds: float) -> dict[str, Any]:
    """Every QTYPE, in the zone, outside it (REFUSED) and malformed (FORMERR), over UDP, at
    the issue's pace (196,608 queries in 10 s); faster, the flood itself (no response rate
    limiting) slows the other client's UDP answers, whatever the metrics do."""
    with server(tmp) as srv:
        before = len(scrape(srv))
        with watched(srv) as result:
            sent = 0
            started = time.monotonic()
            deadline = started + seconds
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((ATTACKER, 0))
                s.setblocking(False)
                for qtype in range(65536):
                    if time.monotonic() > deadline:
                        break
                    for wire in (query(NGINX, qtype), query("example.com", qtype),
                                 query(NGINX, qtype, arcount=1)):  # an OPT that is not there
                        s.sendto(wire, (srv.host, srv.port))
                        sent += 1
                    while True:
                        try:
                            s.recv(4096)
                        except BlockingIOError:
                            break
                    ahead = sent / 19_661 - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
            scrapes = []
            for _ in range(3):
                started = time.perf_counter()
                size = len(scrape(srv))
                scrapes.append(time.perf_counter() - started)
        result.update(sent=sent, metrics_bytes_before=before, metrics_bytes_after=size,
                      scrape_max_s=round(max(scrapes), 3),
                      qtype_values=len({line.split('qtype="')[1].split('"')[0]
                                        for line in scrape(srv).splitlines()
                                        if line.startswith("dnsside_queries_total{")}))
    return result


def attack_tcp(tmp: Path, seconds: float) -> dict[str, Any]:
    """520 idle connections from one address, each one closed opened again."""
    with server(tmp) as srv, watched(srv) as result:
        result.update(held_connections(srv.port, 520, seconds))
    return result


def attack_http(tmp: Path, seconds: float) -> dict[str, Any]:
    """1,300 idle HTTP connections from one address, each one closed opened again; dnsside
    started with a soft descriptor limit of 1,024 (a container runtime's usual)."""
    wrap = ("prlimit", "--nofile=1024:20000", "--")
    with server(tmp, wrap=wrap) as srv, watched(srv) as result:
        result.update(held_connections(srv.http_port, 1300, seconds))
        result["limits"] = next(x for x in Path(f"/proc/{srv.proc.pid}/limits").read_text()
                                .splitlines() if x.startswith("Max open files"))
    return result


def attack_axfr(tmp: Path, seconds: float, members: int = 20_000) -> dict[str, Any]:
    """500 clients that send AXFR of a 20,000-member zone and never read."""
    with server(tmp, "--allow-transfer", "127.0.0.0/8", members=members) as srv:
        q = query("svc-global", AXFR)
        with watched(srv) as result:
            result.update(held_connections(srv.port, 500, seconds,
                                           first=struct.pack("!H", len(q)) + q))
    return result


ATTACKS: dict[str, Callable[[Path, float], dict[str, Any]]] = {
    "qtypes": attack_qtypes, "tcp": attack_tcp, "http": attack_http, "axfr": attack_axfr}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("attacks", nargs="+", choices=sorted(ATTACKS))
    parser.add_argument("--seconds", type=float, default=10.0, help="each attack's length")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    for name in args.attacks:
        with tempfile.TemporaryDirectory() as tmp:
            result = ATTACKS[name](Path(tmp), args.seconds)
        print(json.dumps({"attack": name, **result}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
