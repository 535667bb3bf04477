"""The long fuzz run: tests/dns/test_fuzz_respond.py's properties with many more examples, then
thousands of mangled packets at a live `dnsside serve`, which must still answer.

    .venv/bin/python -m bench.fuzz                      # 20000 examples/property, 50000 packets
    .venv/bin/python -m bench.fuzz --examples 2000 --packets 10000 --seed 7

1. **properties**: pytest on tests/dns/test_fuzz_respond.py with ``DNSSIDE_FUZZ_EXAMPLES``
   (random bytes, random bytes after a query header, mutated queries, well-formed
   queries: `Responder.respond` never raises, replies parse and carry the ID).
2. **blast**: a demo server (testkit/serve.py) gets ``--packets`` datagrams —
   mutations of valid queries (the same `mutate` as the property test, driven by
   ``random.Random(seed)``) and plain random bytes — as fast as one socket sends
   them with at most ``--window`` replies outstanding (more overruns the kernel's
   socket buffers, which measures the kernel, not the server); then the same mix
   framed on TCP connections. Every answerable packet (a header, QR clear) must be
   answered, and every reply must carry the ID of a packet sent. Afterwards the
   server must be alive, have logged no error, and answer a normal query over UDP
   and TCP exactly as before.

Prints a JSON summary on stdout (also written to bench/out/fuzz.json); exit 1 on
any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import dns.message

from testkit.fuzzing import NAMES, QTYPES, mutate
from testkit.rawdns import Tcp, query
from testkit.serve import demo_server

ROOT = Path(__file__).resolve().parent.parent

OPS = ["flip", "set", "cut", "insert", "pointer", "count", "delete"]


def run_properties(examples: int) -> dict[str, object]:
    env = {**os.environ, "DNSSIDE_FUZZ_EXAMPLES": str(examples)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/dns/test_fuzz_respond.py"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout else []
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
    return {"examples_per_property": examples, "properties": 4, "ok": proc.returncode == 0,
            "seconds": round(time.monotonic() - started, 1), "pytest": tail}


def mangled(rng: random.Random) -> bytes:
    if rng.random() < 0.2:
        return rng.randbytes(rng.randrange(0, 600))
    name = rng.choice(NAMES)
    name = "".join(c.upper() if rng.random() < 0.5 else c for c in name) or "."
    edns = None
    if rng.random() < 0.5:
        edns = b"\x00" + struct.pack("!HHIH", 41, rng.choice([512, 1232, 4096]), 0, 0)
    wire = query(name, rng.choice(QTYPES), qid=rng.randrange(65536), edns=edns)
    ops = [(rng.choice(OPS), rng.randrange(2000), rng.randrange(65536),
            rng.randbytes(rng.randrange(9))) for _ in range(rng.randint(1, 5))]
    return mutate(wire, ops)


def answerable(data: bytes) -> bool:
    """SPEC §3: everything with a readable header and QR clear gets a reply."""
    return len(data) >= 12 and not data[2] & 0x80


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def blast(packets: int, seed: int, tcp_connections: int, window: int) -> dict[str, object]:
    rng = random.Random(seed)
    failures: list[str] = []
    with demo_server() as srv:
        addr = (srv.host, srv.port)
        before = dns.message.from_wire(_udp_ask(addr, query("nginx-svc.default.svc-global")))
        cpu0 = cpu_seconds(srv.proc.pid)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setblocking(False)
        # Each packet gets the next ID, so a reply names the packet it answers.
        outstanding: dict[int, bytes] = {}
        lost: list[bytes] = []
        replies = bad_ids = expected = 0
        started = time.monotonic()

        def drain(wait: float) -> None:
            nonlocal replies, bad_ids
            while select.select([sock], [], [], wait)[0]:
                try:
                    reply = sock.recv(65535)
                except BlockingIOError:
                    return
                replies += 1
                if outstanding.pop(reply[0] << 8 | reply[1], None) is None:
                    bad_ids += 1
                wait = 0

        for i in range(packets):
            data = mangled(rng)
            qid = i & 0xFFFF
            if len(data) >= 2:
                data = struct.pack("!H", qid) + data[2:]
            if answerable(data):
                expected += 1
                if qid in outstanding:  # unanswered for 65536 packets: lost
                    lost.append(outstanding[qid])
                outstanding[qid] = data
            while True:
                try:
                    sock.sendto(data, addr)
                    break
                except BlockingIOError:
                    drain(0.01)
            # At most `window` replies in flight: a blast that overruns the socket
            # buffers measures the kernel, not the server.
            if len(outstanding) > window:
                drain(0.2)
        drain(1.0)  # a deadline for stragglers, not a synchronisation sleep
        udp_seconds = time.monotonic() - started
        sock.close()
        # A datagram can be lost in the kernel under load; one the server refuses to
        # answer cannot. Ask each unanswered packet again, alone, with a deadline.
        lost += outstanding.values()
        never = [d for d in lost if not any(_udp_try(addr, d) for _ in range(3))]
        if never:
            failures.append(f"{len(never)} packets never answered, e.g. {never[0].hex()}")

        tcp_sent = tcp_replies = tcp_closed = tcp_expected = 0
        for _ in range(tcp_connections):
            with Tcp(srv.host, srv.port, timeout=5) as conn:
                batch = [m for m in (mangled(rng) for _ in range(200)) if len(m) < 65536]
                tcp_sent += len(batch)
                tcp_expected += sum(map(answerable, batch))
                try:
                    conn.send(*batch)
                    for _ in range(sum(map(answerable, batch))):
                        try:
                            if conn.recv(timeout=5.0) is None:
                                tcp_closed += 1
                                break
                        except TimeoutError:
                            break
                        tcp_replies += 1
                except (BrokenPipeError, ConnectionResetError):
                    tcp_closed += 1

        alive = srv.proc.poll() is None
        cpu = cpu_seconds(srv.proc.pid) if alive else float("nan")
        after_udp = after_tcp = None
        if alive:
            probe = query("nginx-svc.default.svc-global")
            after_udp = dns.message.from_wire(_udp_ask(addr, probe))
            with Tcp(srv.host, srv.port) as conn:
                raw = conn.exchange(probe)
            after_tcp = dns.message.from_wire(raw) if raw else None
        if not alive:
            failures.append(f"server exited {srv.proc.returncode}")
        if tcp_replies != tcp_expected:
            failures.append(f"TCP: {tcp_replies} replies, {tcp_expected} expected")
        if bad_ids:
            failures.append(f"{bad_ids} UDP replies with an ID never sent")
        for label, msg in (("udp", after_udp), ("tcp", after_tcp)):
            if msg is None or sorted(map(str, msg.answer)) != sorted(map(str, before.answer)):
                failures.append(f"after the blast, {label} answer differs: {msg}")
        tracebacks = [line for line in srv.lines if "Traceback" in line or "Error" in line]
        if tracebacks:
            failures.append(f"server logged errors: {tracebacks[:5]}")
        return {
            "udp_packets": packets, "udp_answerable": expected, "udp_replies": replies,
            "udp_lost_then_answered_alone": len(lost) - len(never),
            "udp_seconds": round(udp_seconds, 2),
            "udp_packets_per_second": round(packets / udp_seconds),
            "tcp_connections": tcp_connections, "tcp_messages": tcp_sent,
            "tcp_answerable": tcp_expected, "tcp_replies": tcp_replies,
            "tcp_closed_by_server": tcp_closed,
            "server_cpu_seconds": round(cpu - cpu0, 2), "server_alive": alive,
            "failures": failures, "ok": not failures,
        }


def _udp_try(addr: tuple[str, int], wire: bytes) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        s.sendto(wire, addr)
        try:
            return s.recv(65535)[:2] == wire[:2]
        except TimeoutError:
            return False


def _udp_ask(addr: tuple[str, int], wire: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(wire, addr)
        return s.recv(65535)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=20000, help="hypothesis examples per property")
    p.add_argument("--packets", type=int, default=50000, help="mangled UDP packets to blast")
    p.add_argument("--tcp-connections", type=int, default=50, help="each gets 200 mangled messages")
    p.add_argument("--window", type=int, default=32, help="UDP replies in flight at most")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-properties", action="store_true")
    args = p.parse_args()
    out: dict[str, object] = {"seed": args.seed}
    if not args.skip_properties:
        out["properties"] = run_properties(args.examples)
    out["blast"] = blast(args.packets, args.seed, args.tcp_connections, args.window)
    ok = all(bool(v.get("ok")) for v in out.values() if isinstance(v, dict))
    out["ok"] = ok
    text = json.dumps(out, indent=2)
    print(text)
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "fuzz.json").write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
