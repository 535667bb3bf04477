"""Zone transfer at scale: AXFR and IXFR from dnsside, what the history costs in memory, how
fast an NSD secondary told by NOTIFY follows a change, and how its answers compare with
dnsside's own.

    .venv/bin/python -m bench.transfer [--members 100000]   # ~6 min at 100k
    .venv/bin/python -m bench.transfer --quick               # 10k members, fewer of everything
    .venv/bin/python -m bench.transfer --contention [...]    # bench/xfr_contention.py

The topology is `bench/topology.py`'s (the one `bench/run.py` and `bench/kube_scale.py` use),
loaded into the fake API server of testkit/ (in this process, on its own thread), and
`dnsside serve --kubeconfig` watches it: a change is one object written at the fake, as in a
cluster, where the file source would re-read a 160 MB file (3-4 s at 100k) for each one.
A change is one per-pod mirror Service getting a new ClusterIP (that pod's address
changes in its own A record, its cluster's and its service's), or one deleted (the member
is gone).

1. Memory and the AXFR: dnsside is started without `--allow-transfer` and then with it
   (the records are then also kept as zone versions, and a history of differences grows
   with each change); VmRSS after the sync and the first version, after five AXFRs (their
   VmHWM: the transfer's messages are built whole before they are sent), and with the
   history full (`--ixfr-history` versions of one-pod changes). The AXFR is timed from the
   request to the last byte of the last message by a raw TCP reader (no DNS library in the
   loop: parsing 600k records in Python would be the measurement), median of 5.
2. IXFR for one change: asked from the serial before it, timed the same way, median of 5.
3. Convergence: NSD (4.x) as a secondary, dnsside sending it NOTIFY (`--notify`) and NSD
   allowing NOTIFY from 127.0.0.1; a change at the fake → the time until NSD answers the
   pod's name with the new address (and until dnsside does), p50/max; the transfer each
   time is read from dnsside's log line (IXFR with differences, or the whole zone).
4. dnsperf against the NSD secondary and dnsside directly, taking turns, the same query
   file and rates as `bench/run.py` (server pinned to core 0, dnsperf to core 1).

Writes bench/TRANSFER_RESULTS.md (--quick: bench/out/TRANSFER_RESULTS-quick.md), prints the
same, and keeps the raw numbers in bench/out/transfer_<members>.json.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rdatatype
import dns.rrset

from bench import run
from bench.kube_scale import cpu_settled, flippable, proc_stat
from bench.topology import cached
from testkit.secondaries import nsd_conf, serial
from testkit.serve import Dnsside, wait_for
from testkit.threadedkube import ThreadedKube

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUT = BENCH / "out"
ZONE = "svc-global."
SOA = 6


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- transfers


@dataclass
class Xfr:
    wire: list[bytes]  # the messages (first: "bytes" below shadows the type in this body)
    seconds: float
    messages: int
    records: int
    bytes: int  # DNS messages, without TCP's two-octet length prefixes


def skip_name(msg: bytes, p: int) -> int:
    """The offset after the (possibly compressed) name at ``p``."""
    while True:
        n = msg[p]
        if n == 0:
            return p + 1
        if n & 0xC0 == 0xC0:
            return p + 2
        p += n + 1


def first_soa_tail(msg: bytes) -> bytes:
    """The last 20 octets (serial and timers) of the first record of a transfer's first
    message, which must be the SOA; the transfer's last message ends with the same SOA."""
    p = 12
    for _ in range(int.from_bytes(msg[4:6], "big")):
        p = skip_name(msg, p) + 4
    p = skip_name(msg, p)
    rtype = int.from_bytes(msg[p:p + 2], "big")
    rdlen = int.from_bytes(msg[p + 8:p + 10], "big")
    if rtype != SOA:
        raise RuntimeError(f"the transfer starts with type {rtype}, not the SOA")
    return msg[p + 10 + rdlen - 20:p + 10 + rdlen]


def read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RuntimeError("the server closed the connection mid-transfer")
        buf += chunk
    return bytes(buf)


def xfr(port: int, qtype: str, since: int | None = None, timeout: float = 120.0) -> Xfr:
    """One AXFR or IXFR (from serial ``since``) of the zone over TCP, timed from sending the
    request to the last octet of the last message. The end is found without parsing the
    records: the last message ends with the SOA that opened the transfer. (An IXFR of
    several messages could end one with the new SOA in the middle; the ones measured here
    fit one message, and the record count is checked against dnsside's log line.)"""
    q = dns.message.make_query(ZONE, qtype)
    if since is not None:
        q.authority.append(dns.rrset.from_text(ZONE, 0, "IN", "SOA", f". . {since} 0 0 0 0"))
    wire = q.to_wire()
    messages: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        started = time.perf_counter()
        s.sendall(len(wire).to_bytes(2, "big") + wire)
        tail = b""
        while True:
            msg = read_exactly(s, int.from_bytes(read_exactly(s, 2), "big"))
            messages.append(msg)
            if len(messages) == 1:
                if msg[3] & 0x0F:
                    raise RuntimeError(f"{qtype}: rcode {msg[3] & 0x0F}")
                tail = first_soa_tail(msg)
                if int.from_bytes(msg[6:8], "big") == 1:  # the SOA alone: up to date
                    break
                if msg.endswith(tail) and int.from_bytes(msg[6:8], "big") > 1:
                    break
            elif msg.endswith(tail):
                break
        seconds = time.perf_counter() - started
    return Xfr(messages, seconds, len(messages),
               sum(int.from_bytes(m[6:8], "big") for m in messages), sum(len(m) for m in messages))


def ixfr_content(x: Xfr) -> dict[str, int]:
    """An IXFR's records by role (parsed after the timing): SOAs, deleted, added."""
    # One RR an RRset, or dnspython merges the SOAs (and drops duplicates): the order is
    # the meaning.
    rrs = [(rrset.rdtype, rd) for m in x.wire for rrset in dns.message.from_wire(
        m, ignore_trailing=False, one_rr_per_rrset=True).answer for rd in rrset]
    out = {"soa": 0, "deleted": 0, "added": 0}
    adding = None  # an IXFR's body: SOA(old) deletions SOA(new) additions, ..., SOA(new)
    for rdtype, _ in rrs[1:-1]:
        if rdtype == dns.rdatatype.SOA:
            out["soa"] += 1
            adding = not adding if adding is not None else False
        else:
            out["added" if adding else "deleted"] += 1
    out["soa"] += min(len(rrs), 2)
    return out


# --------------------------------------------------------------------------- processes


class NsdSecondary(run.Server):
    """NSD as a secondary of dnsside, pinned to the server core like bench/run.py's servers:
    it transfers at start and again on each NOTIFY from 127.0.0.1 (its SOA refresh, 7,200
    s, would be the only other trigger)."""

    name = "nsd-secondary"

    def __init__(self, tmp: Path, primary_port: int, port: int) -> None:
        super().__init__()
        self.tmp = tmp
        self.port = port
        self.conf = tmp / "nsd.conf"
        self.conf.write_text(nsd_conf(tmp, port, primary_port, [ZONE], notify=True))
        subprocess.run(["nsd-checkconf", str(self.conf)], check=True, capture_output=True)

    def command(self) -> list[str]:
        return ["nsd", "-d", "-c", str(self.conf)]


@dataclass
class Served:
    """What bench/run.py's dnsperf() needs of a server: a name, a port, a pid."""

    name: str
    port: int
    pid: int


def rss_mb(pid: int) -> dict[str, float]:
    _, rss, hwm = proc_stat(pid)
    return {"rss_mb": rss / 1024, "hwm_mb": hwm / 1024}


def tree_rss_mb(pid: int) -> dict[str, float]:
    """The largest VmRSS among ``pid`` and its descendants (NSD's main, xfrd and server
    processes share the zone's pages after fork(): a sum would count them twice), and the
    number of processes."""
    rss = [rss_mb(p)["rss_mb"] for p in run.tree(pid) if Path(f"/proc/{p}").exists()]
    return {"rss_mb": max(rss), "processes": len(rss)}


def start_dnsside(kube: ThreadedKube, extra: Sequence[str], listen: str = "127.0.0.1:0"
                  ) -> tuple[Dnsside, float]:
    started = time.perf_counter()
    srv = Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east", "--log-level",
                  "info", *extra, listen=listen, wrap=["taskset", "-c", run.SERVER_CPU],
                  wait_synced=False, timeout=600)
    srv.wait_log("initial sync done", 600)
    return srv, time.perf_counter() - started


def a_records(port: int, name: str) -> list[str] | None:
    q = dns.message.make_query(name, "A")
    q.flags &= ~dns.flags.RD
    try:
        msg = dns.query.udp(q, "127.0.0.1", port=port, timeout=0.5)
    except (dns.exception.Timeout, OSError):
        return None
    return sorted(rd.to_text() for rrset in msg.answer if rrset.rdtype == dns.rdatatype.A
                  for rd in rrset)


def answer_gaps(port: int, name: str, action: Callable[[], object], tcp: bool = False,
                pad: float = 0.3) -> dict[str, float]:
    """Ask ``name`` back to back, over UDP or one TCP connection, from a thread, while
    ``action`` runs in this one (and ``pad`` seconds before and after): the slowest reply
    and the median, in ms. A transfer is built on dnsside's event loop in one step: TCP,
    served by that loop, waits meanwhile; UDP has threads of its own."""
    stop = threading.Event()
    times: list[float] = []
    q = dns.message.make_query(name, "A").to_wire()

    def poll() -> None:
        kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
        with socket.socket(socket.AF_INET, kind) as s:
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            while not stop.is_set():
                t = time.perf_counter()
                if tcp:
                    s.sendall(len(q).to_bytes(2, "big") + q)
                    read_exactly(s, int.from_bytes(read_exactly(s, 2), "big"))
                else:
                    s.send(q)
                    s.recv(65535)
                times.append(time.perf_counter() - t)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    time.sleep(pad)
    action()
    time.sleep(pad)
    stop.set()
    th.join(15)
    return {"max_ms": max(times) * 1000, "p50_ms": median(times) * 1000, "n": len(times)}


class Changes:
    """One-pod changes at the fake API server: per-pod mirror Services of different global
    services, each given a ClusterIP never used before, or deleted."""

    def __init__(self, kube: ThreadedKube, services: list[dict[str, Any]]) -> None:
        self.kube = kube
        self.todo = list(services)
        self.n = 0

    def next(self, delete: bool = False) -> tuple[str, str | None]:
        """Make one change; (the pod's name, its new address or None when deleted)."""
        svc = json.loads(json.dumps(self.todo.pop(0)))
        meta = svc["metadata"]
        cluster = meta["labels"]["mirror.linkerd.io/cluster-name"]
        pod, name, ns = meta["annotations"]["mirror.linkerd.io/remote-svc-fq-name"].split(
            ".")[:3]
        host = f"{pod}.{cluster}.{name}.{ns}.{ZONE}"
        if delete:
            self.kube.call(self.kube.kube.delete, "Service", meta["namespace"], meta["name"])
            return host, None
        self.n += 1
        ip = f"10.250.{self.n // 256}.{self.n % 256}"
        svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = ip, [ip]
        self.kube.call(self.kube.kube.apply, svc)
        return host, ip


def new_serial(port: int, after: int, timeout: float = 10.0) -> int:
    return wait_for(lambda: (s if (s := serial(port, ZONE)) and s > after else None), timeout,
                    f"a serial after {after}")


def transfer_line(srv: Dnsside, start: int, new: int, timeout: float = 5.0) -> str:
    """dnsside's log line of the (first) transfer of serial ``new`` after line ``start``."""
    pattern = re.compile(rf"transfer: (AXFR|IXFR)\b.* serial {new}, ")
    return wait_for(lambda: next((x for x in srv.lines[start:] if pattern.search(x)), None),
                    timeout, f"the transfer of serial {new}")


def summary(line: str) -> dict[str, Any]:
    m = re.search(r"transfer: (\w+)(?: from (\d+))? of \S+ to \S+: serial (\d+), (.*?), "
                  r"(\d+) records, (\d+) bytes in (\d+) messages, ([\d.]+) s", line)
    if not m:
        return {"line": line}
    return {"type": m.group(1), "from": m.group(2), "serial": int(m.group(3)),
            "what": m.group(4), "records": int(m.group(5)), "bytes": int(m.group(6)),
            "messages": int(m.group(7)), "server_s": float(m.group(8)), "line": line}


# --------------------------------------------------------------------------- the run


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def measure(members: int, quick: bool, changes_n: int, history: int, repeats: int,
            seconds: float) -> dict[str, Any]:
    path, meta = cached(members, OUT)
    items = json.loads(path.read_text())["items"]
    queries = Path(str(path) + ".queries")
    services = flippable(items, 2 + changes_n + history + 10)
    res: dict[str, Any] = {"members": meta["members"], "objects": meta["objects"],
                           "global_services": meta["global_services"], "history": history}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        kube = ThreadedKube(tmp)
        t0 = time.perf_counter()
        kube.call(kube.kube.load, items)
        del items
        log(f"{members:,} members: fake API server loaded with {meta['objects']:,} objects in "
            f"{time.perf_counter() - t0:.0f} s")
        change = Changes(kube, services)

        # Without --allow-transfer: the baseline memory.
        srv, sync_s = start_dnsside(kube, [])
        cpu_settled(srv.proc.pid)
        res["without"] = {"sync_s": sync_s, **rss_mb(srv.proc.pid)}
        srv.stop(timeout=30)
        log(f"without --allow-transfer: sync {sync_s:.1f} s, RSS "
            f"{res['without']['rss_mb']:.0f} MB")

        dport, nport = run.free_port(), run.free_port()
        while nport == dport:
            nport = run.free_port()
        flags = ["--allow-transfer", "127.0.0.1", "--notify", f"127.0.0.1:{nport}",
                 "--ixfr-history", str(history)]
        srv, sync_s = start_dnsside(kube, flags, listen=f"127.0.0.1:{dport}")
        nsd: NsdSecondary | None = None
        try:
            srv.wait_log("cut: the first", 30)
            cpu_settled(srv.proc.pid)
            res["with"] = {"sync_s": sync_s, **rss_mb(srv.proc.pid)}
            log(f"with --allow-transfer: sync {sync_s:.1f} s, RSS {res['with']['rss_mb']:.0f} MB")

            # 1. AXFR, five times.
            s0 = serial(dport, ZONE)
            assert s0 is not None
            axfrs = []
            for _ in range(5):
                mark = len(srv.lines)
                x = xfr(dport, "AXFR")
                axfrs.append({**{k: v for k, v in asdict(x).items() if k != "wire"},
                              "log": summary(transfer_line(srv, mark, s0)),
                              **rss_mb(srv.proc.pid)})
                log(f"  AXFR: {x.records:,} records, {x.bytes:,} bytes, {x.messages} messages, "
                    f"{x.seconds * 1000:.0f} ms (dnsside: {axfrs[-1]['log'].get('server_s')} s "
                    "to build)")
            res["axfr"] = axfrs
            name = run.first_name(queries)
            res["gaps_idle"] = answer_gaps(dport, name, lambda: time.sleep(1))
            res["gaps_axfr"] = answer_gaps(dport, name, lambda: xfr(dport, "AXFR"))
            res["gaps_idle_tcp"] = answer_gaps(dport, name, lambda: time.sleep(1), tcp=True)
            res["gaps_axfr_tcp"] = answer_gaps(dport, name, lambda: xfr(dport, "AXFR"),
                                               tcp=True)
            log(f"  slowest answer while idle: UDP {res['gaps_idle']['max_ms']:.1f} ms, TCP "
                f"{res['gaps_idle_tcp']['max_ms']:.1f} ms; during an AXFR: UDP "
                f"{res['gaps_axfr']['max_ms']:.0f} ms, TCP {res['gaps_axfr_tcp']['max_ms']:.0f} "
                "ms")
            cpu_settled(srv.proc.pid)
            res["with_after_axfr"] = rss_mb(srv.proc.pid)

            # 2. IXFR of one change: an address, then a member gone.
            res["ixfr"] = {}
            for kind, delete in (("address changed", False), ("member gone", True)):
                before = serial(dport, ZONE) or 0
                host, ip = change.next(delete)
                after = new_serial(dport, before)
                rows = []
                for _ in range(5):
                    mark = len(srv.lines)
                    x = xfr(dport, "IXFR", since=before)
                    rows.append({**{k: v for k, v in asdict(x).items() if k != "wire"},
                                 "content": ixfr_content(x),
                                 "log": summary(transfer_line(srv, mark, after))})
                res["ixfr"][kind] = {"host": host, "address": ip, "runs": rows}
                log(f"  IXFR ({kind}, {host}): {rows[0]['records']} records "
                    f"{rows[0]['content']}, {rows[0]['bytes']} bytes, "
                    f"{median([r['seconds'] for r in rows]) * 1000:.2f} ms; "
                    f"{rows[0]['log'].get('what')}")

            # 3. NSD as a secondary: its first transfer, then one change at a time.
            nsd = NsdSecondary(tmp, dport, nport)
            started = time.perf_counter()
            mark = len(srv.lines)
            nsd.start()
            now = serial(dport, ZONE)
            wait_for(lambda: serial(nport, ZONE) == now, 600, "NSD to hold dnsside's serial")
            res["nsd_first"] = {"seconds": time.perf_counter() - started,
                                "log": summary(transfer_line(srv, mark, now or 0, 30)),
                                **tree_rss_mb(nsd.pid)}
            log(f"NSD secondary: the zone at {now} after {res['nsd_first']['seconds']:.1f} s "
                f"({res['nsd_first']['log'].get('type')}), NSD RSS "
                f"{res['nsd_first']['rss_mb']:.0f} MB")
            conv = []
            for i in range(changes_n):
                time.sleep(1.1)  # every change its own version (one cut a second at most)
                before = serial(dport, ZONE) or 0
                mark = len(srv.lines)
                host, ip = change.next()
                t = time.perf_counter()
                seen: dict[str, float] = {}
                deadline = t + 30
                while len(seen) < 2 and time.perf_counter() < deadline:
                    for who, port in (("dnsside", dport), ("nsd", nport)):
                        if who not in seen and a_records(port, host) == [ip]:
                            seen[who] = time.perf_counter() - t
                    time.sleep(0.002)
                new = serial(dport, ZONE) or 0
                line = summary(transfer_line(srv, mark, new, 10)) if "nsd" in seen else {}
                conv.append({"host": host, "dnsside_s": seen.get("dnsside"),
                             "nsd_s": seen.get("nsd"), "serial_before": before,
                             "serial": new, "log": line})
                log(f"  change {i + 1}: dnsside {seen.get('dnsside', float('nan')) * 1000:.0f} "
                    f"ms, NSD {seen.get('nsd', float('nan')) * 1000:.0f} ms; "
                    f"{line.get('type')} {line.get('what')} ({line.get('records')} records)")
            res["convergence"] = conv

            # The history filled with one-pod changes, each its own version.
            t = time.monotonic()
            while (srv.metric("dnsside_zone_history_versions") or 0) < history \
                    and time.monotonic() - t < history * 3 and change.todo:
                before = serial(dport, ZONE) or 0
                change.next()
                new_serial(dport, before)
            versions = srv.metric("dnsside_zone_history_versions")
            records = srv.metric("dnsside_zone_history_records")
            wait_for(lambda: serial(nport, ZONE) == serial(dport, ZONE), 60,
                     "NSD to follow the history's changes")
            cpu_settled(srv.proc.pid)
            res["with_history"] = {"versions": versions, "records": records,
                                   **rss_mb(srv.proc.pid)}
            res["nsd_after"] = tree_rss_mb(nsd.pid)
            log(f"history: {versions} versions, {records} records; RSS "
                f"{res['with_history']['rss_mb']:.0f} MB")
            transfers = {}
            _, text = srv.http("/metrics")
            for m in re.finditer(r'^dnsside_(transfers_total|notifies_total)\{(.*)\} (\S+)$',
                                 text, re.M):
                transfers[f"{m.group(1)}{{{m.group(2)}}}"] = float(m.group(3))
            res["metrics"] = transfers
            res["warnings"] = sorted({re.sub(r"^\S+ \S+ ", "", x) for x in srv.lines
                                      if " WARNING " in x or " ERROR " in x})[:20]

            # 4. dnsperf: the secondary and dnsside, taking turns.
            res["dnsperf"] = dnsperf_turns(
                [Served("dnsside", dport, srv.proc.pid), Served("nsd-secondary", nport, nsd.pid)],
                queries, [5000, 20000], seconds, repeats)
        finally:
            if nsd is not None:
                nsd.stop()
            srv.stop(timeout=30)
            kube.close()
    return res


def dnsperf_turns(servers: list[Served], queries: Path, rates: list[int], seconds: float,
                  repeats: int) -> dict[str, Any]:
    raw: dict[str, list[dict[str, Any]]] = {}
    for rep in range(repeats):
        for server in servers:
            run.warm_up(server, queries)  # type: ignore[arg-type]
            for rate in [*rates, 0]:
                r = run.dnsperf(server, queries, rate, seconds,  # type: ignore[arg-type]
                                latency=bool(rate))
                raw.setdefault(f"{server.name}@{rate or 'max'}", []).append(vars(r))
                log(f"  rep {rep + 1} {server.name} @{rate or 'max'}: {r.qps:,.0f} q/s, "
                    f"{r.us_per_query:.1f} us/q, {r.lost} lost, rcodes {r.rcodes}")
    summ = {k: {f: run.med([x[f] for x in v]) for f in
                ("us_per_query", "qps", "completed", "lost", "p50_us", "p99_us", "cpu_util")}
            | {"lost_max": max(x["lost"] for x in v), "rcodes": v[0]["rcodes"]}
            for k, v in raw.items()}
    ratios = {}
    for key in [*map(str, rates), "max"]:
        a, b = raw.get(f"nsd-secondary@{key}"), raw.get(f"dnsside@{key}")
        if a and b:
            ratios[f"cpu@{key}"] = run.med([x["us_per_query"] / y["us_per_query"]
                                           for x, y in zip(a, b, strict=True)])
            ratios[f"qps@{key}"] = run.med([x["qps"] / y["qps"]
                                           for x, y in zip(a, b, strict=True)])
    return {"rates": rates, "seconds": seconds, "repeats": repeats, "summary": summ,
            "ratios": ratios, "raw": raw}


# --------------------------------------------------------------------------- the report


def fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None or x != x else format(x, spec)


def report(r: dict[str, Any]) -> str:
    m = r["machine"]
    w, a, ah, h = r["without"], r["with"], r["with_after_axfr"], r["with_history"]
    axfr = r["axfr"]
    ms = [x["seconds"] * 1000 for x in axfr]
    built = [x["log"].get("server_s", float("nan")) * 1000 for x in axfr]
    lines = [
        "# Zone transfer at scale",
        "",
        f"Produced by `.venv/bin/python {r['command']}` on {r['date']} in "
        f"{r['elapsed_min']:.0f} min (raw numbers in `bench/out/{r['raw']}`). Machine: "
        f"{m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, Python {m['python']}, "
        f"{m['nsd']}; load average at the start {' '.join(m['load_start'])}, at the end "
        f"{' '.join(m['loadavg'])}. **The machine is shared with other engineers' work and "
        "noisy**: times and the dnsperf figures move by ±15 % or more between runs; the "
        "dnsperf comparison is given as ratios of runs taken in turns.",
        "",
        f"Topology: `bench/topology.py` at {r['members']:,} members ({r['global_services']:,} "
        f"global services, {r['objects']:,} objects) in the fake API server of testkit/ "
        "(in the bench process), watched by `dnsside serve --kubeconfig … --cluster-name "
        f"east`, pinned to core 0, with `--allow-transfer 127.0.0.1 --notify "
        f"127.0.0.1:<NSD's port> --ixfr-history {r['history']}` (except the first start). A "
        "change is one per-pod mirror Service given a new ClusterIP at the fake (the pod's "
        "address changes in its A record, its cluster's and its service's), or deleted.",
        "",
        "## AXFR and memory",
        "",
        "| measure | value |",
        "|---|---|",
        f"| AXFR, request → last octet of the last message, median of {len(ms)} (min-max) | "
        f"**{median(ms):.0f} ms** ({min(ms):.0f}-{max(ms):.0f}) |",
        f"| dnsside's own time, request to its last message written (its log line; the "
        f"messages are packed as they are sent), median | {median(built):.0f} "
        "ms |",
        f"| AXFR size | {axfr[0]['records']:,} records, {axfr[0]['bytes']:,} bytes "
        f"({axfr[0]['bytes'] / 2**20:.1f} MiB), {axfr[0]['messages']} messages |",
        "| the slowest answer to queries sent back to back by one client while an AXFR "
        f"is sent, UDP (idle: {r['gaps_idle']['max_ms']:.1f} ms) | "
        f"{r['gaps_axfr']['max_ms']:.0f} ms |",
        *([f"| the same over one TCP connection (idle: {r['gaps_idle_tcp']['max_ms']:.1f} "
           f"ms) | **{r['gaps_axfr_tcp']['max_ms']:.0f} ms** |"] if "gaps_idle_tcp" in r
          else []),
        f"| initial sync without / with `--allow-transfer` | {w['sync_s']:.1f} s / "
        f"{a['sync_s']:.1f} s |",
        f"| RSS after the sync, without `--allow-transfer` | **{w['rss_mb']:.0f} MB** |",
        f"| RSS after the sync and the first version, with `--allow-transfer` | "
        f"**{a['rss_mb']:.0f} MB** ({a['rss_mb'] - w['rss_mb']:+.0f} MB, "
        f"{(a['rss_mb'] / w['rss_mb'] - 1) * 100:+.0f} %) |",
        f"| RSS after each of the {len(axfr)} AXFRs | "
        + ", ".join(f"{x['rss_mb']:.0f}" for x in axfr) + " MB |",
        f"| RSS after the AXFRs, settled (the peak, VmHWM) | {ah['rss_mb']:.0f} MB "
        f"(peak {ah['hwm_mb']:.0f} MB) |",
        f"| RSS with the history full: {fmt(h['versions'], '.0f')} versions of one-pod "
        f"changes, {fmt(h['records'], ',.0f')} records in it | **{h['rss_mb']:.0f} MB** "
        f"({h['rss_mb'] - w['rss_mb']:+.0f} MB over no transfer; peak {h['hwm_mb']:.0f} "
        "MB) |",
        "| NSD secondary's RSS holding the zone (its largest process) | "
        f"{r['nsd_first']['rss_mb']:.0f} MB "
        f"(after the changes: {r['nsd_after']['rss_mb']:.0f} MB) |",
        "",
        "## IXFR of one change",
        "",
        "Asked from the serial just before the change, over TCP, timed as the AXFR, median "
        "of 5; the records by role are parsed after the timing.",
        "",
        "| change | records (SOAs, deleted, added) | bytes | messages | time, median "
        "(min-max) | dnsside's own time | what dnsside logged |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, x in r["ixfr"].items():
        rows = x["runs"]
        t = [y["seconds"] * 1000 for y in rows]
        ixfr_ms = median([y["log"].get("server_s", 0) * 1000 for y in rows])
        ixfr_built = f"{ixfr_ms:.0f} ms" if ixfr_ms else "< 1 ms (the log's 0.000 s)"
        c = rows[0]["content"]
        lines.append(
            f"| {kind} | {rows[0]['records']} ({c['soa']}, {c['deleted']}, {c['added']}) | "
            f"{rows[0]['bytes']} | {rows[0]['messages']} | {median(t):.2f} ms "
            f"({min(t):.2f}-{max(t):.2f}) | {ixfr_built} | "
            f"{rows[0]['log'].get('what')} |")
    conv = r["convergence"]
    nsd = [c["nsd_s"] * 1000 for c in conv if c["nsd_s"] is not None]
    mine = [c["dnsside_s"] * 1000 for c in conv if c["dnsside_s"] is not None]
    kinds: dict[str, int] = {}
    for c in conv:
        key = f"{c['log'].get('type', 'none')}: {c['log'].get('what', 'no transfer seen')}"
        kinds[key] = kinds.get(key, 0) + 1
    first = r["nsd_first"]
    lines += [
        "",
        "## A secondary's convergence (NSD, told by NOTIFY)",
        "",
        f"NSD {m['nsd'].split()[-1]} as a secondary (`request-xfr: 127.0.0.1@<dnsside> NOKEY`, "
        "`allow-notify: 127.0.0.1 NOKEY`, no refresh cap: the SOA's 7,200 s refresh "
        "would be its only other trigger). Its first transfer of the zone (started after "
        f"dnsside's sync): {first['seconds']:.1f} s to hold dnsside's serial, by "
        f"{first['log'].get('type')} ({first['log'].get('what')}). Then {len(conv)} changes, "
        "each more than a second after the last (each its own version): a change at the "
        "fake → the first reply with the new address, polled every few ms, from dnsside "
        "and from NSD (a 30 s deadline). dnsside waits 0.1 s of quiet after a change and "
        "cuts at most one version a second, then sends NOTIFY; NSD asks for the SOA and an "
        "IXFR.",
        "",
        "| answered the new way by | p50 | max | n |",
        "|---|---|---|---|",
        f"| dnsside | {median(mine):.0f} ms | {max(mine, default=float('nan')):.0f} ms | "
        f"{len(mine)} |",
        f"| the NSD secondary | **{median(nsd):.0f} ms** | **{max(nsd, default=float('nan')):.0f} "
        f"ms** | {len(nsd)} of {len(conv)} |",
        "",
        "What carried each change to NSD (dnsside's transfer log line): "
        + "; ".join(f"{n} times {k}" for k, n in kinds.items()) + ".",
        "",
        "```",
        *(c["log"].get("line", "") for c in conv[:3]),
        "```",
        "",
    ]
    if r.get("metrics"):
        lines += ["Counters at the end of the run: " + ", ".join(
            f"`dnsside_{k}` {v:.0f}" for k, v in sorted(r["metrics"].items())) + ".", ""]
    if r.get("warnings"):
        lines += ["Warnings and errors dnsside logged (each once):", "", "```",
                  *r["warnings"], "```", ""]
    d = r["dnsperf"]
    s = d["summary"]
    lines += [
        "## Answers: the NSD secondary vs dnsside directly",
        "",
        f"dnsperf as in `bench/run.py`: the topology's query file (A/SRV mix, `-e`), "
        f"{d['seconds']:g} s a run, servers pinned to core 0 (both processes run all the "
        "time; the one not queried is idle), dnsperf to core 1, the two taking turns in "
        f"each of {d['repeats']} repeats; figures are medians, ratios medians of per-repeat "
        "ratios (NSD / dnsside: below 1 means NSD uses less CPU or answers fewer). Both "
        "answer from the same records; NSD's replies differ in their extra sections "
        "(and the share that goes out truncated), so this compares serving, not bytes.",
        "",
        "| server | rate | CPU µs / answered query | answered q/s | lost (worst) | p50 µs | "
        "p99 µs | rcodes (first run) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in [*map(str, d["rates"]), "max"]:
        for name in ("dnsside", "nsd-secondary"):
            x = s.get(f"{name}@{rate}")
            if x:
                lines.append(
                    f"| {name} | {rate if rate == 'max' else f'{int(rate):,}'} | "
                    f"{fmt(x['us_per_query'], '.2f')} | {fmt(x['qps'], ',.0f')} | "
                    f"{fmt(x['lost'], '.0f')} ({x['lost_max']}) | {fmt(x['p50_us'], '.0f')} | "
                    f"{fmt(x['p99_us'], '.0f')} | "
                    + ", ".join(f"{k} {v}" for k, v in x["rcodes"].items()) + " |")
    lines += ["", "| NSD secondary / dnsside | CPU per answered query | answered q/s |",
              "|---|---|---|"]
    for rate in [*map(str, d["rates"]), "max"]:
        c, q = d["ratios"].get(f"cpu@{rate}"), d["ratios"].get(f"qps@{rate}")
        label = "no rate limit (saturation)" if rate == "max" else f"{int(rate):,} q/s"
        lines.append(f"| {label} | {fmt(c, '.2f')}\u00d7 | {fmt(q, '.2f')}\u00d7 |")
    disc = BENCH / "transfer_discussion.md"
    if disc.exists():
        lines += ["", disc.read_text().strip()]
    return "\n".join(lines) + "\n"


def main() -> int:
    if "--contention" in sys.argv[1:]:
        # Other clients' UDP latency and dnsside's memory during 1 and 4 concurrent AXFRs
        # (issue 36): bench/xfr_contention.py, which takes the rest of the arguments.
        from bench import xfr_contention

        sys.argv.remove("--contention")
        return xfr_contention.main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=None, help="default 100000 (--quick: 10000)")
    ap.add_argument("--quick", action="store_true",
                    help="10k members, 3 changes, a history of 8, one short dnsperf repeat")
    ap.add_argument("--changes", type=int, default=None, help="convergence changes (10)")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the report from the saved JSON, run nothing")
    args = ap.parse_args()
    members = args.members or (10000 if args.quick else 100000)
    name = f"transfer_{members}{'-quick' if args.quick else ''}.json"
    target = OUT / "TRANSFER_RESULTS-quick.md" if args.quick else BENCH / "TRANSFER_RESULTS.md"
    if args.report_only:
        text = report(json.loads((OUT / name).read_text()))
        target.write_text(text)
        print(text)
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    changes = args.changes or (3 if args.quick else 10)
    history, repeats, seconds = (8, 1, 3.0) if args.quick else (64, 3, 8.0)
    began = time.monotonic()
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    res = measure(members, args.quick, changes, history, repeats, seconds)
    mach = run.machine()
    res.update({
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["-m bench.transfer", *sys.argv[1:]]),
        "machine": {**mach, "python": mach["python"], "load_start": load_start},
        "elapsed_min": (time.monotonic() - began) / 60, "raw": name,
    })
    (OUT / name).write_text(json.dumps(res, indent=1, default=str))
    text = report(res)
    target.write_text(text)
    log(f"wrote {target.relative_to(ROOT)}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
