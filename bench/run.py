"""The dnsside benchmark: one command, results in bench/RESULTS.md and raw JSON in bench/out/.

    .venv/bin/python -m bench.run            # full run, ~7 minutes
    .venv/bin/python -m bench.run --quick    # ~1.5 minutes, fewer and shorter runs

What it measures:

1. **CPU per answered query**, dnsside vs NSD vs dnslib's stock ``DNSServer``,
   serving the same records (the zone is written from dnsside's own index),
   with dnsperf at fixed rates. The server is pinned to core 0 and dnsperf to
   core 1. Server CPU is utime+stime from ``/proc/<pid>/stat`` (summed over the
   process tree, for NSD's forked server) before and after the dnsperf run,
   divided by the queries dnsperf saw answered. Latency p50/p99 from dnsperf
   ``-v``. Then the maximum throughput (no rate limit). The servers take turns
   within each repeat, so the ratios compare runs minutes apart, not hours;
   every figure is the median over the repeats, every ratio the median of the
   per-repeat ratios.
2. **Scale** at 1k, 10k and 100k members: sync time (process start → the
   ``initial sync done`` log line), resident memory after sync (and the peak),
   CPU per query at 20k queries/s.
3. **Propagation** at 100k members, in-process (``bench/propagation.py``): an
   EndpointSlice event applied to the index → the new answer from
   ``Responder.respond``; and the full reload of the file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit import serve

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
PY = sys.executable
CLUSTER = "east"
SERVER_CPU, CLIENT_CPU = "0", "1"
TICK = os.sysconf("SC_CLK_TCK")



def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break

    def version(cmd: Sequence[str]) -> str:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except OSError:
            return "?"
        text = (r.stdout + r.stderr).strip().splitlines()
        return next((x for x in text if re.search(r"\d+\.\d+", x)), "?")

    try:
        from importlib.metadata import version as dist_version

        uvloop = dist_version("uvloop")
    except Exception:  # not installed
        uvloop = "absent"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "uvloop": uvloop,
        "nsd": version(["nsd", "-v"]),
        "dnsperf": version(["dnsperf", "-h"]),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }


# --------------------------------------------------------------------------- processes


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its descendants, in seconds."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICK


def memory(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return {"rss_mb": out.get("VmRSS", 0.0), "peak_mb": out.get("VmHWM", 0.0)}


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (NSD needs it up front)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return int(port)
    raise RuntimeError("no free port")


def probe(port: int, qname: str, timeout: float = 30.0) -> None:
    """Wait until something answers ``qname`` A on 127.0.0.1:port over UDP."""
    from dnslib import DNSRecord

    q = DNSRecord.question(qname, "A").pack()
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            s.sendto(q, ("127.0.0.1", port))
            try:
                s.recvfrom(65535)
                return
            except OSError:
                time.sleep(0.05)
    raise RuntimeError(f"nothing answers on port {port}")


class Server:
    """A DNS server subprocess pinned to the server core."""

    name = "?"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.lines: list[str] = []
        self.started = 0.0

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *self.command()], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if self.proc is not None and self.proc.poll() is not None:
                time.sleep(0.2)
                raise RuntimeError(f"{self.name} exited: " + "\n".join(self.lines[-20:]))
            time.sleep(0.005)
        raise RuntimeError(f"{self.name}: no line matching {pattern!r} after {timeout}s")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Dnsside(Server):
    """`dnsside serve` pinned to the server core: testkit's process wrapper under taskset."""

    name = "dnsside"

    def __init__(self, topology: Path, extra: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        super().__init__()
        self.topology = topology
        self.extra = list(extra)
        self.env = env or {}
        self.sync_seconds = 0.0
        self.server: serve.Dnsside | None = None

    def start(self) -> None:
        self.started = time.monotonic()
        self.server = serve.Dnsside(
            "--source", str(self.topology), "--cluster-name", CLUSTER, *self.extra,
            wrap=["taskset", "-c", SERVER_CPU], env=self.env, wait_synced=False, timeout=300)
        self.proc, self.lines, self.port = self.server.proc, self.server.lines, self.server.port

    def ready(self, qname: str) -> None:
        assert self.server is not None
        self.server.wait_log("initial sync done", 300)
        self.sync_seconds = time.monotonic() - self.started
        probe(self.port, qname)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=15)


class Nsd(Server):
    name = "nsd"

    def __init__(self, conf: Path) -> None:
        super().__init__()
        self.conf = conf

    def command(self) -> list[str]:
        return ["nsd", "-d", "-c", str(self.conf)]

    def start(self) -> None:
        from bench.nsd_zone import set_port

        self.port = free_port()
        set_port(self.conf, self.port)
        super().start()

    def ready(self, qname: str) -> None:
        probe(self.port, qname, 120)


class Dnslib(Server):
    name = "dnslib"

    def __init__(self, zone: Path) -> None:
        super().__init__()
        self.zone = zone

    def command(self) -> list[str]:
        return [PY, str(BENCH / "dnslib_server.py"), "--zone", str(self.zone), "--port",
                str(self.port)]

    def start(self) -> None:
        self.port = free_port()
        super().start()

    def ready(self, qname: str) -> None:
        self.wait_line("dnslib listening", 120)
        probe(self.port, qname)


# --------------------------------------------------------------------------- dnsperf


@dataclass
class Run:
    rate: int  # 0 = unlimited
    seconds: float
    sent: int = 0
    completed: int = 0
    lost: int = 0
    qps: float = 0.0
    cpu_seconds: float = 0.0
    us_per_query: float = 0.0
    cpu_util: float = 0.0  # server CPU seconds / wall seconds
    p50_us: float | None = None
    p99_us: float | None = None
    rcodes: dict[str, int] = field(default_factory=dict)
    server_drops: int = 0  # datagrams the kernel dropped at the server's socket


def udp_drops(port: int) -> int:
    """The kernel's drop counter of the UDP socket bound to ``port`` (/proc/net/udp)."""
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port:
            return int(fields[-1])
    return 0


def dnsperf(server: Server, queries: Path, rate: int, seconds: float, latency: bool) -> Run:
    cmd = ["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(server.port),
           "-d", str(queries), "-l", str(seconds), "-e", "-t", "2", "-c", "4",
           # dnsperf leaves its sockets at the system's default buffer (208 KiB), and
           # at 50k q/s on a busy machine replies overflowed it: queries "lost" on the
           # client's side. 4 MiB, as the servers have; the server's own drops are
           # counted separately (server_drops).
           "-b", "4096"]
    if rate:
        cmd += ["-Q", str(rate), "-q", "1000"]
    else:
        # Enough outstanding queries to keep the server busy, not so many that a burst
        # overflows a socket buffer: a lost query holds its slot for the whole timeout.
        cmd += ["-q", "100"]
    if latency:
        cmd.append("-v")
    out_path = OUT / f"dnsperf-{server.name}.out"
    before = cpu_seconds(server.pid)
    drops_before = udp_drops(server.port)
    wall = time.monotonic()
    with out_path.open("w") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True)
    wall = time.monotonic() - wall
    cpu = cpu_seconds(server.pid) - before
    text = out_path.read_text()
    run = Run(rate=rate, seconds=seconds, server_drops=udp_drops(server.port) - drops_before)

    def grab(label: str) -> str:
        m = re.search(rf"{label}:\s+([\d.]+)", text)
        return m.group(1) if m else "0"

    run.sent = int(grab("Queries sent"))
    run.completed = int(grab("Queries completed"))
    run.lost = int(grab("Queries lost"))
    run.qps = float(grab("Queries per second"))
    m = re.search(r"Response codes:\s+(.*)", text)
    if m:
        for code, n in re.findall(r"([A-Z]+) (\d+)", m.group(1)):
            run.rcodes[code] = int(n)
    run.cpu_seconds = cpu
    run.us_per_query = cpu / run.completed * 1e6 if run.completed else float("nan")
    run.cpu_util = cpu / (float(grab("Run time \\(s\\)")) or wall)
    if latency:
        lat = sorted(float(x) for x in re.findall(r"^> \S+ \S+ \S+ ([\d.]+)$", text, re.M))
        if lat:
            run.p50_us = lat[len(lat) // 2] * 1e6
            run.p99_us = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6
    out_path.unlink()
    return run


def warm_up(server: Server, queries: Path) -> None:
    dnsperf(server, queries, 5000, 1, latency=False)


# --------------------------------------------------------------------------- sections


def topology_files(size: int) -> tuple[Path, Path]:
    """(topology, dnsperf query file) of ``size`` members; 0 is the demo topology."""
    from bench.topology import cached, demo

    if size == 0:
        topology, _ = demo(OUT)
        return topology, OUT / "demo-east.queries"
    topology, _ = cached(size, OUT)
    return topology, Path(str(topology) + ".queries")


def med(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and x == x]
    return statistics.median(vals) if vals else None


def compare(topology: Path, queries: Path, meta: dict[str, Any], rates: Sequence[int],
            seconds: float, repeats: int, with_dnslib: bool = True) -> dict[str, Any]:
    """dnsside vs NSD (vs dnslib), same records, same query file, servers taking turns."""
    from bench.nsd_zone import write_nsd
    from testkit.inprocess import file_index

    log(f"compare: writing the NSD zone from dnsside's index ({meta['members']} members)")
    index = file_index(topology, cluster_name=CLUSTER)
    nsd_dir = OUT / "nsd"
    if nsd_dir.exists():
        shutil.rmtree(nsd_dir)
    conf = write_nsd(index, nsd_dir, free_port())
    truncated = truncation_share(index, queries)
    del index
    probe_name = first_name(queries)
    servers: list[Callable[[], Server]] = [lambda: Dnsside(topology), lambda: Nsd(conf)]
    if with_dnslib:
        servers.append(lambda: Dnslib(nsd_dir / "svc-global.zone"))
    raw: dict[str, list[dict[str, Any]]] = {}
    for rep in range(repeats):
        for make in servers:
            server = make()
            server.start()
            try:
                server.ready(probe_name)  # type: ignore[attr-defined]
                warm_up(server, queries)
                # dnslib's thread-per-query server tops out near 1-2k queries/s: it only
                # gets the lowest rate, where it is already saturated.
                todo = rates[:1] if server.name == "dnslib" else rates
                for rate in todo:
                    run = dnsperf(server, queries, rate, seconds, latency=True)
                    raw.setdefault(f"{server.name}@{rate}", []).append(vars(run))
                    log(f"  rep {rep + 1} {server.name} @{rate}/s: {run.us_per_query:.1f} us/q, "
                        f"{run.completed} answered, {run.lost} lost ({run.server_drops} at the "
                        f"server), p99 {run.p99_us or 0:.0f} us")
                run = dnsperf(server, queries, 0, seconds, latency=False)
                raw.setdefault(f"{server.name}@max", []).append(vars(run))
                log(f"  rep {rep + 1} {server.name} max: {run.qps:.0f} q/s, "
                    f"{run.us_per_query:.1f} us/q, server cpu {run.cpu_util:.0%}")
            finally:
                server.stop()
    summary: dict[str, Any] = {}
    for key, runs in raw.items():
        summary[key] = {k: med([r[k] for r in runs]) for k in
                        ("us_per_query", "qps", "completed", "lost", "p50_us", "p99_us",
                         "cpu_util")}
        summary[key]["lost_max"] = max(r["lost"] for r in runs)
        summary[key]["server_drops_max"] = max(r.get("server_drops", 0) for r in runs)
        summary[key]["runs"] = len(runs)
    ratios: dict[str, Any] = {}
    for rate in rates:
        for other in ("nsd", "dnslib"):
            a, b = raw.get(f"dnsside@{rate}"), raw.get(f"{other}@{rate}")
            if a and b:
                ratios[f"dnsside/{other}@{rate}"] = med(
                    [x["us_per_query"] / y["us_per_query"] for x, y in zip(a, b, strict=False)])
    for other in ("nsd", "dnslib"):
        a, b = raw.get("dnsside@max"), raw.get(f"{other}@max")
        if a and b:
            ratios[f"throughput dnsside/{other}"] = med(
                [x["qps"] / y["qps"] for x, y in zip(a, b, strict=False)])
            ratios[f"dnsside/{other}@max"] = med(
                [x["us_per_query"] / y["us_per_query"] for x, y in zip(a, b, strict=False)])
    return {"members": meta["members"], "rates": list(rates), "seconds": seconds,
            "repeats": repeats, "truncated_share": truncated, "summary": summary,
            "ratios": ratios, "raw": raw}


def first_name(queries: Path) -> str:
    with queries.open() as f:
        return f.readline().split()[0]


def truncation_share(index: Any, queries: Path) -> float:
    """Share of the query file dnsside answers with TC=1 over UDP at EDNS 1232 (as dnsperf -e)."""
    from dnslib import EDNS0, DNSRecord

    tc = n = 0
    cache: dict[tuple[str, str], bool] = {}
    for line in queries.read_text().splitlines()[:5000]:
        name, qtype = line.split()
        if (name, qtype) not in cache:
            q = DNSRecord.question(name, qtype)
            q.add_ar(EDNS0(udp_len=4096))
            reply = index.responder.respond(bytes(q.pack()), udp=True)
            cache[(name, qtype)] = bool(reply and reply[2] & 0x02)
        tc += cache[(name, qtype)]
        n += 1
    return tc / n if n else 0.0


def scale(sizes: Sequence[int], rate: int, seconds: float, repeats: int) -> dict[str, Any]:
    """dnsside alone at each size: sync time, memory, CPU per query at ``rate``."""
    from bench.topology import cached

    out: dict[str, Any] = {}
    for size in sizes:
        topology, meta = cached(size, OUT)
        queries = Path(str(topology) + ".queries")
        runs = []
        for rep in range(repeats):
            server = Dnsside(topology)
            server.start()
            try:
                server.ready(first_name(queries))
                mem = memory(server.pid)
                warm_up(server, queries)
                run = dnsperf(server, queries, rate, seconds, latency=True)
                runs.append({"sync_seconds": server.sync_seconds, **mem, **vars(run)})
                log(f"  scale {size}: rep {rep + 1} sync {server.sync_seconds:.1f}s, "
                    f"rss {mem['rss_mb']:.0f} MB (peak {mem['peak_mb']:.0f}), "
                    f"{run.us_per_query:.1f} us/q, {run.lost} lost")
            finally:
                server.stop()
        out[str(size)] = {
            "members": meta["members"], "objects": meta["objects"],
            "file_mb": meta["bytes"] / 1e6, "global_services": meta["global_services"],
            **{k: med([r[k] for r in runs]) for k in
               ("sync_seconds", "rss_mb", "peak_mb", "us_per_query", "p50_us", "p99_us",
                "lost", "completed")},
            "raw": runs,
        }
    return out


def propagation(size: int, events: int, reloads: int) -> dict[str, Any]:
    from bench.topology import cached

    topology, _ = cached(size, OUT)
    r = subprocess.run(
        [PY, str(BENCH / "propagation.py"), str(topology), "--events", str(events),
         "--reloads", str(reloads)], capture_output=True, text=True, cwd=ROOT,
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    result: dict[str, Any] = json.loads(r.stdout)
    return result


# --------------------------------------------------------------------------- report


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    mline = (f"Machine: {m['cpu']}, {m['cores']} cores (server pinned to core {SERVER_CPU}, "
             f"dnsperf to core {CLIENT_CPU}); Linux {m['kernel']}, Python {m['python']}, "
             f"uvloop {m['uvloop']}, {m['nsd']}, dnsperf {m['dnsperf']}; load average at start "
             f"{' '.join(m['loadavg'])}.")
    lines = [
        "# dnsside benchmark results",
        "",
        f"Produced by `.venv/bin/python -m bench.run{' --quick' if results['quick'] else ''}` "
        f"on {results['date']} in {results['elapsed_s'] / 60:.1f} min "
        f"(raw numbers in `bench/out/results{'-quick' if results['quick'] else ''}.json`). "
        "How it measures: `bench/README.md`.",
        "",
    ]
    load = results.get("load")
    if load:
        lines += [
            f"Load on the machine during the run (it is shared): 1-minute load average "
            f"{load['loadavg_min']:.2f}-{load['loadavg_max']:.2f} (median "
            f"{load['loadavg_median']:.2f}; the benchmark itself, one server and dnsperf, "
            f"accounts for up to 2); CPU used by other processes: "
            f"{load['others_cores']:.2f} cores on average of {m['cores']}"
            + (f"; stolen by the hypervisor: {load['steal_cores']:.2f} cores; a runnable "
               f"task waited for a CPU {load['cpu_pressure']:.0%} of the time "
               "(/proc/pressure/cpu)" if "steal_cores" in load else "") + ".",
            "",
        ]
    for key in ("compare", "compare_demo"):
        if results.get(key):
            lines += compare_section(results[key], mline)
    sc = results.get("scale")
    if sc:
        rate = results["scale_rate"]
        base = sc[min(sc, key=int)]["us_per_query"]
        lines += [
            f"## Scale (dnsside, {rate:,} q/s)",
            "",
            mline,
            "",
            "Sync = process start → `initial sync done` (the whole file read, parsed, indexed "
            "and encoded). RSS = VmRSS after sync; peak = VmHWM. Each size has its own "
            "topology and query file (same mix). Medians of "
            f"{len(next(iter(sc.values()))['raw'])} starts.",
            "",
            "| members | global services | objects | file MB | sync s | RSS MB | peak MB | "
            "CPU µs / query | vs smallest | lost | p99 µs |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for size, x in sc.items():
            rel = x["us_per_query"] / base if base else None
            lines.append(
                f"| {int(size):,} | {x['global_services']:,} | {x['objects']:,} | "
                f"{x['file_mb']:.0f} | {fmt(x['sync_seconds'])} | {fmt(x['rss_mb'], '.0f')} | "
                f"{fmt(x['peak_mb'], '.0f')} | {fmt(x['us_per_query'], '.2f')} | "
                f"{fmt(rel, '.2f')}\u00d7 | {fmt(x['lost'], '.0f')} | {fmt(x['p99_us'], '.0f')} |")
        lines.append("")
    p = results.get("propagation")
    if p:
        e = p["event"]
        lines += [
            f"## Propagation ({p['members']:,} members, in-process)",
            "",
            mline,
            "",
            f"{e['n']} EndpointSlice events (a per-pod mirror's gateway endpoint flipping "
            "ready ↔ not ready, each on a different global service): the time from "
            "`Index.apply([Upsert(slice)])` until `Responder.respond` returns the new answer "
            "(the event → answer-on-the-wire path minus the socket). The file source "
            "adds its poll interval (1 s) and a full reload, measured separately.",
            "",
            "| path | p50 ms | p99 ms | max ms |",
            "|---|---|---|---|",
            f"| event → new answer | {e['p50_ms']:.2f} | **{e['p99_ms']:.2f}** | "
            f"{e['max_ms']:.2f} |",
        ]
        rl = p["reload"]
        lines.append(f"| full file reload (read + parse + diff + re-encode), "
                     f"{rl['n']} runs | {rl['p50_ms']:.0f} | {rl['max_ms']:.0f} | "
                     f"{rl['max_ms']:.0f} |")
        lines += ["", f"In-process initial load of the same file: {p['load_seconds']:.1f} s.", ""]
    lines += targets(results)
    disc = BENCH / "discussion.md"
    if disc.exists():
        lines += ["", disc.read_text().strip(), ""]
    return "\n".join(lines) + "\n"


def compare_section(c: dict[str, Any], mline: str) -> list[str]:
    s, r = c["summary"], c["ratios"]
    members = c["members"]
    topo = (f"{members:,} members" if isinstance(members, int)
            else "the demo topology, `examples/demo-east.yaml`")
    servers = "dnsside vs NSD vs dnslib" if any(k.startswith("dnslib") for k in s) else \
        "dnsside vs NSD"
    lines = [
        f"## CPU per answered query: {servers} ({topo})",
        "",
        mline,
        "",
        f"Same records in every server (the NSD zone is written from dnsside's index), same "
        f"query file (A/SRV mix: 40% one pod A, 15% one cluster A, 15% whole service A, "
        f"20% `_port._tcp` SRV, 10% service SRV; dnsperf `-e`, EDNS 1232 in the servers; "
        f"{c['truncated_share']:.0%} of these answers exceed 1232 bytes and go out "
        f"truncated (TC=1) from dnsside and NSD alike). {c['seconds']:g} s per run, "
        f"median of {c['repeats']} repeats; ratios are medians of per-repeat ratios. "
        "Lost = no reply within 2 s (dnsperf), worst run in brackets; at the server = "
        "datagrams the kernel dropped at the server's socket (/proc/net/udp), worst run.",
        "",
        "| server | rate (q/s) | CPU µs / answered query | answered q/s | lost | at the server | "
        "latency p50 µs | p99 µs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in c["rates"]:
        for name in ("dnsside", "nsd", "dnslib"):
            x = s.get(f"{name}@{rate}")
            if x:
                lines.append(
                    f"| {name} | {rate:,} | **{fmt(x['us_per_query'], '.2f')}** | "
                    f"{fmt(x['completed'] / c['seconds'], ',.0f')} | {fmt(x['lost'], '.0f')} "
                    f"(max {x['lost_max']}) | {x.get('server_drops_max', '-')} | "
                    f"{fmt(x['p50_us'], '.0f')} | {fmt(x['p99_us'], '.0f')} |")
    lines += ["", "| ratio (CPU per query) | value | target |", "|---|---|---|"]
    for rate in c["rates"]:
        x = r.get(f"dnsside/nsd@{rate}")
        if x is not None:
            lines.append(f"| dnsside / NSD @ {rate:,} q/s | **{x:.2f}\u00d7** | ≤ 1.00\u00d7 |")
    x = r.get("dnsside/nsd@max")
    if x is not None:
        lines.append(f"| dnsside / NSD at full load (max-throughput runs) | **{x:.2f}\u00d7** | "
                     f"≤ 1.00\u00d7 |")
    x = r.get(f"dnsside/dnslib@{c['rates'][0]}")
    if x is not None:
        lines.append(f"| dnsside / dnslib @ {c['rates'][0]:,} q/s offered (dnslib "
                     f"saturated, dnsside not) | 1/{1 / x:.0f} ({x:.4f}\u00d7) | - |")
    x = r.get("dnsside/dnslib@max")
    if x is not None:
        lines.append(f"| dnsside / dnslib at full load (max-throughput runs) | "
                     f"1/{1 / x:.0f} ({x:.4f}\u00d7) | - |")
    lines += ["", "| max throughput (no rate limit) | answered q/s | vs NSD | server CPU | "
              "CPU µs / query |", "|---|---|---|---|---|"]
    for name in ("dnsside", "nsd", "dnslib"):
        x = s.get(f"{name}@max")
        if x:
            rel = (f"{r['throughput dnsside/nsd']:.2f}\u00d7" if name == "dnsside"
                   and "throughput dnsside/nsd" in r else "-")
            lines.append(f"| {name} | {fmt(x['qps'], ',.0f')} | {rel} | "
                         f"{fmt(x['cpu_util'], '.0%')} | {fmt(x['us_per_query'], '.2f')} |")
    lines.append("")
    return lines


def targets(results: dict[str, Any]) -> list[str]:
    rows = []

    def row(what: str, value: str, target: str, ok: bool | None) -> None:
        rows.append(f"| {what} | {value} | {target} | "
                    f"{'-' if ok is None else ('met' if ok else '**not met**')} |")

    for key, what in (("compare", "10k members"), ("compare_demo", "demo")):
        c = results.get(key)
        if not c:
            continue
        for rate in c["rates"]:
            x = c["ratios"].get(f"dnsside/nsd@{rate}")
            if x is not None:
                row(f"CPU/query vs NSD @ {rate:,} q/s, {what}", f"{x:.2f}\u00d7", "≤ 1.00\u00d7",
                    x <= 1.0)
        x = c["ratios"].get("dnsside/nsd@max")
        if x is not None:
            row(f"CPU/query vs NSD at full load, {what}", f"{x:.2f}\u00d7", "≤ 1.00\u00d7",
                x <= 1.0)
        x = c["ratios"].get("throughput dnsside/nsd")
        if x is not None:
            mine, nsd = c["summary"]["dnsside@max"], c["summary"]["nsd@max"]
            busy = (f" (server CPU {mine['cpu_util']:.0%} vs NSD's {nsd['cpu_util']:.0%}"
                    + ("; below 90%: dnsperf was the limit" if min(
                        mine["cpu_util"], nsd["cpu_util"]) < 0.9 else "") + ")")
            row(f"answered q/s at full load vs NSD, {what}", f"{x:.2f}\u00d7{busy}",
                "≥ 1.00\u00d7", x >= 1.0)
        y = c["summary"].get(f"dnsside@{max(c['rates'])}")
        if y:
            row(f"lost queries @ {max(c['rates']):,} q/s, {what}",
                f"{y['lost_max']} (worst run; {y.get('server_drops_max', 0)} at the server)",
                "0", y["lost_max"] == 0)
    sc = results.get("scale")
    if sc and "100000" in sc:
        big, small = sc["100000"], sc[min(sc, key=int)]
        row("sync @ 100k", f"{big['sync_seconds']:.1f} s", "≤ 20 s", big["sync_seconds"] <= 20)
        row("RSS @ 100k", f"{big['rss_mb']:.0f} MB (peak {big['peak_mb']:.0f})", "≤ 300 MB",
            big["rss_mb"] <= 300)
        rel = big["us_per_query"] / small["us_per_query"]
        row("CPU/query 100k vs 1k", f"{rel:.2f}\u00d7", "≤ 1.10\u00d7", rel <= 1.10)
        row("lost queries @ 20k q/s, 100k members", f"{max(r['lost'] for r in big['raw'])}",
            "0", max(r["lost"] for r in big["raw"]) == 0)
    p = results.get("propagation")
    if p:
        row("propagation p99 @ 100k", f"{p['event']['p99_ms']:.2f} ms", "≤ 10 ms",
            p["event"]["p99_ms"] <= 10)
    kube_note = _kube_targets(row)
    if not rows:
        return []
    return ["## Targets", "",
            "Query serving and the Kubernetes source at 100k: issue 13. Scale and propagation "
            "(file source): issue 5." + kube_note, "",
            "| target | measured | goal | |", "|---|---|---|---|", *rows]


def _kube_targets(row: Any) -> str:
    """The Kubernetes-source rows, from the last `bench/kube_scale.py` run (its own
    command: it needs the fake API server from tests/); a sentence saying which run."""
    path = OUT / "kube_scale_100000.json"
    if not path.exists():
        return " No `bench/kube_scale.py` run saved: its targets are not shown."
    k = json.loads(path.read_text())
    zone, mcs = (k["configs"].get(n, {}).get("median") for n in ("zone", "zone+mcs"))
    if zone:
        row("sync @ 100k, kube source", f"{zone['sync_wall_s']:.1f} s", "≤ 10 s",
            zone["sync_wall_s"] <= 10)
        row("RSS @ 100k, kube source", f"{zone['rss_mb']:.0f} MB", "≤ 200 MB",
            zone["rss_mb"] <= 200)
        row("API change → answer p99 @ 100k", f"{zone['p99_ms']:.2f} ms", "≤ 5 ms",
            zone["p99_ms"] <= 5)
    if zone and mcs:
        extra = mcs["rss_mb"] / zone["rss_mb"] - 1
        row("memory of --mcs-zone @ 100k", f"+{extra:.0%} ({mcs['rss_mb']:.0f} MB)", "≤ +25 %",
            extra <= 0.25)
    return (f" The kube-source rows come from `bench/kube_scale.py` of {k['date']} "
            "(`bench/KUBE_RESULTS.md`).")


# --------------------------------------------------------------------------- main


class LoadSampler:
    """What else ran on the (shared) machine during the benchmark: the 1-minute load
    average every 10 s, the CPU time of every process but this one and its children
    (servers, dnsperf: /proc/stat's busy time minus ours), the time the hypervisor
    gave the virtual CPUs to someone else (steal), and how often a runnable task
    waited for a CPU (/proc/pressure/cpu, "some")."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.busy0, self.ours0 = self._busy(), self._ours()
        self.steal0, self.pressure0 = self._steal(), self._pressure()
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _busy() -> float:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle, iowait
        return (sum(fields[:8]) - idle) / TICK  # user..steal, without guest (in user)

    @staticmethod
    def _steal() -> float:
        return int(Path("/proc/stat").read_text().split("\n")[0].split()[8]) / TICK

    @staticmethod
    def _pressure() -> float:
        try:
            line = Path("/proc/pressure/cpu").read_text().split("\n")[0]
        except OSError:
            return float("nan")
        return int(line.rsplit("total=", 1)[1]) / 1e6  # seconds

    @staticmethod
    def _ours() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def _run(self) -> None:
        while not self._stop.wait(10):
            self.samples.append(float(Path("/proc/loadavg").read_text().split()[0]))

    def stop(self) -> dict[str, float]:
        self._stop.set()
        wall = time.monotonic() - self.started
        others = (self._busy() - self.busy0) - (self._ours() - self.ours0)
        xs = self.samples or [float(Path("/proc/loadavg").read_text().split()[0])]
        return {"loadavg_min": min(xs), "loadavg_max": max(xs),
                "loadavg_median": statistics.median(xs),
                "others_cores": max(0.0, others / wall) if wall else 0.0,
                "steal_cores": (self._steal() - self.steal0) / wall if wall else 0.0,
                "cpu_pressure": (self._pressure() - self.pressure0) / wall if wall else 0.0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter runs (~1.5 min)")
    p.add_argument("--only", choices=["compare", "scale", "propagation"], action="append",
                   help="run only these sections (repeatable)")
    p.add_argument("--compare-size", type=int, default=10000)
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--no-report", action="store_true",
                   help="do not rewrite bench/RESULTS.md (implied by --only)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite bench/RESULTS.md from bench/out/results.json, run nothing")
    args = p.parse_args()
    if args.report_only:
        saved = json.loads((OUT / "results.json").read_text())
        (BENCH / "RESULTS.md").write_text(report(saved))
        return 0
    if shutil.which("dnsperf") is None or shutil.which("nsd") is None:
        print("needs dnsperf and nsd (apt install dnsperf nsd)", file=sys.stderr)
        return 2
    OUT.mkdir(exist_ok=True)
    from bench.topology import cached

    quick = args.quick
    rates = [5000, 20000, 50000]
    seconds = 3 if quick else 8
    repeats = 1 if quick else 3
    sections = set(args.only or ["compare", "scale", "propagation"])
    started = time.monotonic()
    results: dict[str, Any] = {"quick": quick, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                     time.gmtime()),
                               "machine": machine()}
    sizes = [int(x) for x in args.sizes.split(",")]
    for size in sorted({*sizes, args.compare_size}):
        log(f"topology {size} members")
        cached(size, OUT)
    sampler = LoadSampler()
    if "compare" in sections:
        topology, meta = cached(args.compare_size, OUT)
        results["compare"] = compare(topology, Path(str(topology) + ".queries"), meta, rates,
                                     seconds, repeats)
        demo_topology, demo_queries = topology_files(0)
        results["compare_demo"] = compare(demo_topology, demo_queries, {"members": "demo"},
                                          rates, seconds, repeats, with_dnslib=False)
    if "scale" in sections:
        results["scale_rate"] = 20000
        results["scale"] = scale(sizes, 20000, seconds, 1 if quick else 3)
    if "propagation" in sections:
        log("propagation at 100k members (in-process)")
        results["propagation"] = propagation(max(sizes), 50 if quick else 300, 1 if quick else 3)
        e = results["propagation"]["event"]
        log(f"  event p50 {e['p50_ms']:.2f} ms, p99 {e['p99_ms']:.2f} ms")
    results["elapsed_s"] = time.monotonic() - started
    results["load"] = sampler.stop()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    text = json.dumps(results, indent=1, default=str)
    # A quick run is a smoke test: it never replaces the full run's RESULTS.md.
    name = "results-quick" if quick else "results"
    (OUT / f"{name}.json").write_text(text)
    (OUT / f"{name}-{stamp}.json").write_text(text)
    if not args.no_report and not args.only:
        target = OUT / "RESULTS-quick.md" if quick else BENCH / "RESULTS.md"
        target.write_text(report(results))
        log(f"wrote {target.relative_to(ROOT)}")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
