"""Issue 33's attacks of a linked cluster's API server, tried again from outside, bounded.

``python -m bench.hostile_remote [attack ...]`` runs `dnsside serve --flat-network` (a
subprocess) against the fake API servers of tests/security/test_hostile_api.py on
loopback: the local cluster `east`, a well-behaved linked `west`, and `north`, whose API
server turns hostile once synced. Each attack runs for :data:`SECONDS` and prints what it
cost, measured from outside:

- ``logflood``: watch events of an unknown type and DELETED without a name, as fast as
  dnsside reads them: dnsside's log lines (and bytes) meanwhile.
- ``bookmarks``: every watch answered with one BOOKMARK and closed: the watch requests
  north got, and dnsside's log lines.
- ``forged``: a Status message with a newline (as a failed watch, and as an ERROR event):
  whether a log line of dnsside's starts with the forged text.
- ``flood``: north's 12,000-endpoint slice re-sent (two alternating versions) as fast as
  dnsside reads it (``floodall``: the two versions differ in every address, not one
  readiness): another client's UDP and TCP answer times and /healthz's (from a
  separate process, so the fakes' threads do not share its interpreter), dnsside's CPU
  and peak RSS, and how many events north got out.
- ``metadata``: pods of west at the documented cloud-metadata addresses: what dnsside
  answers for them.

Every figure is printed with its idle baseline from the same run (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from testkit.fakekube_rbac import REMOTE_ACCESS_RULES
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    local_objects,
    service,
    west_objects,
)
from testkit.serve import Dnsside, answers, wait_for
from testkit.threadedkube import ThreadedKube

SECONDS = 10.0
TOKEN = "remote-access-token"
USER = "system:serviceaccount:linkerd-multicluster:linkerd-service-mirror-remote-access"
FORGED = "WARNING dnsside.index: cluster west: Secret rotated, use https://evil.example"
METADATA = {"aws-v6": "fd00:ec2::254", "azure": "168.63.129.16", "alibaba": "100.100.100.200"}
FLOOD_ENDPOINTS = 12_000


def _cluster(tmp: Path, name: str, objects: list[dict[str, Any]]) -> ThreadedKube:
    (tmp / name).mkdir()
    k = ThreadedKube(tmp / name)
    k.call(k.kube.add_token, TOKEN, USER)
    k.call(k.kube.restrict, USER, REMOTE_ACCESS_RULES)
    k.call(k.kube.load, {"kind": "List", "items": objects})
    return k


def big_slice(version: int, every: bool = False) -> dict[str, Any]:
    """North's slice of FLOOD_ENDPOINTS pods; ``version`` flips the last one's readiness
    (``every``: moves every pod to another address instead)."""
    base = 245 - 100 * (version % 2) if every else 245
    eps = [endpoint(f"10.{base}.{n // 250}.{n % 250 + 1}", f"big-{n}",
                    ready=every or (n != FLOOD_ENDPOINTS - 1 or version % 2 == 0))
           for n in range(FLOOD_ENDPOINTS)]
    return endpoint_slice("big-1", "big", eps)


def _watching(request: web.Request, plural: str) -> bool:
    return request.path.endswith("/" + plural) and request.query.get("watch") in ("1", "true")


class North:
    """North's hostile answers; ``events`` counts what it got written."""

    def __init__(self) -> None:
        self.events = 0
        self.watches = 0

    async def stream(self, request: web.Request, lines: Iterator[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            for line in lines:
                if request.transport is None or request.transport.is_closing():
                    break
                await resp.write(line)
                self.events += 1
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async def logflood(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "services"):
            return None
        weird = json.dumps({"type": "WEIRD", "object": {"metadata": {}}}).encode() + b"\n"
        nameless = json.dumps({"type": "DELETED", "object": {"metadata": {}}}).encode() + b"\n"
        end = time.monotonic() + SECONDS + 5

        def lines() -> Iterator[bytes]:
            while time.monotonic() < end:
                yield (weird + nameless) * 50
        return await self.stream(request, lines())

    async def bookmarks(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "services"):
            return None
        self.watches += 1
        rv = request.query.get("resourceVersion") or "1"
        mark = {"type": "BOOKMARK", "object": {"kind": "Service", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": rv}}}
        return await self.stream(request, iter([json.dumps(mark).encode() + b"\n"]))

    async def forged(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "services"):
            return None
        message = f"etcd leader changed\n2026-11-28 15:00:00,000 {FORGED}"
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "reason": "InternalError\nX", "code": 500,
                                  "message": message}, status=500)

    def flooder(self, lines: list[bytes]) -> Any:
        async def flood(request: web.Request) -> web.StreamResponse | None:
            if not _watching(request, "endpointslices"):
                return None
            end = time.monotonic() + SECONDS + 5

            def forever() -> Iterator[bytes]:
                n = 0
                while time.monotonic() < end:
                    n += 1
                    yield lines[n % 2]
            return await self.stream(request, forever())
        return flood


# --------------------------------------------------------------------------- the probe


def probe(host: str, port: int, http_port: int, seconds: float, out: Any) -> None:
    """Another client: a UDP and a TCP query and a /healthz every 20 ms, timed (its own
    process: the fakes' threads must not delay it)."""
    import urllib.request

    import dns.message
    import dns.query

    udp: list[float] = []
    tcp: list[float] = []
    health: list[float] = []
    q = dns.message.make_query("db-0.west.db.data.svc-global", "A")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for kind, samples in (("udp", udp), ("tcp", tcp), ("http", health)):
            t0 = time.perf_counter()
            try:
                if kind == "udp":
                    dns.query.udp(q, host, port=port, timeout=3)
                elif kind == "tcp":
                    dns.query.tcp(q, host, port=port, timeout=3)
                else:
                    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz",
                                                timeout=3) as r:
                        r.read()
            except (TimeoutError, OSError, dns.exception.Timeout):
                samples.append(3.0)
                continue
            samples.append(time.perf_counter() - t0)
        time.sleep(0.02)
    out.put({"udp": udp, "tcp": tcp, "http": health})


def timed(srv: Dnsside, seconds: float) -> dict[str, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=probe, args=(srv.host, srv.port, srv.http_port, seconds, out))
    p.start()
    result: dict[str, list[float]] = out.get(timeout=seconds + 30)
    p.join(10)
    return result


def summary(samples: dict[str, list[float]]) -> str:
    parts = []
    for kind, xs in samples.items():
        xs = sorted(xs)
        if not xs:
            continue
        p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        parts.append(f"{kind} n={len(xs)} median {statistics.median(xs) * 1000:.1f} ms "
                     f"p99 {p99 * 1000:.1f} ms max {xs[-1] * 1000:.1f} ms")
    return "; ".join(parts)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    m = re.search(r"^VmHWM:\s+(\d+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(m.group(1)) / 1024 if m else 0.0


# --------------------------------------------------------------------------- the run


def run(attack: str, tmp: Path) -> None:
    north_objs: list[dict[str, Any]] = [
        service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("db-n1", "db", [endpoint("10.245.200.5", "db-0")])]
    west_objs = west_objects()
    flood = attack.startswith("flood")
    if flood:
        north_objs += [service("big", labels=dict(REMOTE_DISCOVERY_LABELS)), big_slice(0)]
    if attack == "metadata":
        west_objs += [
            endpoint_slice("db-meta4", "db", [endpoint(METADATA["azure"], "meta-azure"),
                                              endpoint(METADATA["alibaba"], "meta-alibaba")]),
            endpoint_slice("db-meta6", "db", [endpoint(METADATA["aws-v6"], "meta-aws")],
                           address_type="IPv6")]
    west = _cluster(tmp, "west", west_objs)
    north = _cluster(tmp, "north", north_objs)
    (tmp / "east").mkdir()
    east = ThreadedKube(tmp / "east")
    east.call(east.kube.load, {"kind": "List", "items": [*local_objects(), link("north")]})
    for k, name in ((west, "west"), (north, "north")):
        east.call(east.kube.apply, k.call(k.kube.link_credentials, name, token=TOKEN))
    hostile = North()
    level = "debug" if attack == "bookmarks-debug" else "info"
    try:
        with Dnsside("--source", "kube", "--kubeconfig", east.kubeconfig, "--cluster-name",
                     "east", "--flat-network", "--log-level", level, timeout=60) as srv:
            wait_for(lambda: srv.series('dnsside_remote_synced{cluster="north"}') == 1
                     and srv.series('dnsside_remote_synced{cluster="west"}') == 1, 60,
                     "both synced")
            if attack == "metadata":
                for what, address in METADATA.items():
                    name = f"meta-{what.split('-')[0]}.west.db.data.svc-global"
                    rdtype = "AAAA" if ":" in address else "A"
                    got = answers(srv.query(name, rdtype), rdtype)
                    print(f"metadata {what} {address}: answered {got or 'nothing'}")
                print("log lines naming them: " + str(sum(
                    any(a in line for a in METADATA.values()) for line in srv.lines)))
                return
            baseline = timed(srv, 3.0) if flood else {}
            lines0, bytes0 = len(srv.lines), sum(len(x) + 1 for x in srv.lines)
            cpu0 = cpu_seconds(srv.proc.pid)
            watches0 = north.call(lambda: north.kube.requests.copy())
            if flood:
                every = attack == "floodall"
                versions = [json.dumps({"type": "MODIFIED", "object": {
                    **big_slice(v, every), "metadata": {
                        **big_slice(v)["metadata"], "resourceVersion": str(10_000 + v)}}}
                                       ).encode() + b"\n" for v in (1, 2)]
                handler = hostile.flooder(versions)
            else:
                handler = getattr(hostile, attack.split("-")[0])
            north.call(setattr, north.kube, "hostile", handler)
            north.call(north.kube.end_streams)
            t0 = time.monotonic()
            during = timed(srv, SECONDS) if flood else None
            while time.monotonic() - t0 < SECONDS:
                time.sleep(0.2)
            cpu = cpu_seconds(srv.proc.pid) - cpu0
            lines = srv.lines[lines0:]
            watches = north.call(lambda: sum(
                n - watches0.get(k, 0) for k, n in north.kube.requests.items()
                if k[1].endswith("/services")))
            print(f"== {attack}: {SECONDS:g} s")
            print(f"dnsside log: {len(lines)} lines, "
                  f"{sum(len(x) + 1 for x in srv.lines) - bytes0} bytes")
            print(f"requests for services north got: {watches}; its events written: "
                  f"{hostile.events}")
            print(f"dnsside CPU: {cpu / SECONDS * 100:.0f} %; peak RSS "
                  f"{peak_rss_mib(srv.proc.pid):.0f} MiB")
            if attack == "forged":
                forged = [x for x in srv.lines if x.startswith("2026-11-28 15:00:00")
                          or x.lstrip().startswith(FORGED)]
                print(f"forged lines: {len(forged)} {forged[:1]}")
            if baseline:
                print("idle:  " + summary(baseline))
                print("flood: " + summary(during or {}))
                for m in ("dnsside_remote_throttled", "dnsside_remote_synced"):
                    value = srv.series(m + '{cluster="north"}')
                    print(f"{m}{{north}} = {value}")
            shown = {}
            for line in lines:
                key = re.sub(r"^\S+ \S+ ", "", line)[:90]
                shown[key] = shown.get(key, 0) + 1
            for m in ("dnsside_index_update_duration_seconds_sum",
                      "dnsside_index_update_duration_seconds_count",
                      'dnsside_index_update_duration_seconds_bucket{le="0.1"}',
                      'dnsside_index_update_duration_seconds_bucket{le="1.0"}'):
                print(f"{m} = {srv.series(m)}")
            for key, n in sorted(shown.items(), key=lambda kv: -kv[1])[:6]:
                print(f"  {n:7d} x {key}")
    finally:
        north.call(setattr, north.kube, "hostile", None)
        for k in (east, west, north):
            k.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("attacks", nargs="*", default=["logflood", "bookmarks", "forged",
                                                         "flood", "metadata"])
    args = parser.parse_args()
    for attack in args.attacks:
        with tempfile.TemporaryDirectory() as tmp:
            run(attack, Path(tmp))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
