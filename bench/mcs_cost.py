"""What the second naming scheme costs: `--zone` only vs `--zone` + `--mcs-zone`.

    .venv/bin/python -m bench.mcs_cost              # 100k members, 3 starts each, ~5 min
    .venv/bin/python -m bench.mcs_cost --quick      # 1 start each, shorter dnsperf runs

Same topology as `bench/run.py`'s scale section (`bench/topology.py`, cached in
bench/out/), the same `dnsside serve` command, started alternately without and
with `--mcs-zone clusterset.local.`:

* **memory**: VmRSS after the initial sync (and VmHWM, the peak), per member;
  the figure is the extra RSS of the second scheme over `--zone` only (target:
  at most +25 %);
* **sync**: process start → `initial sync done`;
* **CPU per query** at 20k q/s (dnsperf, server pinned to core 0): the `--zone`
  query file against both configurations (does the second zone slow the first?)
  and the same mix rewritten into KEP-1645 names against the MCS configuration;
* **in-process** (`bench/propagation.py`, one run each): index load time,
  answers and empty non-terminals held, event → new answer p50/p99 (with
  `--mcs-zone` the pod's MCS name must have changed too).

Writes bench/MCS_RESULTS.md (unless --quick: bench/out/MCS_RESULTS-quick.md) and
bench/out/mcs-results.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.run import (
    BENCH,
    OUT,
    PY,
    Dnsside,
    cpu_seconds,
    dnsperf,
    first_name,
    log,
    machine,
    med,
    memory,
    warm_up,
)

MCS_ZONE = "clusterset.local."
MIB = 1 << 20  # run.memory reports MiB
CONFIGS = {"zone": [], "zone+mcs": ["--mcs-zone", MCS_ZONE]}


def mcs_queries(queries: Path) -> Path:
    """The `--zone` query mix in KEP-1645 names. `<cluster>.<svc>.<ns>` has no MCS name: it
    becomes the service's own name (the closest question an MCS client asks)."""
    out = Path(str(queries) + ".mcs")
    if out.exists() and out.stat().st_mtime >= queries.stat().st_mtime:
        return out
    lines = []
    for line in queries.read_text().splitlines():
        name, qtype = line.split()
        labels = name.removesuffix(".svc-global").split(".")
        if len(labels) == 3:  # <cluster>.<svc>.<ns>
            labels = labels[1:]
        lines.append(f"{'.'.join(labels)}.svc.{MCS_ZONE.rstrip('.')} {qtype}")
    out.write_text("\n".join(lines) + "\n")
    return out


def processes(topology: Path, queries: Path, repeats: int, rate: int,
              seconds: float) -> dict[str, Any]:
    """Start each configuration ``repeats`` times, alternately; medians per configuration."""
    mcs_file = mcs_queries(queries)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for rep in range(repeats):
        for name, extra in CONFIGS.items():
            server = Dnsside(topology, extra)
            server.start()
            try:
                server.ready(first_name(queries))
                row: dict[str, Any] = {"sync_seconds": server.sync_seconds,
                                       "sync_cpu_seconds": cpu_seconds(server.pid),
                                       **memory(server.pid)}
                warm_up(server, queries)
                row["us_per_query"] = dnsperf(server, queries, rate, seconds, False).us_per_query
                if extra:
                    warm_up(server, mcs_file)
                    run = dnsperf(server, mcs_file, rate, seconds, False)
                    row["mcs_us_per_query"] = run.us_per_query
                    row["mcs_lost"] = run.lost
                    row["mcs_rcodes"] = run.rcodes
                runs[name].append(row)
                log(f"  {name} rep {rep + 1}: sync {row['sync_seconds']:.1f}s, rss "
                    f"{row['rss_mb']:.0f} MB (peak {row['peak_mb']:.0f}), "
                    f"{row['us_per_query']:.1f} us/q"
                    + (f", MCS names {row['mcs_us_per_query']:.1f} us/q" if extra else ""))
            finally:
                server.stop()
    keys = ("sync_seconds", "sync_cpu_seconds", "rss_mb", "peak_mb", "us_per_query",
            "mcs_us_per_query", "mcs_lost")
    return {name: {**{k: med([r[k] for r in rows if k in r]) for k in keys}, "raw": rows}
            for name, rows in runs.items()}


def in_process(topology: Path, events: int, repeats: int) -> dict[str, Any]:
    """``bench/propagation.py`` per configuration, alternately; medians of the timings."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for _ in range(repeats):
        for name, extra in CONFIGS.items():
            r = subprocess.run([PY, str(BENCH / "propagation.py"), str(topology), "--events",
                                str(events), "--reloads", "1", *extra],
                               capture_output=True, text=True, cwd=BENCH.parent)
            if r.returncode != 0:
                raise RuntimeError(r.stderr)
            run = json.loads(r.stdout)
            runs[name].append(run)
            e = run["event"]
            log(f"  {name} in-process: load {run['load_seconds']:.1f}s (index+encode "
                f"{run['apply_seconds']:.1f}s, CPU {run['apply_cpu_seconds']:.1f}s), "
                f"{run['answers']} answers, event p50 "
                f"{e['p50_ms']:.2f} ms p99 {e['p99_ms']:.2f} ms")
    out: dict[str, Any] = {}
    for name, rows in runs.items():
        out[name] = {
            "answers": rows[0]["answers"], "names": rows[0]["names"],
            "load_seconds": med([r["load_seconds"] for r in rows]),
            "apply_seconds": med([r["apply_seconds"] for r in rows]),
            "apply_cpu_seconds": med([r["apply_cpu_seconds"] for r in rows]),
            "event": {k: med([r["event"][k] for r in rows]) for k in ("p50_ms", "p99_ms")},
            "raw": rows,
        }
    return out


def report(res: dict[str, Any]) -> str:
    m = res["machine"]
    base, both = res["processes"]["zone"], res["processes"]["zone+mcs"]
    members = res["members"]
    extra_mb = both["rss_mb"] - base["rss_mb"]
    ip_base, ip_both = res["in_process"]["zone"], res["in_process"]["zone+mcs"]

    def pct(a: float, b: float) -> str:
        return f"{(b / a - 1) * 100:+.0f} %"

    lines = [
        "# The cost of the KEP-1645 names (`--mcs-zone`)",
        "",
        f"Produced by `.venv/bin/python -m bench.mcs_cost{' --quick' if res['quick'] else ''}` "
        f"on {res['date']} in {res['elapsed_s'] / 60:.1f} min (raw numbers in "
        f"`bench/out/mcs-results{'-quick' if res['quick'] else ''}.json`). "
        "Topology: `bench/topology.py` at "
        f"{members:,} members ({res['global_services']:,} global services, "
        f"{res['objects']:,} objects, the scale section's file). Machine: {m['cpu']}, "
        f"{m['cores']} cores, Linux {m['kernel']}, Python {m['python']}; load average at "
        f"start {' '.join(m['loadavg'])}; shared with other work, so medians of "
        f"{res['repeats']} alternating starts per configuration.",
        "",
        "`zone` = `dnsside serve --source <topology> --cluster-name east` (the default "
        f"`svc-global.` zone); `zone+mcs` = the same plus `--mcs-zone {MCS_ZONE}`.",
        "",
        "| | `zone` | `zone+mcs` | cost of the second scheme |",
        "|---|---|---|---|",
        f"| RSS after sync | {base['rss_mb']:.0f} MB | {both['rss_mb']:.0f} MB | "
        f"**{extra_mb:+.0f} MB ({pct(base['rss_mb'], both['rss_mb'])})**, target ≤ +25 % |",
        f"| RSS per member | {base['rss_mb'] * MIB / members:,.0f} B | "
        f"{both['rss_mb'] * MIB / members:,.0f} B | **{extra_mb * MIB / members:+,.0f} B** |",
        f"| peak RSS (VmHWM) | {base['peak_mb']:.0f} MB | {both['peak_mb']:.0f} MB | "
        f"{pct(base['peak_mb'], both['peak_mb'])} |",
        f"| sync (start → initial sync done) | {base['sync_seconds']:.1f} s | "
        f"{both['sync_seconds']:.1f} s | {both['sync_seconds'] - base['sync_seconds']:+.1f} s "
        f"({pct(base['sync_seconds'], both['sync_seconds'])}) |",
        f"| CPU of the process at sync | {base['sync_cpu_seconds']:.1f} s | "
        f"{both['sync_cpu_seconds']:.1f} s | "
        f"{both['sync_cpu_seconds'] - base['sync_cpu_seconds']:+.1f} s "
        f"({pct(base['sync_cpu_seconds'], both['sync_cpu_seconds'])}) |",
        f"| in-process: read + parse + index + encode | {ip_base['load_seconds']:.1f} s "
        f"| {ip_both['load_seconds']:.1f} s | "
        f"{ip_both['load_seconds'] - ip_base['load_seconds']:+.1f} s |",
        f"| in-process: index + encode only, CPU | {ip_base['apply_cpu_seconds']:.1f} s "
        f"| {ip_both['apply_cpu_seconds']:.1f} s | "
        f"{ip_both['apply_cpu_seconds'] - ip_base['apply_cpu_seconds']:+.1f} s "
        f"({pct(ip_base['apply_cpu_seconds'], ip_both['apply_cpu_seconds'])}) |",
        f"| pre-encoded answers held | {ip_base['answers']:,} | {ip_both['answers']:,} | "
        f"{ip_both['answers'] - ip_base['answers']:+,} |",
        f"| empty non-terminals held | {ip_base['names']:,} | {ip_both['names']:,} | "
        f"{ip_both['names'] - ip_base['names']:+,} |",
        f"| event → new answer p50 / p99 (in-process) | {ip_base['event']['p50_ms']:.2f} / "
        f"{ip_base['event']['p99_ms']:.2f} ms | {ip_both['event']['p50_ms']:.2f} / "
        f"{ip_both['event']['p99_ms']:.2f} ms | both names re-encoded per change |",
        f"| CPU per query at {res['rate']:,} q/s, `--zone` names | "
        f"{base['us_per_query']:.1f} µs | {both['us_per_query']:.1f} µs | "
        f"{pct(base['us_per_query'], both['us_per_query'])} |",
        f"| CPU per query at {res['rate']:,} q/s, the same mix in MCS names | | "
        f"{both['mcs_us_per_query']:.1f} µs ({both['mcs_lost']:.0f} lost) | rcodes "
        f"{both['raw'][0].get('mcs_rcodes', {})} |",
        "",
    ]
    return "\n".join(lines) + "\n" + (BENCH / "mcs_discussion.md").read_text()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=100000)
    p.add_argument("--quick", action="store_true", help="one start each, 3 s dnsperf runs")
    p.add_argument("--repeats", type=int, default=3, help="alternating starts per configuration")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite the report from bench/out/mcs-results.json, run nothing")
    args = p.parse_args()
    results_path = OUT / ("mcs-results-quick.json" if args.quick else "mcs-results.json")
    target = OUT / "MCS_RESULTS-quick.md" if args.quick else BENCH / "MCS_RESULTS.md"
    if args.report_only:
        target.write_text(report(json.loads(results_path.read_text())))
        return 0
    OUT.mkdir(exist_ok=True)
    from bench.topology import cached

    started = time.monotonic()
    topology, meta = cached(args.members, OUT)
    queries = Path(str(topology) + ".queries")
    repeats = 1 if args.quick else args.repeats
    res: dict[str, Any] = {
        "quick": args.quick, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(), "members": meta["members"], "objects": meta["objects"],
        "global_services": meta["global_services"], "repeats": repeats, "rate": 20000,
    }
    log(f"processes at {meta['members']:,} members, {repeats} starts per configuration")
    res["processes"] = processes(topology, queries, repeats, 20000, 3 if args.quick else 8)
    log("in-process load and propagation")
    res["in_process"] = in_process(topology, 50 if args.quick else 300, repeats)
    res["elapsed_s"] = time.monotonic() - started
    results_path.write_text(json.dumps(res, indent=1, default=str))
    target.write_text(report(res))
    log(f"wrote {target.relative_to(BENCH.parent)}")
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
