"""Memory under churn seen from outside: the RSS of a real `dnsside serve` process.

tests/soak/test_memory_churn.py counts traced Python bytes after a full collection, in
process. That cannot see memory that only a *full* collection frees: after the index's
gc.freeze, full collections come rarely (none in minutes of churn), so anything a change
leaves in a reference cycle piles up in the process while every in-process count that
collects first finds nothing (issue 35: rotating answers, ``Ring``, referred to
themselves). Nor can it see memory C code takes for itself. So this one runs the process
against the suite's fake API at a high change rate and watches its VmRSS.

The churn keeps every name (readiness flips of endpoints of headless exported services
with many endpoints: each rebuilds rotating A and SRV answers), so the live set is
constant and the RSS must level off once the tables and caches are at their working
sizes. The bound is absolute and generous (1 MB, the lowest RSS of the window's last
12 s against its first 12 s): on main before issue 35's fixes it grew 2,024 KB (the
replaced Rings); with the Ring fix but --heap-trim-period 0, 2,920 KB (glibc's free heap);
with both, 428 KB.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from testkit.objects import EXPORTED, endpoint, endpoint_slice, service
from testkit.serve import Dnsside, wait_for
from testkit.threadedkube import ThreadedKube

NS = "churn"
SERVICES = 40
ENDPOINTS = 24  # per service: its A and SRV answers rotate (round robin, the default)
PORTS = [("http", 8080), ("grpc", 9090)]
RATE = 150  # changes a second
WARM_UP_S = 20.0  # tables, caches and pymalloc's arenas reach their working sizes
MEASURE_S = 45.0
WINDOW = 12  # samples, one a second
GROWTH_BOUND_KB = 1024


def _world() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for i in range(SERVICES):
        name = f"app-{i}"
        objs.append(service(NS, name, None, PORTS, {EXPORTED: "true"}))
        objs.append(endpoint_slice(NS, f"{name}-abcde", name, [
            endpoint(f"10.{60 + i}.0.{j + 1}", True, f"{name}-{j}")
            for j in range(ENDPOINTS)], PORTS))
    return objs


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_rss_levels_off_under_churn(tmp_path: Path) -> None:
    kube = ThreadedKube(tmp_path)
    slices = [o for o in _world() if o["kind"] == "EndpointSlice"]
    kube.call(kube.kube.load, _world())
    rng = random.Random(35)
    try:
        with Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east") as srv:
            reply = srv.query("app-3.churn.svc-global", "A")
            assert len(reply.answer[0]) == ENDPOINTS

            def flip(n: int) -> None:
                """``n`` readiness flips, on the fake's thread (its state is not
                thread-safe); an endpoint is flipped back by a later draw."""
                for _ in range(n):
                    sl = rng.choice(slices)
                    cond = rng.choice(sl["endpoints"])["conditions"]
                    cond["ready"] = cond["serving"] = not cond["ready"]
                    kube.kube.apply(sl)

            samples: list[tuple[float, int]] = []
            start = time.monotonic()
            end = start + WARM_UP_S + MEASURE_S
            done = 0
            next_sample = start
            while (now := time.monotonic()) < end:
                due = int(RATE * (now - start)) - done
                if due > 0:
                    kube.call(flip, due)
                    done += due
                if now >= next_sample:
                    samples.append((now - start, _rss_kb(srv.proc.pid)))
                    next_sample += 1.0
                assert srv.proc.poll() is None, "\n".join(srv.lines[-20:])
                time.sleep(0.05)
            # The churn was applied, not queued: the answer reaches the fake's last state.
            ready = kube.call(lambda: sum(
                bool(e["conditions"]["ready"]) for e in slices[3]["endpoints"]))

            def served() -> bool | None:
                answer = srv.query("app-3.churn.svc-global", "A").answer
                return (len(answer[0]) if answer else 0) == ready or None

            wait_for(served, 30, f"app-3's {ready} ready endpoints served")
    finally:
        kube.close()
    measured = [kb for t, kb in samples if t >= WARM_UP_S]
    assert done >= RATE * MEASURE_S * 0.8, done  # (a loaded machine may lag behind RATE)
    assert len(measured) >= MEASURE_S * 0.75, samples  # (the sampler kept up)
    # The lowest RSS of the first and of the last WINDOW seconds: each holds a heap trim
    # (--heap-trim-period, 10 s by default), whatever the churn added since the last one.
    growth = min(measured[-WINDOW:]) - min(measured[:WINDOW])
    curve = " ".join(f"{kb / 1024:.1f}" for _, kb in samples[::5])
    assert growth < GROWTH_BOUND_KB, (
        f"RSS grew {growth} KB in {MEASURE_S:g} s of churn after a {WARM_UP_S:g} s warm-up "
        f"({done} changes in all); MB every 5 s: {curve}")
