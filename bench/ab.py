"""A/B of dnsside variants against NSD, for development (the report is bench/run.py's).

    .venv/bin/python -m bench.ab --variant batch="--udp-io batch" \\
        --variant plain="--udp-io plain" --rates 5000,20000,max --repeats 5

Same machinery as ``bench/run.py`` (servers on core 0, dnsperf on core 1, the
same query file and NSD zone), but all servers run at once and take turns at
every rate of every repeat, so slow drifts of a shared machine hit them alike.
Prints, per rate, the median CPU µs per answered query of each variant, the
median of its per-repeat ratios to NSD, answered q/s and the worst loss; with
``--base NAME``, also each variant's per-repeat ratios to that one (a change
against the code before it, ``@PYTHONPATH`` pointing at the old checkout).

``--instructions`` adds, beside those, a figure the machine's load does not move:
instructions per answered query of each variant's query path in process under callgrind
(``bench/ab_instructions.py``: the same topology and query file, the variant's tree from its
``@PYTHONPATH`` or this checkout, its ``--flag value`` words as Config fields). On a shared
machine one repeat of dnsperf's figure swings ±15-30 %, and "saturation" is dnsperf's own
ceiling as much as the server's; the instruction count repeats within 1 %.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import run  # bench/run.py


class Variant(run.Dnsside):
    """dnsside with extra flags; ``@NAME=value`` among them sets an environment variable."""

    def __init__(self, topology: Path, words: list[str]) -> None:
        super().__init__(topology, [w for w in words if not w.startswith("@")],
                         env=dict(w[1:].split("=", 1) for w in words if w.startswith("@")))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=\"extra dnsside flags\" (repeatable; default: one, no flags); "
                   "@VAR=value among the flags sets an environment variable")
    p.add_argument("--rates", default="5000,20000,50000,max")
    p.add_argument("--seconds", type=float, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", type=int, default=10000, help="topology members (0: the demo)")
    p.add_argument("--no-nsd", action="store_true")
    p.add_argument("--base", help="a variant's NAME: print the others' CPU per answer as "
                   "ratios to it, per repeat and their median")
    p.add_argument("--instructions", action="store_true",
                   help="also instructions per query of each variant in process, under "
                   "callgrind (bench/ab_instructions.py): load-independent")
    args = p.parse_args()
    run.OUT.mkdir(exist_ok=True)
    variants = [v.split("=", 1) for v in args.variant] or [["dnsside", ""]]
    topology, queries = run.topology_files(args.size)
    from bench.nsd_zone import write_nsd
    from testkit.inprocess import file_index

    index = file_index(topology, cluster_name=run.CLUSTER)
    conf = write_nsd(index, run.OUT / "nsd-ab", run.free_port())
    del index
    qname = run.first_name(queries)
    makers: list[tuple[str, Any]] = [
        (name, lambda flags=flags: Variant(topology, shlex.split(flags)))
        for name, flags in variants]
    if not args.no_nsd:
        makers.append(("nsd", lambda: run.Nsd(conf)))
    rates = [0 if r == "max" else int(r) for r in args.rates.split(",")]
    raw: dict[tuple[str, int], list[run.Run]] = {}
    servers: list[tuple[str, run.Server]] = []
    try:
        # All servers run side by side (idle ones cost nothing) and take turns at every
        # rate of every repeat, in a rotating order: drifts of a shared machine hit all.
        for name, make in makers:
            server = make()
            server.start()
            servers.append((name, server))
        for _, server in servers:
            server.ready(qname)  # type: ignore[attr-defined]
            run.warm_up(server, queries)
        for rep in range(args.repeats):
            for rate in rates:
                k = rep % len(servers)
                for name, server in servers[k:] + servers[:k]:
                    r = run.dnsperf(server, queries, rate, args.seconds, latency=False)
                    raw.setdefault((name, rate), []).append(r)
                    run.log(f"rep {rep + 1} {name} @{rate or 'max'}: {r.us_per_query:.2f} us/q "
                            f"{r.qps:.0f} q/s lost {r.lost} cpu {r.cpu_util:.0%}")
    finally:
        for _, server in servers:
            server.stop()
    names = [n for n, _ in makers]
    print(f"\n{args.size or 'demo'} members, {args.repeats} repeats x {args.seconds:g} s")
    print(f"{'rate':>7} " + " ".join(f"{n:>22}" for n in names))
    for rate in rates:
        cells = []
        for name in names:
            runs = raw[(name, rate)]
            us = statistics.median(r.us_per_query for r in runs)
            cell = f"{us:6.2f}"
            if name != "nsd" and ("nsd", rate) in raw:
                ratios = [a.us_per_query / b.us_per_query
                          for a, b in zip(runs, raw[("nsd", rate)], strict=False)]
                cell += f" {statistics.median(ratios):.2f}x"
            if rate == 0:
                cell += f" {statistics.median(r.qps for r in runs) / 1000:.0f}k"
            lost = max(r.lost for r in runs)
            cell += f" L{lost}" if lost else ""
            cells.append(f"{cell:>22}")
        print(f"{rate or 'max':>7} " + " ".join(cells))
    if args.base:
        print(f"\nCPU per answer / {args.base}'s, per repeat (same rate, same repeat):")
        for rate in rates:
            base = raw[(args.base, rate)]
            for name in names:
                if name in (args.base, "nsd"):
                    continue
                ratios = [a.us_per_query / b.us_per_query
                          for a, b in zip(raw[(name, rate)], base, strict=True)]
                print(f"{rate or 'max':>7} {name}: median {statistics.median(ratios):.3f} "
                      f"({' '.join(f'{r:.3f}' for r in ratios)})")
    if args.instructions:
        print_instructions(variants, topology, queries, args.base)
    return 0


def config_settings(words: list[str]) -> list[str]:
    """A variant's ``--flag value`` / ``--flag=value`` words as Config fields (flag=value)."""
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            if "=" in word:
                name, value = word[2:].split("=", 1)
            else:
                name, value = word[2:], words[i + 1] if i + 1 < len(words) else ""
                i += 1
            out.append(f"{name.replace('-', '_')}={value}")
        i += 1
    return out


def print_instructions(variants: list[list[str]], topology: Path, queries: Path,
                       base: str | None) -> None:
    """Instructions per query of each variant's query path, in process, under callgrind."""
    from bench import ab_instructions

    root = Path(__file__).resolve().parent.parent
    counts: dict[str, float] = {}
    print("\nInstructions per query, Responder.respond in process under callgrind "
          f"({queries.name}, every query; load-independent):")
    for name, flags in variants:
        words = shlex.split(flags)
        env = dict(w[1:].split("=", 1) for w in words if w.startswith("@"))
        tree = env.get("PYTHONPATH", str(root))
        settings = config_settings([w for w in words if not w.startswith("@")])
        counts[name], _ = ab_instructions.instructions(tree, topology, queries, 50000,
                                                       settings)
        ratio = (f"  {counts[name] / counts[base]:.3f} x {base}"
                 if base and base in counts and name != base else "")
        print(f"  {name:>12}: {counts[name]:9,.0f}{ratio}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
