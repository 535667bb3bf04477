"""Other clients during big zone transfers (issue 36, item 4): the UDP latency another
client sees while 1 and 4 AXFRs of a 100,000-member zone are sent, and dnsside's memory.

    .venv/bin/python -m bench.xfr_contention --members 100000 \\
        --variant before="@PYTHONSAFEPATH=1 @PYTHONPATH=/tmp/base" --variant after="" \\
        --repeats 3

(``python -m bench.transfer --contention`` runs the same.) Each variant is a `dnsside serve
--source` of `bench/topology.py`'s topology with `--allow-transfer 127.0.0.0/8`, pinned to
core 0; ``@NAME=value`` among a variant's words sets an environment variable (an older
checkout through ``@PYTHONPATH``, as in `bench/ab.py`). The clients run on core 1, each in
a process of its own, so that no client's GIL is in the measurement:

* a *prober* sends one UDP query for a name of the zone every 0.5 ms (``--every``; one
  waits for its answer before the next goes) and notes each query's send time and round
  trip;
* 1 or 4 *readers* each ask for an AXFR from an address of their own (127.0.0.2, .3 ...:
  `--transfer-max-per-client` counts per address) and read its messages as raw bytes (no
  DNS library: parsing 600,000 records in Python would be the measurement) until the
  message count of a first, untimed AXFR;
* this process samples dnsside's VmRSS every 5 ms.

The window is from the first reader's request to the last reader's last byte; the figures
are the prober's round trips sent in it (max, p99, p50) and the highest VmRSS sampled in
it; the same prober for 1 s without a transfer gives the idle figures. Variants take turns
in every repeat, so slow drifts of the shared machine hit them alike; compare within a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import run
from bench.topology import cached
from testkit.serve import Dnsside

ROOT = Path(__file__).resolve().parent.parent
SERVER_CPU, CLIENT_CPU = "0", "1"

# One AXFR read from ``source`` (argv: source ip, port, zone, messages): prints the time of
# the request and of the last byte (CLOCK_MONOTONIC, the same in every process), and bytes.
READER = r"""
import socket, struct, sys, time
src, port, zone, want = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
name = b"".join(bytes([len(l)]) + l.encode() for l in zone.strip(".").split(".")) + b"\0"
q = struct.pack("!6H", 7, 0, 1, 0, 0, 0) + name + struct.pack("!HH", 252, 1)
s = socket.socket(); s.bind((src, 0)); s.connect(("127.0.0.1", port))
buf = bytearray(1 << 20); view = memoryview(buf); have = 0; got = 0; total = 0
t0 = time.monotonic(); s.sendall(struct.pack("!H", len(q)) + q)
while got < want:
    while have < 2 or have < 2 + (buf[0] << 8 | buf[1]):
        n = s.recv_into(view[have:])
        if not n:
            print(json.dumps({"error": "closed after %d messages" % got})); sys.exit(1)
        have += n
    while have >= 2 and have >= 2 + (buf[0] << 8 | buf[1]) and got < want:
        size = 2 + (buf[0] << 8 | buf[1])
        if got == 0 and buf[5] & 0xF:
            print('{"error": "rcode %d"}' % (buf[5] & 0xF)); sys.exit(1)
        got += 1; total += size
        buf[: have - size] = buf[size:have]; have -= size
print('{"start": %r, "end": %r, "bytes": %d}' % (t0, time.monotonic(), total))
""".replace("import socket", "import json, socket")

# UDP queries for argv[2] at port argv[1], one every argv[3] seconds (each waits for its answer
# first), until SIGUSR1; prints [[send time, round trip s or -1 for none in 1 s], ...].
PROBER = r"""
import json, signal, socket, struct, sys, time
port, qname, every = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
name = b"".join(bytes([len(l)]) + l.encode() for l in qname.strip(".").split(".")) + b"\0"
stop = []
signal.signal(signal.SIGUSR1, lambda *a: stop.append(1))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("127.0.0.1", port))
s.settimeout(1.0); out = []; qid = 0
print("ready", flush=True)
while not stop:
    qid = (qid + 1) & 0xFFFF
    q = struct.pack("!6H", qid, 0x0100, 1, 0, 0, 0) + name + b"\0\1\0\1"
    t = time.monotonic(); s.send(q)
    try:
        while True:
            r = s.recv(4096)
            if r[:2] == q[:2]:
                break
        out.append((t, time.monotonic() - t))
    except (socket.timeout, InterruptedError):
        if not stop:
            out.append((t, -1.0))
    pause = t + every - time.monotonic()
    if pause > 0 and not stop:
        time.sleep(pause)
print(json.dumps(out))
"""


PRIORITY = 0  # --priority: dnsside's threads and the prober's nice value in the windows
EVERY = 0.0005  # --every: the prober's pace, seconds between queries


def renice(pid: int, value: int) -> None:
    """Every thread of ``pid`` to nice ``value`` (setpriority names one thread a call)."""
    if not PRIORITY:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, int(tid), value)


def pinned(cpu: str) -> list[str]:
    return ["taskset", "-c", cpu]


def axfr_messages(port: int, zone: str) -> tuple[int, int]:
    """(messages, bytes) of one AXFR, read message by message until the closing SOA."""
    import socket

    name = b"".join(bytes([len(x)]) + x.encode() for x in zone.strip(".").split(".")) + b"\0"
    q = struct.pack("!6H", 1, 0, 1, 0, 0, 0) + name + struct.pack("!HH", 252, 1)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(struct.pack("!H", len(q)) + q)
        soas = messages = size = 0
        while soas < 2:
            msg = run_read(s, struct.unpack("!H", run_read(s, 2))[0])
            messages += 1
            size += 2 + len(msg)
            if msg[3] & 0xF:
                raise RuntimeError(f"AXFR answered rcode {msg[3] & 0xF}")
            # An AXFR opens and closes with the SOA: count the SOAs among the records.
            soas += count_soas(msg)
        return messages, size


def run_read(sock: Any, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise RuntimeError("connection closed mid-transfer")
        out += chunk
    return bytes(out)


def count_soas(msg: bytes) -> int:
    """SOA records in a transfer message (owners: labels then a pointer, or the root)."""
    an = struct.unpack_from("!H", msg, 6)[0]
    i = 12
    while msg[i]:
        i += msg[i] + 1
    i += 5
    soas = 0
    for _ in range(an):
        while True:
            b = msg[i]
            if b >= 0xC0:
                i += 2
                break
            i += b + 1
            if b == 0:
                break
        rtype, _c, _t, rdlen = struct.unpack_from("!HHIH", msg, i)
        soas += rtype == 6
        i += 10 + rdlen
    return soas


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """dnsside's VmRSS every 5 ms, with the time of each sample."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.stopping = pid, [], threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.005):
            self.samples.append((time.monotonic(), rss_kb(self.pid)))


def probe(port: int, qname: str, during: Any) -> tuple[list[tuple[float, float]], Any]:
    """The prober's round trips while ``during()`` runs (its result is returned too)."""
    first = ["nice", "-n", str(PRIORITY)] if PRIORITY else []
    prober = subprocess.Popen([*first, *pinned(CLIENT_CPU), sys.executable, "-c", PROBER,
                               str(port), qname, str(EVERY)], stdout=subprocess.PIPE, text=True)
    assert prober.stdout is not None
    if prober.stdout.readline().strip() != "ready":
        raise RuntimeError("the prober did not start")
    time.sleep(0.2)  # the prober's steady state before the window (a benchmark, not a test)
    try:
        result = during()
    finally:
        time.sleep(0.1)
        prober.send_signal(signal.SIGUSR1)
        out, _ = prober.communicate(timeout=30)
    return [tuple(x) for x in json.loads(out)], result


def transfers(port: int, zone: str, k: int, messages: int) -> list[dict[str, Any]]:
    readers = [subprocess.Popen([*pinned(CLIENT_CPU), sys.executable, "-c", READER,
                                 f"127.0.0.{2 + i}", str(port), zone, str(messages)],
                                stdout=subprocess.PIPE, text=True) for i in range(k)]
    results = []
    for r in readers:
        out, _ = r.communicate(timeout=300)
        results.append(json.loads(out))
        if "error" in results[-1]:
            raise RuntimeError(f"reader: {results[-1]['error']}")
    return results


def figures(rtts: list[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    inside = [rtt for t, rtt in rtts if start <= t <= end]
    ok = sorted(x for x in inside if x >= 0)
    if not ok:
        return {"n": 0, "lost": len(inside)}
    return {"n": len(ok), "lost": len(inside) - len(ok), "max_ms": ok[-1] * 1000,
            "p99_ms": ok[min(len(ok) - 1, int(len(ok) * 0.99))] * 1000,
            "p50_ms": ok[len(ok) // 2] * 1000}


def one_window(srv: Dnsside, qname: str, zone: str, k: int, messages: int
               ) -> dict[str, Any]:
    sampler = Sampler(srv.proc.pid)
    sampler.start()
    renice(srv.proc.pid, PRIORITY)  # every thread of dnsside, for the window only
    rss_before = rss_kb(srv.proc.pid)
    if k == 0:
        rtts, _ = probe(srv.port, qname, lambda: time.sleep(1.0))
        start, end = rtts[0][0] + 0.1, rtts[-1][0]
    else:
        rtts, got = probe(srv.port, qname, lambda: transfers(srv.port, zone, k, messages))
        start, end = min(g["start"] for g in got), max(g["end"] for g in got)
    sampler.stopping.set()
    sampler.join()
    renice(srv.proc.pid, 0)
    inside = [kb for t, kb in sampler.samples if start <= t <= end] or [rss_kb(srv.proc.pid)]
    out = figures(rtts, start, end)
    out.update(seconds=end - start, rss_before_mb=rss_before / 1024,
               rss_peak_mb=max(inside) / 1024)
    return out


def report(raw: dict[str, dict[int, list[dict[str, Any]]]], args: argparse.Namespace,
           load_start: list[str]) -> str:
    """The figures as a markdown page: each repeat's max and p99, medians of the rest."""
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    lines = [
        "# Other clients during big zone transfers", "",
        f"Produced by `python -m bench.xfr_contention {' '.join(sys.argv[1:])}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores "
        f"shared with other work, load average {' '.join(load_start)} at the start, "
        f"{' '.join(load_end)} at the end. {args.members:,} members; the prober's UDP round "
        "trips sent during each window (from the first AXFR request to the last byte of the "
        "last), dnsside's highest VmRSS sampled in it; `idle`: 1 s without a transfer, "
        "the floor the machine gives. Variants ran side by side and took turns.", "",
        "| variant | AXFRs | slowest answer, ms (each repeat) | median | p99, ms (each) "
        "| median | p50 ms | answers | window s | VmRSS peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for name, by_k in raw.items():
        for k, ws in by_k.items():
            def each(key: str, ws: list[dict[str, Any]] = ws) -> str:
                return " ".join(f"{w.get(key, float('nan')):.1f}" for w in ws)
            def mid(key: str, ws: list[dict[str, Any]] = ws) -> str:
                return f"{statistics.median(w.get(key, float('nan')) for w in ws):.1f}"
            lines.append(
                f"| {name} | {k or 'idle'} | {each('max_ms')} | **{mid('max_ms')}** | "
                f"{each('p99_ms')} | **{mid('p99_ms')}** | "
                f"{statistics.median(w.get('p50_ms', 0) for w in ws):.2f} | "
                f"{statistics.median(w.get('n', 0) for w in ws):.0f} | "
                f"{statistics.median(w['seconds'] for w in ws):.2f} | "
                f"{max(w['rss_peak_mb'] for w in ws):.0f} |")
    return "\n".join(lines) + "\n"


def start(topology: Path, words: list[str]) -> Dnsside:
    env = dict(w[1:].split("=", 1) for w in words if w.startswith("@"))
    flags = [w for w in words if not w.startswith("@")]
    return Dnsside("--source", str(topology), "--cluster-name", run.CLUSTER,
                   "--allow-transfer", "127.0.0.0/8", *flags, env=env,
                   wrap=pinned(SERVER_CPU), timeout=240)


def main() -> int:
    global PRIORITY, EVERY
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=100000)
    p.add_argument("--variant", action="append", default=[],
                   help='NAME="extra flags" (repeatable; @VAR=value sets an environment '
                   "variable); default: one, no flags")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--concurrent", default="1,4")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None,
                   help="also write the report there (bench/TRANSFER_CONTENTION.md)")
    p.add_argument("--priority", type=int, default=0,
                   help="nice value of dnsside's threads (during the windows only) and of the "
                   "prober, e.g. -20 as root: on a shared machine other people's work then "
                   "delays neither much, so the figures are dnsside's own waits (SCHED_FIFO "
                   "was tried: the kernel's RT throttling adds 50 ms stalls of its own)")
    p.add_argument("--every", type=float, default=EVERY,
                   help="the prober's pace: seconds from one query to the next (0.5 ms)")
    args = p.parse_args()
    PRIORITY, EVERY = args.priority, args.every
    run.OUT.mkdir(exist_ok=True)
    topology, _ = cached(args.members, run.OUT)
    qname = run.first_name(Path(str(topology) + ".queries"))
    zone = "svc-global."
    variants = [v.split("=", 1) for v in args.variant] or [["dnsside", ""]]
    ks = [int(k) for k in args.concurrent.split(",")]
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    servers: list[tuple[str, Dnsside, int]] = []
    raw: dict[str, dict[int, list[dict[str, Any]]]] = {}
    try:
        for name, flags in variants:
            run.log(f"{name}: starting dnsside at {args.members} members")
            srv = start(topology, shlex.split(flags))
            messages, size = axfr_messages(srv.port, zone)
            run.log(f"{name}: AXFR of {messages} messages, {size} bytes; RSS "
                    f"{rss_kb(srv.proc.pid) / 1024:.0f} MB")
            servers.append((name, srv, messages))
        for rep in range(args.repeats):
            for name, srv, messages in servers[rep % len(servers):] + servers[
                    :rep % len(servers)]:
                for k in [0, *ks]:
                    w = one_window(srv, qname, zone, k, messages)
                    raw.setdefault(name, {}).setdefault(k, []).append(w)
                    run.log(f"rep {rep + 1} {name} {k} AXFR: " + " ".join(
                        f"{key} {val:.1f}" if isinstance(val, float) else f"{key} {val}"
                        for key, val in w.items()))
    finally:
        for _, srv, _ in servers:
            srv.stop()
    text = report(raw, args, load_start)
    print(text)
    if args.out:
        args.out.write_text(text)
        run.log(f"wrote {args.out}")
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
