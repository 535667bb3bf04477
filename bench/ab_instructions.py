"""CPU per answer that does not depend on the machine's load: instructions per query.

    .venv/bin/python -m bench.ab_instructions --size 10000 \\
        --variant before=/tmp/ab-before --variant after=. --base before

For each variant (``NAME=TREE``: a checkout or ``git archive`` of dnsside, imported
through ``PYTHONPATH=TREE`` with ``PYTHONSAFEPATH=1``, as ``bench/ab.py`` runs one), a
child process builds the index of the topology from its ``--source`` file as
``dnsside serve`` does, encodes the dnsperf query file as dnsperf sends it (EDNS 0, 4096
bytes, RD, a new ID each query), answers it once to warm every cache the query path
keeps (the OPT lookup, a ring's pages), then feeds it through ``Responder.respond`` once
more under ``valgrind --tool=callgrind``, collecting only inside that pass
(``--toggle-collect`` on the C function that drives it, ``itertools.starmap``'s next):
instructions executed per answered query, the same from one run to the next whatever
else the machine runs (``PYTHONHASHSEED`` fixed). ``perf stat`` has no counters on this
machine, and dnsperf's figures at saturation swing ±15-30 % a repeat.

The figure is the query path in process (``respond`` and what it calls, plus the
call itself), not the socket loop around it, which no variant changes. ``--time`` also
gives ns per query without valgrind (CPU time, best of ``--passes`` passes, the
variants taking turns), which does depend on the load.

The subtle point: the child must import nothing from this checkout but this file, run
by path, so that ``PYTHONPATH`` alone decides which dnsside answers; it therefore
repeats the few lines it needs (the wire name, the query encoding).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QTYPES = {"A": 1, "NS": 2, "SOA": 6, "TXT": 16, "AAAA": 28, "SRV": 33, "ANY": 255}
# dnsperf -e: an OPT record, version 0, 4096 bytes, no DO, no options.
DNSPERF_OPT = b"\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x00"


# --------------------------------------------------------------------------- the child


def wire_name(name: str) -> bytes:
    out = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split("."))
    return out + b"\x00"


def encode_queries(path: Path, limit: int) -> list[bytes]:
    """The query file's lines as dnsperf sends them: ID counting up, RD, EDNS."""
    out = []
    with path.open() as f:
        for i, line in enumerate(f):
            if i == limit:
                break
            name, qtype = line.split()
            out.append((i & 0xFFFF).to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00"
                       b"\x00\x01" + wire_name(name) + QTYPES[qtype].to_bytes(2, "big")
                       + b"\x00\x01" + DNSPERF_OPT)
    return out


def query_forms(path: Path, limit: int) -> list[tuple[bytes, bool]]:
    """Each query of the file in the forms the fast path treats apart, in turn: as dnsperf
    sends it; without EDNS or RD (a 512-byte limit: pages), every 5th name in capitals;
    with DO, CD and a 1232-byte OPT; as dnsperf over TCP."""
    out = []
    for i, query in enumerate(encode_queries(path, limit)):
        qend = query.find(0, 12) + 5
        plain = query[:2] + b"\x00\x00" + query[4:11] + b"\x00" + query[12:qend]
        if i % 5 == 0:
            plain = plain[:12] + plain[12:qend - 4].upper() + plain[qend - 4:]
        do_cd = (query[:3] + b"\x10" + query[4:qend]
                 + b"\x00\x00\x29\x04\xd0\x00\x00\x80\x00\x00\x00")
        out += [(query, True), (plain, True), (do_cd, True), (query, False)]
    return out


def child(args: argparse.Namespace) -> int:
    """Build the index through the dnsside on PYTHONPATH, then answer the queries."""
    import time
    from collections import deque
    from itertools import repeat, starmap

    from dnsside.config import Config
    from dnsside.model.events import Kind, Replace, Synced
    from dnsside.sources.file import load_records

    config = Config(source=args.topology, cluster_name="east")
    for setting in args.set:
        key, value = setting.split("=", 1)
        current = getattr(config, key)  # a number flag's value as a number
        number = isinstance(current, (int, float)) and not isinstance(current, bool)
        setattr(config, key, type(current)(value) if number else value)
    try:
        from dnsside.core.build import make_index
    except ImportError:  # a tree from before the one builder (the A/B's "before", dcb6efb)
        from dnsside.core.index import Index
        from dnsside.core.publishing import make_responder
        from dnsside.serving.app import index_options  # type: ignore[attr-defined]
        options = index_options(config)
        index = Index(make_responder(config.zones, options.zone, config.mcs_zones), options)
    else:
        index = make_index(config)
    records, _ = load_records(Path(args.topology))
    index.apply([Replace(frozenset(Kind), tuple(records)), Synced()])
    responder = index.responder
    if args.child == "digest":
        import hashlib

        digest = hashlib.sha256()
        for _ in range(2):
            for query, udp in query_forms(Path(args.queries), args.limit):
                reply = responder.respond(query, udp)
                assert reply is not None
                digest.update(len(reply).to_bytes(2, "big") + reply)
        print(f"digest {digest.hexdigest()}")
        return 0
    queries = encode_queries(Path(args.queries), args.limit)
    respond = responder.respond
    answered = sum(1 for q in queries if respond(q, True))  # warm: OPT lookup, pages
    if answered != len(queries):
        print(f"only {answered} of {len(queries)} queries answered", file=sys.stderr)
        return 1
    if args.child == "callgrind":
        # Valgrind ran the setup uninstrumented (4x faster); from here on it counts, and
        # collects only inside starmap's next (a C function nothing else here calls,
        # hence not map): each respond(query, True), nothing else.
        subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True,
                       capture_output=True)
        deque(starmap(respond, zip(queries, repeat(True))), maxlen=0)  # noqa: RUF058
        print(f"queries {len(queries)}")
        return 0
    best = float("inf")
    for _ in range(args.passes):
        t = time.process_time_ns()
        deque(starmap(respond, zip(queries, repeat(True))), maxlen=0)  # noqa: RUF058
        best = min(best, time.process_time_ns() - t)
    print(f"queries {len(queries)} ns {best / len(queries):.1f}")
    return 0


# --------------------------------------------------------------------------- the parent


def child_command(tree: str, mode: str, topology: Path, queries: Path, limit: int,
                  sets: list[str], passes: int = 1) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONHASHSEED="0",
               PYTHONPATH=str(Path(tree).resolve()))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--topology",
           str(topology), "--queries", str(queries), "--limit", str(limit), "--passes",
           str(passes), *(f"--set={s}" for s in sets)]
    return cmd, env


def instructions(tree: str, topology: Path, queries: Path, limit: int, sets: list[str],
                 keep: Path | None = None) -> tuple[float, int]:
    """(instructions per query, queries) of one variant under callgrind."""
    cmd, env = child_command(tree, "callgrind", topology, queries, limit, sets)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
             "--toggle-collect=starmap_next", f"--callgrind-out-file={out}", *cmd],
            env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"{tree}: the child failed:\n{done.stderr[-3000:]}")
        n = int(re.search(r"queries (\d+)", done.stdout).group(1))  # type: ignore[union-attr]
        text = out.read_text()
        total = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
        if keep is not None:
            keep.write_text(text)
    return total / n, n


def served(tree: str, topology: Path, queries: Path, rate: int, seconds: float,
           sets: list[str]) -> tuple[float, int]:
    """(instructions per answered query, answers) of a whole ``dnsside serve`` process under
    callgrind, counted from a zeroing to a dump around one dnsperf run at ``rate`` (what
    valgrind's slowness allows: a few hundred a second): the socket loop, the event loop's
    turns and all, for the queries of that window."""
    sys.path.insert(0, str(ROOT))
    from bench import run

    port = run.free_port()
    flags = [f"--{s.split('=', 1)[0].replace('_', '-')}={s.split('=', 1)[1]}" for s in sets]
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONHASHSEED="0",
               PYTHONPATH=str(Path(tree).resolve()))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}", sys.executable, "-m", "dnsside", "serve",
             "--source", str(topology), "--cluster-name", "east", "--listen",
             f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0", "--gateway-probe", "off",
             *flags], env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        try:
            assert proc.stderr is not None
            said = []
            for line in proc.stderr:
                said.append(line)
                if "initial sync done" in line:
                    break
            else:
                raise SystemExit(f"{tree}: dnsside serve ended before its first sync:\n"
                                 + "".join(said[-10:]))
            import threading

            threading.Thread(target=proc.stderr.read, daemon=True).start()

            def control(*words: str) -> None:
                subprocess.run(["callgrind_control", *words, str(proc.pid)], check=True,
                               capture_output=True, timeout=120)

            control("--instr=on")
            server = run.Server()
            server.port, server.proc = port, proc
            run.dnsperf(server, queries, rate, 2, latency=False)  # warm
            control("--zero")
            done = run.dnsperf(server, queries, rate, seconds, latency=False)
            control("--dump")
            dumps = sorted(Path(tmp).glob("callgrind.out*"))
            text = max(dumps, key=lambda p: p.stat().st_mtime).read_text()
        finally:
            proc.terminate()
            proc.wait(60)
    total = sum(int(m) for m in re.findall(r"^(?:summary|totals): (\d+)", text, re.M)[:1])
    return total / max(done.completed, 1), done.completed


def timed(tree: str, topology: Path, queries: Path, limit: int, sets: list[str],
          passes: int) -> float:
    cmd, env = child_command(tree, "time", topology, queries, limit, sets, passes)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{tree}: the child failed:\n{done.stderr[-3000:]}")
    return float(re.search(r"ns ([\d.]+)", done.stdout).group(1))  # type: ignore[union-attr]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=TREE[:setting=value,...]: a dnsside tree (a checkout or a git "
                   "archive), optionally with Config fields set (round_robin=off)")
    p.add_argument("--size", type=int, default=10000, help="topology members (0: the demo)")
    p.add_argument("--limit", type=int, default=50000, help="queries of the file used")
    p.add_argument("--query-file", type=Path, help="another query file (NAME TYPE a line) "
                   "for the topology: one kind of answer alone, say")
    p.add_argument("--base", help="a variant's NAME: the others as ratios to it")
    p.add_argument("--time", type=int, default=0, metavar="ROUNDS",
                   help="also ns per query without valgrind: ROUNDS rounds, variants in turn")
    p.add_argument("--passes", type=int, default=5, help="passes per --time round (best)")
    p.add_argument("--serve", type=int, default=0, metavar="RATE",
                   help="instead: a whole `dnsside serve` under callgrind, dnsperf at RATE "
                   "q/s (a few hundred) for --seconds: instructions per answered query, the "
                   "socket loop included; moves ±5 %% between runs (batching depends on timing)")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--keep", type=Path, help="write each variant's callgrind.out here")
    p.add_argument("--digest", action="store_true",
                   help="only the SHA-256 of every reply to the query file's queries in four "
                   "forms (EDNS, none, DO+CD, TCP), twice over: equal digests, equal bytes")
    p.add_argument("--child", choices=("callgrind", "time", "digest"), help=argparse.SUPPRESS)
    p.add_argument("--topology", help=argparse.SUPPRESS)
    p.add_argument("--queries", help=argparse.SUPPRESS)
    p.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    sys.path.insert(0, str(ROOT))
    from bench import run

    run.OUT.mkdir(exist_ok=True)
    topology, queries = run.topology_files(args.size)
    queries = args.query_file or queries
    variants = []
    for v in args.variant or ["now=."]:
        name, spec = v.split("=", 1)
        tree, _, settings = spec.partition(":")
        variants.append((name, tree, [s for s in settings.split(",") if s]))
    if args.digest:
        for name, tree, sets in variants:
            cmd, env = child_command(tree, "digest", topology, queries, args.limit, sets)
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            print(f"{name}: {done.stdout.strip() or done.stderr[-2000:]}", flush=True)
        return 0
    if args.serve:
        print(f"whole process, {args.size or 'demo'} members, dnsperf at {args.serve} q/s for "
              f"{args.seconds:g} s under callgrind:")
        first = 0.0
        for name, tree, sets in variants:
            ir, n = served(tree, topology, queries, args.serve, args.seconds, sets)
            first = first or ir
            print(f"{name:>12}: {ir:9,.0f} Ir per answer ({n} answers)  {ir / first:.3f} x "
                  f"{variants[0][0]}", flush=True)
        return 0
    irs: dict[str, float] = {}
    for name, tree, sets in variants:
        keep = args.keep / f"callgrind.{name}.out" if args.keep else None
        if keep:
            keep.parent.mkdir(parents=True, exist_ok=True)
        irs[name], n = instructions(tree, topology, queries, args.limit, sets, keep)
        print(f"{name}: {irs[name]:,.0f} instructions per query ({n} queries)", flush=True)
    ns: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _ in range(args.time):
        for name, tree, sets in variants:
            ns[name].append(timed(tree, topology, queries, args.limit, sets, args.passes))
    print(f"\n{args.size or 'demo'} members, {args.limit} queries of {queries.name}, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, tree, sets in variants:
        line = f"{name:>12} ({shlex.join([tree, *sets])}): {irs[name]:9,.0f} Ir/query"
        if args.base and name != args.base:
            line += f"  {irs[name] / irs[args.base]:.3f} x {args.base}"
        if ns[name]:
            line += f"  ns/query {' '.join(f'{x:,.0f}' for x in ns[name])}"
            if args.base and name != args.base:
                ratios = [a / b for a, b in zip(ns[name], ns[args.base], strict=True)]
                line += f" (x {args.base}: median {statistics.median(ratios):.3f})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
