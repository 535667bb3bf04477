"""Kube source at scale: sync time, memory and event-to-answer latency (issue: Kubernetes source).

    .venv/bin/python bench/kube_scale.py [--members 100000] [--events 200]

Loads a generated Linkerd topology (per-pod mirrors across four links, 25 pods
per service, each with its EndpointSlice: about two objects per member) into the
fake API server from tests/, starts `dnsside serve --kubeconfig`, and reports:

* sync: wall time from process start to "initial sync done", and the CPU time
  dnsside itself spent (the fake, in this process, shares the machine);
* memory: VmRSS after sync and VmHWM (peak);
* propagation: an object change applied at the fake API → the new answer seen
  on the wire by a UDP poller, p50/p99 over --events changes.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import dns.message  # noqa: E402
import topology as t  # noqa: E402
from support import Dnsside, ThreadedKube  # noqa: E402

CLUSTERS = ["west", "north", "south", "central"]
PER_SERVICE = 25


def generate(members: int) -> list[dict[str, Any]]:
    """Per-pod mirrors of 25-pod StatefulSets in four links; unique ClusterIP each."""
    objs: list[dict[str, Any]] = []
    for s in range(members // (PER_SERVICE * len(CLUSTERS))):
        for c, cluster in enumerate(CLUSTERS):
            pods = {f"app{s}-{i}": [f"10.{64 + c}.{s // 10}.{s % 10 * PER_SERVICE + i}"]
                    for i in range(PER_SERVICE)}
            objs.extend(t.headless_link(f"ns{s % 50}", f"app{s}", cluster, pods,
                                        [("http", 8080), ("grpc", 9090)]))
    return objs


def proc_stat(pid: int) -> tuple[float, int, int]:
    """(cpu seconds, VmRSS kB, VmHWM kB) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(status.split("VmRSS:")[1].split()[0])
    hwm = int(status.split("VmHWM:")[1].split()[0])
    return cpu, rss, hwm


def ask(sock: socket.socket, addr: tuple[str, int], name: str) -> list[str]:
    q = dns.message.make_query(name, "A")
    sock.sendto(q.to_wire(), addr)
    reply = dns.message.from_wire(sock.recv(4096))
    return [rd.to_text() for rrset in reply.answer for rd in rrset]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=200)
    args = ap.parse_args()

    objs = generate(args.members)
    pod_mirrors = [o for o in objs
                   if o["kind"] == "Service" and o["spec"]["clusterIPs"] != ["None"]]
    with tempfile.TemporaryDirectory() as tmp:
        kube = ThreadedKube(Path(tmp))
        loaded = time.perf_counter()
        kube.call(kube.kube.load, objs)
        load_s = time.perf_counter() - loaded
        started = time.perf_counter()
        with Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                     "--log-level", "info", wait_synced=False) as srv:
            srv.wait_log("initial sync done", timeout=600)
            sync_s = time.perf_counter() - started
            cpu, rss, hwm = proc_stat(srv.proc.pid)

            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.settimeout(2)
            addr = (srv.host, srv.port)
            latencies = []
            step = max(1, len(pod_mirrors) // args.events)
            for n, svc in enumerate(pod_mirrors[::step][: args.events]):
                new_ip = f"10.200.{n // 256}.{n % 256}"
                svc = json.loads(json.dumps(svc))
                svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = new_ip, [new_ip]
                fq = svc["metadata"]["annotations"][t.FQ].split(".")
                cluster = svc["metadata"]["labels"][t.CLUSTER]
                name = f"{fq[0]}.{cluster}.{fq[1]}.{fq[2]}.svc-global"
                t0 = time.perf_counter()
                kube.call(kube.kube.apply, svc)
                deadline = t0 + 10
                while new_ip not in ask(sock, addr, name):
                    if time.perf_counter() > deadline:
                        raise SystemExit(f"no new answer for {name} after 10 s")
                latencies.append((time.perf_counter() - t0) * 1000)
            sock.close()
            srv.stop()
        kube.close()

    result = {
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "members": args.members,
        "objects": len(objs),
        "fake_load_s": round(load_s, 1),
        "sync_wall_s": round(sync_s, 1),
        "sync_cpu_s": round(cpu, 1),
        "rss_mb": round(rss / 1024),
        "peak_rss_mb": round(hwm / 1024),
        "propagation_ms": {"p50": round(statistics.median(latencies), 2),
                           "p99": round(percentile(latencies, 99), 2),
                           "max": round(max(latencies), 2), "n": len(latencies)},
    }
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"kube_scale_{args.members}.json").write_text(json.dumps(result, indent=2))
    (ROOT / "bench" / "KUBE_RESULTS.md").write_text(report(result))
    print(json.dumps(result, indent=2))


def report(r: dict[str, Any]) -> str:
    p = r["propagation_ms"]
    m = r["machine"]
    return f"""# Kubernetes source at scale

Produced by `.venv/bin/python bench/kube_scale.py --members {r["members"]}` on
{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}. Machine: {m["cpu"]}, {m["cores"]} cores,
Python {m["python"]}; the fake API server (tests/fakekube.py) runs in the bench
process on the same machine, so wall times include its work.

{r["members"]:,} per-pod mirrors (25-pod StatefulSets in four links), {r["objects"]:,} objects
(mirror Services, their EndpointSlices, root mirrors), listed in pages of 500
then watched, by `dnsside serve --kubeconfig`.

| measure | value | target |
|---|---|---|
| initial sync, wall (process start → `initial sync done`) | {r["sync_wall_s"]} s | ≤ 20 s |
| initial sync, dnsside's own CPU | {r["sync_cpu_s"]} s | |
| resident memory after sync (VmRSS) | {r["rss_mb"]} MB (peak {r["peak_rss_mb"]} MB) | ≤ 300 MB |
| object change at the API → new answer on the wire, p50 | {p["p50"]} ms | |
| same, p99 (n = {p["n"]}) | {p["p99"]} ms | ≤ 10 ms |
| same, max | {p["max"]} ms | |

Propagation is measured end to end: a per-pod mirror Service gets a new
ClusterIP at the fake API server, the watch delivers it, the index re-encodes
that one global service (100 members), and a UDP poller sees the new address.
"""


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
