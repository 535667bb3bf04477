"""dnsside's gateway prober: the state machine alone, then real HTTP gateways on loopback
that answer 200, 503, hang or stop, watched through DNS answers (dig and dnspython)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsside.model.events import Gateway
from dnsside.sources.gateways import GatewayProber, GatewayTracker
from dnsside.telemetry import metrics
from testkit.gateways import FakeGateway, probed_demo
from testkit.serve import DEMO, Dnsside, answers, wait_for
from testkit.threadedkube import ThreadedKube

NGINX = "nginx-svc.default.svc-global"
WEST = {"10.43.179.60", "10.43.218.18", "10.43.245.244"}
ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]

# --------------------------------------------------------------------------- the state machine


def test_tracker_needs_consecutive_failures_after_a_success() -> None:
    t = GatewayTracker(failures=2)
    url = "http://127.0.0.1:1/ready"
    assert t.record("west", url, True) is not None  # first success: alive
    assert t.record("west", url, False) is None  # one blip is not an outage
    assert t.record("west", url, True) is None  # and it resets the count
    assert t.record("west", url, False) is None
    change = t.record("west", url, False, "HTTP 503")
    assert change is not None and change.state is Gateway.FAILING and change.detail == "HTTP 503"
    assert t.record("west", url, False) is None  # still failing: no new event
    back = t.record("west", url, True)
    assert back is not None and back.state is Gateway.ALIVE


def test_tracker_never_acts_on_a_target_that_never_answered() -> None:
    t = GatewayTracker(failures=3)
    url = "http://127.0.0.1:1/ready"
    assert t.record("north", url, False) is None
    assert t.record("north", url, False) is None
    change = t.record("north", url, False, "connection refused")
    assert change is not None and change.state is Gateway.UNREACHED
    # A new URL (the probe Service moved) starts from scratch: the index is told.
    moved = t.start("north", url + "2")
    assert moved is not None and moved.state is None
    assert t.record("north", url + "2", False) is None
    assert t.record("north", url + "2", True) is not None


def test_tracker_remembers_a_target_across_links_and_probe_services() -> None:
    """A Link (or probe Service) deleted and re-created unchanged resumes its history: a
    gateway that answered and died stays failing, and stopping tells the index nothing."""
    t = GatewayTracker(failures=2)
    url = "http://127.0.0.2:4191/ready"
    assert t.start("west", url) is None  # nothing known yet, nothing to tell
    assert t.record("west", url, True) is not None
    t.record("west", url, False)
    dead = t.record("west", url, False, "connection refused")
    assert dead is not None and dead.state is Gateway.FAILING
    t.stop("west")  # the Link is deleted: the last state stands in the index
    assert t.start("west", url) is None  # re-created: it already holds FAILING
    assert t.record("west", url, False) is None  # still failing, nothing new
    back = t.record("west", url, True)
    assert back is not None and back.state is Gateway.ALIVE
    # A different URL is maybe a different gateway: afresh, and the index is told so.
    t.record("west", url, False)
    t.record("west", url, False)
    t.stop("west")
    fresh = t.start("west", "http://127.0.0.3:4191/ready")
    assert fresh is not None and fresh.state is None
    # and the old URL, coming back, brings its own history back.
    again = t.start("west", url)
    assert again is not None and again.state is Gateway.FAILING


def test_tracker_history_is_bounded() -> None:
    t = GatewayTracker(failures=1, keep=4)
    for i in range(10):
        t.start("west", f"http://127.0.0.{i}:4191/ready")
        t.record("west", f"http://127.0.0.{i}:4191/ready", True)
    assert len(t.history) == 4
    assert ("west", "http://127.0.0.9:4191/ready") in t.history


async def test_a_cluster_no_longer_probed_leaves_no_series() -> None:
    """The probe counters and state of a cluster that is no longer probed (its
    Link or probe Service gone) are removed, so clusters that come and go leave no label
    sets behind."""
    with socket.socket() as s:  # a port nothing listens on: every probe fails at once
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/ready"
    targets = {"tmp-1": url}
    prober = GatewayProber(lambda: targets, period=0.05, timeout=0.5, failures=1)

    def probes() -> float | None:
        value: float | None = metrics.REGISTRY.get_sample_value(
            "dnsside_gateway_probes_total", {"cluster": "tmp-1", "result": "failure"})
        return value

    async def until(check: Any) -> None:
        for _ in range(100):
            if check():
                return
            await asyncio.sleep(0.05)
        raise AssertionError("timed out")

    async def consume() -> None:
        async for _ in prober.events():
            pass

    task = asyncio.create_task(consume())
    try:
        await until(probes)
        targets = {}
        await until(lambda: probes() is None)
        assert metrics.REGISTRY.get_sample_value(
            "dnsside_gateway_probe_state", {"cluster": "tmp-1", "state": "never-answered"}) is None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --------------------------------------------------------------------------- real gateways


@pytest.fixture
def gateways() -> Iterator[dict[str, FakeGateway]]:
    gws = {c: FakeGateway() for c in ("west", "north", "south")}
    yield gws
    for gw in gws.values():
        gw.stop()


def dig(srv: Dnsside, name: str, rdtype: str = "A") -> list[str]:
    out = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), name, rdtype, "+short",
                          "+tries=1", "+time=2"], capture_output=True, text=True, timeout=10)
    return sorted(out.stdout.split("\n")) if out.returncode == 0 else ["dig failed"]


def west_in_answers(srv: Dnsside) -> tuple[bool, bool]:
    """(west in nginx A, west in nginx SRV), asked with dig."""
    a = set(dig(srv, NGINX))
    srv_lines = dig(srv, "_http._tcp." + NGINX, "SRV")
    return bool(WEST & a), any(".west." in line for line in srv_lines)


def state(srv: Dnsside, cluster: str, value: str) -> bool:
    _, text = srv.http("/metrics")
    pattern = (rf'dnsside_gateway_probe_state{{cluster="{cluster}",state="{value}"}} 1\.0')
    return re.search(pattern, text) is not None


def probed(tmp: Path, gateways: dict[str, FakeGateway], *flags: str) -> Dnsside:
    return Dnsside("--source", str(probed_demo(tmp, gateways)), "--cluster-name", "east",
                   "--gateway-probe", "on", *flags)


def test_stopped_gateway_leaves_within_3s_and_returns_within_2s(
    tmp_path: Path, gateways: dict[str, FakeGateway]
) -> None:
    """SPEC's defaults: period 1 s, timeout 1 s, 2 failures. Measured with dig."""
    for gw in gateways.values():
        gw.start()
    with probed(tmp_path, gateways) as srv:
        wait_for(lambda: state(srv, "west", "alive"), 10, "west alive")
        assert west_in_answers(srv) == (True, True)
        gateways["west"].stop()
        stopped = time.monotonic()
        wait_for(lambda: west_in_answers(srv) == (False, False), 10, "west out of A and SRV")
        gone_after = time.monotonic() - stopped
        # Remote-discovery, federated and local members never move.
        assert {"10.43.100.8", "10.43.100.9", "10.43.0.50"} <= set(dig(srv, "web.default.svc-global"))
        assert "10.43.100.7" not in dig(srv, "web.default.svc-global")  # west's gateway mirror
        assert {"10.42.1.10", "10.42.1.11"} <= set(dig(srv, NGINX))
        srv.wait_log("gateway of cluster west fails dnsside's probe")
        gateways["west"].start()
        restarted = time.monotonic()
        wait_for(lambda: west_in_answers(srv) == (True, True), 10, "west back in A and SRV")
        back_after = time.monotonic() - restarted
        print(f"\nwest left the answers {gone_after:.2f}s after its gateway stopped, "
              f"came back {back_after:.2f}s after it started")
        assert gone_after <= 3.0, f"left after {gone_after:.2f}s"
        assert back_after <= 2.0, f"came back after {back_after:.2f}s"


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_failing_or_hanging_gateway(tmp_path: Path, gateways: dict[str, FakeGateway],
                                    mode: str) -> None:
    """Answers 503, or accepts and never answers: both are failures (the second by timeout)."""
    for gw in gateways.values():
        gw.start()
    period, timeout = 0.2, 0.2
    bound = period * 2 + timeout + 1.0  # period × failures + the last probe's timeout + 1 s
    with probed(tmp_path, gateways, "--gateway-probe-period", str(period),
                "--gateway-probe-timeout", str(timeout)) as srv:
        wait_for(lambda: state(srv, "west", "alive"), 10, "west alive")
        gateways["west"].mode = mode
        changed = time.monotonic()
        wait_for(lambda: not WEST & set(answers(srv.query(NGINX))), 10, "west out")
        assert time.monotonic() - changed <= bound
        assert state(srv, "west", "failing")
        _, text = srv.http("/metrics")
        failures = re.search(
            r'dnsside_gateway_probes_total\{cluster="west",result="failure"\} (\S+)', text)
        assert failures is not None and float(failures.group(1)) >= 2
        _, body = srv.http(f"/debug/explain?name=nginx-set-0.west.{NGINX}")
        assert "fails dnsside's probe" in body
        gateways["west"].mode = "ok"
        gateways["west"].release.set()
        changed = time.monotonic()
        wait_for(lambda: WEST <= set(answers(srv.query(NGINX))), 10, "west back")
        assert time.monotonic() - changed <= bound
        assert state(srv, "west", "alive")


def test_never_answered_gateway_changes_nothing(
    tmp_path: Path, gateways: dict[str, FakeGateway]
) -> None:
    """south's probe target never answers (nothing listens): Linkerd's readiness stands."""
    gateways["west"].start()
    gateways["north"].start()
    with probed(tmp_path, gateways, "--gateway-probe-period", "0.2",
                "--gateway-probe-timeout", "0.2") as srv:
        wait_for(lambda: state(srv, "south", "never-answered"), 10, "south never answered")
        kafka = answers(srv.query("kafka.db.svc-global"))
        assert "10.44.0.20" in kafka  # south's gateway-mode mirror, ready per Linkerd
        srv.wait_log("gateway of cluster south has never answered dnsside's probe")
        _, body = srv.http("/debug/explain?name=south.kafka.db.svc-global")
        assert "never answered since start" in body and "not acted on" in body
        # Once it has answered, failing counts.
        gateways["south"].start()
        wait_for(lambda: state(srv, "south", "alive"), 10, "south alive")
        gateways["south"].stop()
        wait_for(lambda: "10.44.0.20" not in answers(srv.query("kafka.db.svc-global")), 10,
                 "south out")


def test_probe_off_by_default_for_a_file(tmp_path: Path, gateways: dict[str, FakeGateway]) -> None:
    """A dump is usually served far from its cluster: its ClusterIPs are not probed unless
    --gateway-probe on says so."""
    gateways["west"].start()
    with Dnsside("--source", str(probed_demo(tmp_path, gateways)), "--cluster-name", "east",
                 "--gateway-probe", "auto") as srv:
        srv.wait_log("gateway probe off")
        assert WEST <= set(answers(srv.query(NGINX)))
    assert gateways["west"].hits == 0


def test_a_relinked_cluster_keeps_what_its_gateway_showed(
    kube: ThreadedKube, gateways: dict[str, FakeGateway]
) -> None:
    """Through the API: west's gateway answered, then died (west
    leaves the answers). Its Link is deleted and re-created unchanged (a GitOps re-sync):
    the probe resumes from what it knew, so west stays out, and comes back when its
    gateway does."""
    for cluster, gw in gateways.items():
        gw.start()
        probe = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == f"probe-{cluster}"
                                   and o["kind"] == "Service"))
        probe["spec"]["clusterIP"], probe["spec"]["clusterIPs"] = "127.0.0.1", ["127.0.0.1"]
        probe["spec"]["ports"][0]["port"] = gw.port
        kube.call(kube.kube.apply, probe)
    link = copy.deepcopy(next(o for o in ITEMS if o["kind"] == "Link"
                              and o["metadata"]["name"] == "west"))
    with Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                 "--gateway-probe", "on", "--gateway-probe-period", "0.2",
                 "--gateway-probe-timeout", "0.2") as srv:
        wait_for(lambda: state(srv, "west", "alive"), 10, "west alive")
        assert WEST <= set(answers(srv.query(NGINX)))
        gateways["west"].stop()
        wait_for(lambda: not WEST & set(answers(srv.query(NGINX))), 10, "west out")
        kube.call(kube.kube.delete, "Link", "linkerd-multicluster", "west")
        srv.wait_log("gateway probe of cluster west stopped")
        assert not state(srv, "west", "failing")  # not probed: no series for it
        before = _probes(srv, "west", "failure")
        kube.call(kube.kube.apply, link)
        # Five probe periods and more past the relink: west never answers meanwhile.
        seen: set[str] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _probes(srv, "west", "failure") < before + 5:
            seen |= set(answers(srv.query(NGINX)))
        assert _probes(srv, "west", "failure") >= before + 5, "west was not probed again"
        assert not WEST & seen, f"a dead gateway's members came back: {sorted(WEST & seen)}"
        srv.wait_log("probing the gateway of cluster west: GET http://127.0.0.1:"
                     f"{gateways['west'].port}/ready every 0.2s (known failing)")
        assert state(srv, "west", "failing")
        _, body = srv.http(f"/debug/explain?name=nginx-set-0.west.{NGINX}")
        assert "fails dnsside's probe" in body
        gateways["west"].start()
        wait_for(lambda: WEST <= set(answers(srv.query(NGINX))), 10, "west back")


def _probes(srv: Dnsside, cluster: str, result: str) -> float:
    _, text = srv.http("/metrics")
    m = re.search(rf'dnsside_gateway_probes_total{{cluster="{cluster}",result="{result}"}} (\S+)',
                  text)
    return float(m.group(1)) if m else 0.0


async def test_a_stopped_probe_loop_never_reports_again() -> None:
    """A loop whose probe outlived its stop (a cancellation swallowed as the probe timed
    out) ends at its next result instead of reporting it: one live loop per cluster."""
    import asyncio

    import aiohttp

    from dnsside.sources.gateways import GatewayProber

    gw = FakeGateway()
    gw.start()
    try:
        prober = GatewayProber(dict, period=0.05, timeout=1.0)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        url = f"http://127.0.0.1:{gw.port}/ready"
        async with aiohttp.ClientSession() as session:
            live = prober.live["west"] = object()
            running = asyncio.create_task(prober._probe_loop(session, "west", url, queue, live))
            first = await asyncio.wait_for(queue.get(), 5)
            assert first.state is Gateway.ALIVE
            hits = gw.hits
            prober.live["west"] = object()  # stopped and restarted: this loop is stale now
            await asyncio.wait_for(running, 5)  # it ends by itself after one more probe
            assert gw.hits <= hits + 1 and queue.empty()
    finally:
        gw.stop()
