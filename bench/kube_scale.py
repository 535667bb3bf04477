"""Kube source at scale: sync time, memory and event-to-answer latency, with and without
`--mcs-zone` (issues 11, 12 and 13).

    .venv/bin/python -m bench.kube_scale [--members 100000] [--events 200] [--repeats 3]
    .venv/bin/python -m bench.kube_scale --quick      # one start each, 50 events
    .venv/bin/python -m bench.kube_scale --report-only

Loads `bench/topology.py`'s topology (the one `bench/run.py` and
`bench/mcs_cost.py` use: local StatefulSets exported, their per-pod, root and
gateway mirrors in four links, federated and probe Services, Links; cached in
bench/out/) into the fake API server from tests/ (in this process, on its own
thread), then starts `dnsside serve --kubeconfig` against it, alternately
without (`zone`) and with `--mcs-zone clusterset.local.` (`zone+mcs`), and
reports per configuration the median over the starts of:

* sync: wall time from process start to "initial sync done", and the CPU time
  dnsside itself spent (the fake, in this process, shares the machine);
* memory: VmRSS after the sync and VmHWM (the peak); the extra memory of the
  second naming scheme is the `zone+mcs` RSS over the `zone` one;
* propagation: a per-pod mirror Service gets a new ClusterIP at the fake API
  server → the watch delivers it → the index re-encodes that global service →
  a UDP poller sees the new address for the pod's name (with `--mcs-zone`, the
  pod's KEP-1645 name must answer it too), p50/p99 over --events changes;
* a full relist: the API server is cut off, its history compacted, then back:
  every watch gets 410 Expired and dnsside lists Services, EndpointSlices and
  Links again while it keeps answering from the old index; the peak memory of
  that (a whole second set of records alive next to the first) is what the
  memory limit must hold.

Writes bench/KUBE_RESULTS.md (--quick: bench/out/KUBE_RESULTS-quick.md) and the
raw numbers to bench/out/kube_scale_<members>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode

from bench.topology import cached
from testkit.serve import Dnsside
from testkit.threadedkube import ThreadedKube

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUT = BENCH / "out"

MCS_ZONE = "clusterset.local."
CONFIGS: dict[str, list[str]] = {"zone": [], "zone+mcs": ["--mcs-zone", MCS_ZONE]}
# The targets at 100k members through the kube source.
TARGET_SYNC_S, TARGET_RSS_MB, TARGET_P99_MS, TARGET_MCS_EXTRA = 10, 200, 5, 0.25


def proc_stat(pid: int) -> tuple[float, int, int]:
    """(cpu seconds, VmRSS kB, VmHWM kB) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(status.split("VmRSS:")[1].split()[0])
    hwm = int(status.split("VmHWM:")[1].split()[0])
    return cpu, rss, hwm


class Poller:
    """Asks dnsside for one name's A record until it is one address. Raw bytes, no DNS
    library in the loop: the poll costs the bench as little as possible (it shares the
    machine and, in this process, the GIL with the fake API server)."""

    def __init__(self, sock: socket.socket, addr: tuple[str, int], name: str) -> None:
        self.sock, self.addr = sock, addr
        self.question = dns.message.make_query(name, "A").to_wire()[12:]
        self.id = 0

    def answers(self, address: str) -> bool:
        """One query: does the reply hold exactly ``address``?"""
        self.id = (self.id + 1) & 0xFFFF
        self.sock.sendto(self.id.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                         + self.question, self.addr)
        while True:  # a late reply to an earlier poll has another ID: skip it
            reply = self.sock.recv(4096)
            if int.from_bytes(reply[:2], "big") == self.id:
                break
        # NOERROR, one answer record, whose RDATA ends the reply (no EDNS asked).
        return (reply[3] & 0xF == 0 and reply[6:8] == b"\x00\x01"
                and reply[-4:] == socket.inet_aton(address))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def flippable(items: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``count`` per-pod mirror Services with a ready gateway endpoint, each of a different
    global service, spread over the topology."""
    ready = {s["metadata"]["labels"]["kubernetes.io/service-name"]
             for s in items if s["kind"] == "EndpointSlice"
             and "mirror.linkerd.io/headless-mirror-svc-name" in s["metadata"]["labels"]
             and all(e["conditions"]["ready"] for e in s["endpoints"])}
    by_service: dict[str, dict[str, Any]] = {}
    for o in items:
        labels = o["metadata"].get("labels") or {}
        if (o["kind"] == "Service" and "mirror.linkerd.io/headless-mirror-svc-name" in labels
                and o["metadata"]["name"] in ready):
            fq = o["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"]
            by_service.setdefault(fq.split(".", 1)[1], o)
    picks = list(by_service.values())
    step = max(1, len(picks) // count)
    return picks[::step][:count]


def cpu_settled(pid: int, quiet: float = 1.0, timeout: float = 120) -> None:
    """Wait until the process has used no CPU for ``quiet`` seconds (its work is done)."""
    deadline = time.monotonic() + timeout
    last, since = proc_stat(pid)[0], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = proc_stat(pid)[0]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise SystemExit(f"dnsside (pid {pid}) still busy after {timeout} s")


def relist(kube: ThreadedKube, srv: Dnsside, touch: list[dict[str, Any]]) -> float:
    """Cut the fake off, write ``touch`` (so every watch's resume point is behind), compact
    its history, reconnect; returns the seconds until dnsside has relisted everything."""
    kube.run(kube.kube.set_unreachable(True))
    for obj in touch:
        kube.call(kube.kube.apply, obj)
    kube.call(kube.kube.compact)
    lines = len(srv.lines)
    started = time.perf_counter()
    kube.run(kube.kube.set_unreachable(False))
    for plural in ("services", "endpointslices"):
        srv.wait_log(f"relisted {plural}:", timeout=600)
    assert len(srv.lines) > lines
    cpu_settled(srv.proc.pid)
    return time.perf_counter() - started


def one_start(kube: ThreadedKube, extra: list[str], services: list[dict[str, Any]],
              run: int, touch: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    with Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                 "--log-level", "info", *extra, wait_synced=False) as srv:
        srv.wait_log("initial sync done", timeout=600)
        sync_s = time.perf_counter() - started
        cpu, rss, hwm = proc_stat(srv.proc.pid)
        time.sleep(2)  # what the process holds once the sync's garbage is gone
        _, rss_settled, _ = proc_stat(srv.proc.pid)

        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(2)
        addr = (srv.host, srv.port)
        latencies = []
        for n, original in enumerate(services):
            svc = json.loads(json.dumps(original))
            new_ip = f"10.{200 + run % 50}.{n // 256}.{n % 256}"  # never seen before this run
            svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = new_ip, [new_ip]
            cluster = svc["metadata"]["labels"]["mirror.linkerd.io/cluster-name"]
            fq = svc["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"]
            pod, name, ns = fq.split(".")[:3]
            names = [f"{pod}.{cluster}.{name}.{ns}.svc-global"]
            if extra:
                names.append(f"{pod}.{cluster}.{name}.{ns}.svc.{MCS_ZONE}")
            polls = [Poller(sock, addr, name) for name in names]
            t0 = time.perf_counter()
            kube.call(kube.kube.apply, svc)
            deadline = t0 + 10
            while not polls[0].answers(new_ip):
                if time.perf_counter() > deadline:
                    raise SystemExit(f"no new answer for {names[0]} after 10 s")
            latencies.append((time.perf_counter() - t0) * 1000)
            for name, poll in zip(names[1:], polls[1:], strict=True):  # same batch: there too
                if not poll.answers(new_ip):
                    raise SystemExit(f"{names[0]} answers {new_ip}, {name} does not")
        sock.close()
        relist_s = relist(kube, srv, touch)
        _, rss_relist, hwm_relist = proc_stat(srv.proc.pid)
        srv.stop()
    return {"sync_wall_s": sync_s, "sync_cpu_s": cpu, "rss_mb": rss / 1024,
            "rss_settled_mb": rss_settled / 1024, "peak_rss_mb": hwm / 1024,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 99),
            "max_ms": max(latencies), "events": len(latencies), "relist_s": relist_s,
            "rss_relist_mb": rss_relist / 1024, "peak_relist_mb": hwm_relist / 1024}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure(members: int, configs: dict[str, list[str]], repeats: int,
            events: int) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Load the ``members`` topology into a fake API server, start each configuration
    ``repeats`` times, alternately; (topology meta, rows by configuration)."""
    path, meta = cached(members, OUT)
    items = json.loads(path.read_text())["items"]
    services = flippable(items, events)
    # One object of each listed kind, written while dnsside is cut off before a relist.
    touch = [next(o for o in items if o["kind"] == kind) for kind in ("Service", "EndpointSlice")]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        kube = ThreadedKube(Path(tmp))
        loaded = time.perf_counter()
        kube.call(kube.kube.load, items)
        del items
        log(f"{members:,} members: fake API server loaded with {meta['objects']:,} objects in "
            f"{time.perf_counter() - loaded:.0f} s")
        run = 0
        for rep in range(repeats):
            for name, extra in configs.items():
                row = one_start(kube, extra, services, run, touch)
                run += 1
                runs[name].append(row)
                log(f"{name} start {rep + 1}: sync {row['sync_wall_s']:.1f} s (CPU "
                    f"{row['sync_cpu_s']:.1f} s), RSS {row['rss_mb']:.0f} MB (peak "
                    f"{row['peak_rss_mb']:.0f}), p50 {row['p50_ms']:.2f} ms p99 "
                    f"{row['p99_ms']:.2f} ms; relist {row['relist_s']:.1f} s, peak "
                    f"{row['peak_relist_mb']:.0f} MB")
        kube.close()
    return meta, runs


def _medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {name: {"median": {k: statistics.median(r[k] for r in rows) for k in rows[0]},
                   "runs": rows} for name, rows in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3, help="alternating starts per configuration")
    ap.add_argument("--sizes", default="1000,10000",
                    help="smaller topologies measured once each for the sizing table ('' none)")
    ap.add_argument("--quick", action="store_true", help="one start each, 50 events, no --sizes")
    ap.add_argument("--only", choices=sorted(CONFIGS), help="one configuration")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the report from the saved JSON, run nothing")
    args = ap.parse_args()
    raw = OUT / f"kube_scale_{args.members}{'-quick' if args.quick else ''}.json"
    target = OUT / "KUBE_RESULTS-quick.md" if args.quick or args.only else BENCH / "KUBE_RESULTS.md"
    if args.report_only:
        target.write_text(report(json.loads(raw.read_text())))
        return
    repeats, events = (1, 50) if args.quick else (args.repeats, args.events)
    configs = {args.only: CONFIGS[args.only]} if args.only else CONFIGS
    sizes = [] if args.quick else [int(n) for n in args.sizes.split(",") if n.strip()]

    began = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    meta, runs = measure(args.members, configs, repeats, events)
    by_size = {}
    for size in sizes:
        size_meta, size_runs = measure(size, configs, 1, min(events, 50))
        by_size[str(size_meta["members"])] = _medians(size_runs)
    by_size[str(meta["members"])] = _medians(runs)

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "kernel": platform.release(),
                    "loadavg": Path("/proc/loadavg").read_text().split()[:3]},
        "command": " ".join(["python -m bench.kube_scale", *sys.argv[1:]]),
        "members": meta["members"], "objects": meta["objects"],
        "global_services": meta["global_services"], "repeats": repeats, "events": events,
        "elapsed_min": (time.monotonic() - began) / 60,
        "configs": _medians(runs),
        "sizes": by_size,
    }
    raw.write_text(json.dumps(result, indent=1))
    target.write_text(report(result))
    log(f"wrote {target.relative_to(ROOT)}")
    print(report(result))


def _spread(rows: list[dict[str, Any]], key: str, fmt: str) -> str:
    values = [r[key] for r in rows]
    if len(values) < 2:
        return ""
    return f" ({format(min(values), fmt)}-{format(max(values), fmt)})"


def report(r: dict[str, Any]) -> str:
    m = r["machine"]
    configs = r["configs"]
    names = list(configs)
    header = "| measure | " + " | ".join(f"`{n}`" for n in names) + " | target |"
    lines = [
        "# Kubernetes source at scale",
        "",
        f"Produced by `.venv/bin/python {r['command']}` on {r['date']} in "
        f"{r['elapsed_min']:.0f} min (raw numbers in `bench/out/kube_scale_{r['members']}"
        f"{'-quick' if r['repeats'] == 1 else ''}.json`). Machine: {m['cpu']}, "
        f"{m['cores']} cores, Linux {m['kernel']}, Python {m['python']}; load average at "
        f"the end {' '.join(m['loadavg'])}. The machine is shared with other work: medians "
        f"of {r['repeats']} alternating starts per configuration, the range in brackets. "
        "The fake API server (testkit/fakekube.py) runs in the bench process on the same "
        "2 cores, so wall times include its work; memory does not move between starts.",
        "",
        f"Topology: `bench/topology.py` at {r['members']:,} members ({r['global_services']:,} "
        f"global services, {r['objects']:,} objects: Services, EndpointSlices, Links), "
        "listed in pages of 500 then watched by `dnsside serve --kubeconfig … "
        "--cluster-name east`; `zone+mcs` adds `--mcs-zone clusterset.local.`.",
        "",
        header,
        "|---" * (len(names) + 2) + "|",
    ]

    def row(label: str, key: str, fmt: str, unit: str, target: str) -> str:
        cells = [f"{format(configs[n]['median'][key], fmt)} {unit}"
                 f"{_spread(configs[n]['runs'], key, fmt)}" for n in names]
        return f"| {label} | " + " | ".join(cells) + f" | {target} |"

    lines += [
        row("initial sync, wall (process start → `initial sync done`)", "sync_wall_s", ".1f",
            "s", f"≤ {TARGET_SYNC_S} s"),
        row("initial sync, dnsside's own CPU", "sync_cpu_s", ".1f", "s", ""),
        row("resident memory after sync (VmRSS)", "rss_mb", ".0f", "MB",
            f"≤ {TARGET_RSS_MB} MB"),
        row("the same 2 s later", "rss_settled_mb", ".0f", "MB", ""),
        row("peak resident memory (VmHWM)", "peak_rss_mb", ".0f", "MB", ""),
        row("API change → new answer on the wire, p50", "p50_ms", ".2f", "ms", ""),
        row(f"the same, p99 ({r['events']} changes a start)", "p99_ms", ".2f", "ms",
            f"≤ {TARGET_P99_MS} ms"),
        row("the same, max", "max_ms", ".2f", "ms", ""),
        row("full relist after 410 Expired (reconnect → relisted and idle)", "relist_s",
            ".1f", "s", ""),
        row("peak resident memory, the relist included (VmHWM)", "peak_relist_mb", ".0f",
            "MB", "the memory limit"),
        row("resident memory after the relist", "rss_relist_mb", ".0f", "MB", ""),
    ]
    if "zone" in configs and "zone+mcs" in configs:
        base = configs["zone"]["median"]["rss_mb"]
        both = configs["zone+mcs"]["median"]["rss_mb"]
        lines += [
            "",
            f"**The second naming scheme costs {both - base:+.0f} MB "
            f"({(both / base - 1) * 100:+.0f} %)** of resident memory after the sync "
            f"(target ≤ {TARGET_MCS_EXTRA * 100:+.0f} %), "
            f"{(both - base) * (1 << 20) / r['members']:+,.0f} B per member.",
        ]
    sizes = r.get("sizes") or {}
    if sizes:
        lines += [
            "",
            "### Memory by size, and the limit to set",
            "",
            "Resident memory after the initial sync and its peak with a full relist included "
            "(VmHWM), MB (VmRSS/1024), `zone` / `zone+mcs`; the limit is the smallest "
            f"of {', '.join(LIMITS)} that leaves {HEADROOM - 1:.0%} over the higher peak "
            "(the sizing table of docs/operating.md, `dnsside install --memory-limit`).",
            "",
            "| members | RSS after sync | peak, a relist included | memory limit |",
            "|---|---|---|---|",
        ]
        for members, cfg in sorted(sizes.items(), key=lambda kv: int(kv[0])):
            med = {name: c["median"] for name, c in cfg.items()}
            rss = " / ".join(f"{m['rss_mb']:.0f}" for m in med.values())
            peak = " / ".join(f"{m['peak_relist_mb']:.0f}" for m in med.values())
            limit = suggested_limit(max(m["peak_relist_mb"] for m in med.values()))
            lines.append(f"| {int(members):,} | {rss} MB | {peak} MB | {limit} |")
    lines += [
        "",
        "Propagation is measured end to end: a per-pod mirror Service gets a new ClusterIP "
        "at the fake API server, the watch delivers it, the index re-assembles and "
        "re-encodes that one global service (10-50 members), and a UDP poller sees the new "
        "address for the pod's name (under `--mcs-zone` its KEP-1645 name is checked "
        "too, once the first has changed).",
        "",
    ]
    return "\n".join(lines) + "\n" + (BENCH / "kube_discussion.md").read_text()


LIMITS = ("128Mi", "192Mi", "256Mi", "384Mi", "512Mi", "768Mi", "1Gi", "2Gi")
HEADROOM = 1.2


def suggested_limit(peak_mib: float) -> str:
    """The smallest of LIMITS with HEADROOM over ``peak_mib``."""
    for limit in LIMITS:
        mib = int(limit[:-2]) * (1024 if limit.endswith("Gi") else 1)
        if mib >= peak_mib * HEADROOM:
            return limit
    return f"{int(peak_mib * HEADROOM) + 1}Mi"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
