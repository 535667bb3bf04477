"""KubeSource against the fake API server: the event stream it yields."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from dnsside.kubeapi.client import KubeConfigError
from dnsside.model.events import (
    Delete,
    Event,
    Kind,
    Replace,
    SourceError,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import Record, ServiceRecord, parse_object, parse_service
from dnsside.sources import kube as kube_source
from dnsside.sources.kube import KubeSource
from dnsside.sources.pacing import Backoff, Pacing
from dnsside.sources.watchline import OFF_LOOP_BYTES
from dnsside.telemetry import metrics
from testkit import objects
from testkit.fakekube import FakeKube
from testkit.serve import DEMO as DEMO_EAST

pytestmark = pytest.mark.quick

LINKS_PATH = "/apis/multicluster.linkerd.io/v1alpha3/namespaces/linkerd-multicluster/links"
SVC_PATHS = {"/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices", LINKS_PATH}
DEADLINE = 10.0

RecordKey = tuple[Kind, str, str]


# --------------------------------------------------------------------------- helpers


def key_of(record: Record) -> RecordKey:
    return (Kind.of(record), record.namespace, record.name)


def expected_state(kube: FakeKube, namespaces: Iterable[str] = ()) -> dict[RecordKey, Record]:
    """What the index should hold: every object of the fake, parsed."""
    wanted = set(namespaces)
    state = {}
    for kind in ("Service", "EndpointSlice", "Link"):
        for obj in kube.objects(kind):
            # Links are read cluster-wide whatever the namespaces (they say what is linked).
            if wanted and obj["metadata"]["namespace"] not in wanted and kind != "Link":
                continue
            record = parse_object(obj)
            assert record is not None
            state[key_of(record)] = record
    return state


class Collector:
    """Runs source.events() in the background, keeping the batches and a model of the index."""

    def __init__(self, source: KubeSource) -> None:
        self.source = source
        self.batches: list[list[Event]] = []
        self.state: dict[RecordKey, Record] = {}
        self.synced = False
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for batch in self.source.events():
            self.batches.append(batch)
            for event in batch:
                self._apply(event)
            self._changed.set()

    def _apply(self, event: Event) -> None:
        if isinstance(event, Replace):
            self.state = {k: v for k, v in self.state.items() if k[0] not in event.kinds}
            for record in event.records:
                self.state[key_of(record)] = record
        elif isinstance(event, Upsert):
            self.state[key_of(event.record)] = event.record
        elif isinstance(event, Delete):
            self.state.pop((event.kind, event.namespace, event.name), None)
        elif isinstance(event, Synced):
            self.synced = True

    @property
    def events(self) -> list[Event]:
        return [e for b in self.batches for e in b]

    def of_type(self, *types: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, types)]

    async def wait_for(self, pred: Callable[[], Any], timeout: float = DEADLINE) -> Any:
        """Poll ``pred`` after every batch (and every 20 ms) until it is truthy."""
        async with asyncio.timeout(timeout):
            while True:
                if self.task.done():
                    self.task.result()
                    raise AssertionError("the source stopped")
                result = pred()
                if result:
                    return result
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 0.02)

    async def converged(self, kube: FakeKube, namespaces: Iterable[str] = ()) -> None:
        want = expected_state(kube, namespaces)
        try:
            await self.wait_for(lambda: self.state == want)
        except TimeoutError:
            missing = want.keys() - self.state.keys()
            extra = self.state.keys() - want.keys()
            changed = {k for k in want.keys() & self.state.keys() if want[k] != self.state[k]}
            raise AssertionError(f"missing {missing}, extra {extra}, changed {changed}") from None

    async def close(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


@pytest.fixture
async def start(fake_kube: FakeKube) -> AsyncIterator[Callable[..., Collector]]:
    collectors: list[Collector] = []

    def starter(page_size: int = 500, watch_timeout: float = 30, **kwargs: Any) -> Collector:
        pacing = Pacing(backoff_base=0.01, backoff_cap=0.1, watch_timeout=watch_timeout,
                        page_size=page_size)  # (Links looked for again every backoff_cap)
        collector = Collector(KubeSource(fake_kube.kubeconfig, pacing=pacing, **kwargs))
        collectors.append(collector)
        return collector

    yield starter
    for c in collectors:
        if not c.task.done():
            await c.close()


def svc(name: str, ns: str = "default", ip: str = "10.0.0.1", **labels: str) -> dict[str, Any]:
    return objects.service(ns, name, [ip], [{"name": "http", "port": 80}], labels)


def pod_mirror(host: str, cluster: str, root: str, ip: str, ns: str = "default") -> dict[str, Any]:
    obj = svc(
        f"{host}-{cluster}", ns, ip,
        **{
            "mirror.linkerd.io/mirrored-service": "true",
            "mirror.linkerd.io/cluster-name": cluster,
            "mirror.linkerd.io/headless-mirror-svc-name": f"{root}-{cluster}",
        },
    )
    obj["metadata"]["annotations"] = {
        "mirror.linkerd.io/remote-svc-fq-name": f"{host}.{root}.{ns}.svc.cluster.local"
    }
    return obj


def gateway_slice(name: str, ns: str, ready: bool, ip: str = "172.18.0.9") -> dict[str, Any]:
    return objects.endpoint_slice(ns, f"{name}-abcde", name, [objects.endpoint(ip, ready)],
                                  [("http", 4143)])


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def watch_requests(kube: FakeKube, since: int = 0) -> list[tuple[str, dict[str, list[str]]]]:
    out = []
    for method, target in kube.request_log[since:]:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if method == "GET" and query.get("watch") == ["true"]:
            out.append((parts.path, query))
    return out


def list_requests(kube: FakeKube, since: int = 0) -> list[str]:
    """Collection lists (discovery requests, which have no query, left out)."""
    return [
        t for m, t in kube.request_log[since:]
        if m == "GET" and "watch=" not in t and "?" in t
    ]


# --------------------------------------------------------------------------- initial sync


async def test_initial_sync_is_one_replace_then_synced(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    c = start(page_size=7)  # 25 services, 20 slices: several pages each
    await c.wait_for(lambda: c.synced)
    first = c.batches[0]
    assert len(first) == 2 and isinstance(first[0], Replace) and first[1] == Synced()
    assert first[0].kinds == frozenset({Kind.SERVICE, Kind.SLICE, Kind.LINK})

    docs = yaml.safe_load(DEMO_EAST.read_text())["items"]
    from_file = {parse_object(d) for d in docs}
    assert set(first[0].records) == from_file
    assert len(first[0].records) == 61
    assert {key_of(r) for r in first[0].records} == set(expected_state(fake_kube_demo))

    lists = list_requests(fake_kube_demo)
    assert sum("/api/v1/services?" in t for t in lists) == 5  # ceil(32 / 7)
    assert sum("endpointslices?" in t for t in lists) == 4  # ceil(26 / 7)
    assert sum("links?" in t for t in lists) == 1
    assert all("limit=7" in t for t in lists)
    # The Link CRD's version comes from discovery.
    assert fake_kube_demo.count("/apis/multicluster.linkerd.io") == 1
    # All three watches start at the lists' resourceVersion, with bookmarks.
    await c.wait_for(lambda: len(watch_requests(fake_kube_demo)) == 3)
    for path, q in watch_requests(fake_kube_demo):
        assert path in SVC_PATHS
        assert q["resourceVersion"] == [str(fake_kube_demo.resource_version)]
        assert q["allowWatchBookmarks"] == ["true"]
        assert q["timeoutSeconds"][0].isdigit()


async def test_no_sync_while_the_api_fails_then_recover(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    fake_kube_demo.fail_next(5, status=500)
    c = start()
    await c.converged(fake_kube_demo)
    # Nothing but errors before the one Replace + Synced.
    first_replace = next(i for i, b in enumerate(c.batches) if any(
        isinstance(e, Replace) for e in b))
    assert all(isinstance(e, SourceError) for b in c.batches[:first_replace] for e in b)
    assert len(c.of_type(SourceError)) == 5
    assert "500" in c.of_type(SourceError)[0].message
    assert c.of_type(Synced) == [Synced()]


async def test_a_failing_list_is_told_once_per_reason_and_each_retry_counted(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], caplog: pytest.LogCaptureFixture
):
    """An operator's 3 a.m.: a list that keeps failing is one log line per state (a new
    reason is a new state), not one per retry; the retries are counted in a metric, and
    the index is still told of each (SourceError)."""
    kube = fake_kube_demo
    retries = {r: sample("dnsside_list_retries_total", resource="services", reason=r)
               for r in ("http-500", "http-503")}

    def services_list(request: Any) -> bool:
        return request.path == "/api/v1/services" and "watch" not in request.query

    kube.fail_next(4, status=500, match=services_list)
    kube.fail_next(3, status=503, match=services_list)
    with caplog.at_level(logging.DEBUG, logger="dnsside.kube"):
        c = start()
        await c.converged(kube)
    failed = [r for r in caplog.records if "list services failed" in r.getMessage()]
    told = [r.getMessage() for r in failed if r.levelno >= logging.WARNING]
    assert len(told) == 2, told
    assert "500" in told[0] and "503" in told[1]
    assert len(failed) == 7  # the other retries: debug lines
    assert sample("dnsside_list_retries_total", resource="services",
                  reason="http-500") == retries["http-500"] + 4
    assert sample("dnsside_list_retries_total", resource="services",
                  reason="http-503") == retries["http-503"] + 3
    assert len([e for e in c.of_type(SourceError) if "list services" in e.message]) == 7


async def test_a_failing_watch_is_told_once_till_a_stream_opens_again(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], caplog: pytest.LogCaptureFixture
):
    """The same for a watch: while the API server is away, each watch's failure is one
    warning per reason (a stream cut, then no connection), however many times it is
    retried; once a stream opened again, a new failure is a new state, told again."""
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)
    await c.wait_for(lambda: kube.open_streams == 3)

    def failures() -> list[SourceError]:
        return [e for e in c.of_type(SourceError) if "watch services" in e.message]

    with caplog.at_level(logging.DEBUG, logger="dnsside.kube"):
        for outage in (1, 2):
            await kube.set_unreachable(True)
            seen = len(failures())
            await c.wait_for(lambda: len(failures()) >= seen + 5)  # retried, again and again
            await kube.set_unreachable(False)
            await c.wait_for(lambda: kube.open_streams == 3)
            lines = [r for r in caplog.records if "watch services failed" in r.getMessage()]
            told = [re.search(r"failed \((.+?)\)", r.getMessage()).group(1)  # type: ignore[union-attr]
                    for r in lines if r.levelno >= logging.WARNING]
            assert told and len(told) == len(set(told)), told  # once per reason
            assert len(lines) - len(told) >= 2  # the retries: debug lines
            caplog.clear()
    await c.converged(kube)


async def test_list_restarts_when_its_continue_token_expires(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], caplog: pytest.LogCaptureFixture
):
    fake_kube_demo.fail_next(
        1, status=410, match=lambda r: "continue" in r.query and "services" in r.path
    )
    with caplog.at_level(logging.WARNING, logger="dnsside.kube"):
        c = start(page_size=10)
        await c.converged(fake_kube_demo)
    assert any("continue token expired" in r.getMessage() for r in caplog.records)
    assert len(c.of_type(Replace)) == 1  # the restart is inside the initial list
    assert [t for t in list_requests(fake_kube_demo) if "services?" in t][2] == (
        "/api/v1/services?limit=10"
    )


# --------------------------------------------------------------------------- watching


async def test_watch_events_follow_changes(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)

    # A new pod appears behind the west link; a gateway goes not-ready; a mirror goes.
    kube.apply(pod_mirror("nginx-set-3", "west", "nginx-svc", "10.96.1.33"))
    kube.apply(gateway_slice("nginx-set-3-west", "default", ready=True))
    kube.apply(gateway_slice("nginx-set-3-west", "default", ready=False))
    kube.delete("Service", "default", "nginx-set-0-north")
    await c.converged(kube)
    upserts = [e.record for e in c.of_type(Upsert)]
    services = [r for r in upserts if Kind.of(r) is Kind.SERVICE]
    slices = [r for r in upserts if Kind.of(r) is Kind.SLICE]
    assert [r.name for r in services] == ["nginx-set-3-west"]
    assert [r.name for r in slices] == ["nginx-set-3-west-abcde"] * 2
    assert services[0].hostname == "nginx-set-3" and services[0].cluster == "west"
    assert slices[0].has_ready_endpoint and not slices[1].has_ready_endpoint
    assert c.of_type(Delete) == [Delete(Kind.SERVICE, "default", "nginx-set-0-north")]
    assert len(c.of_type(Replace)) == 1


async def test_bad_object_is_skipped_and_keeps_previous_record(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], caplog: pytest.LogCaptureFixture
):
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)
    before = c.state[(Kind.SERVICE, "default", "web-west")]
    broken = kube.get("Service", "default", "web-west")
    assert broken is not None
    broken["spec"]["clusterIPs"] = ["not-an-ip"]
    with caplog.at_level(logging.WARNING, logger="dnsside.kube"):
        kube.apply(broken)
        kube.apply(svc("after", "db"))
        await c.wait_for(lambda: (Kind.SERVICE, "db", "after") in c.state)
    assert c.state[(Kind.SERVICE, "default", "web-west")] == before
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("default/web-west" in w and "not-an-ip" in w for w in warnings)


async def test_bad_object_in_a_list_is_skipped(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], caplog: pytest.LogCaptureFixture
):
    broken = svc("broken", "db")
    broken["spec"]["ports"] = [{"port": 70000}]
    fake_kube_demo.apply(broken)
    with caplog.at_level(logging.WARNING, logger="dnsside.kube"):
        c = start()
        await c.wait_for(lambda: c.synced)
    replace = c.of_type(Replace)[0]
    assert len(replace.records) == 61
    assert (Kind.SERVICE, "db", "broken") not in {key_of(r) for r in replace.records}
    assert any("db/broken" in r.getMessage() for r in caplog.records)


async def test_resume_after_dropped_streams_without_relist(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)
    await c.wait_for(lambda: kube.open_streams == 3)
    relists = sample("dnsside_relists_total", resource="services")
    mark = len(kube.request_log)
    last_rv = kube.resource_version

    assert kube.drop_streams() == 3
    # Changes made while the client reconnects come from the watch history.
    kube.apply(pod_mirror("nginx-set-3", "west", "nginx-svc", "10.96.1.33"))
    kube.delete("EndpointSlice", "default", "nginx-set-0-north-bffce")
    await c.converged(kube)

    # The Link watch has nothing to deliver, so it may still be backing off: wait for it.
    await c.wait_for(lambda: {p for p, _ in watch_requests(kube, mark)} == SVC_PATHS)
    assert list_requests(kube, mark) == []  # no relist
    assert len(c.of_type(Replace)) == 1
    assert sample("dnsside_relists_total", resource="services") == relists
    resumed = watch_requests(kube, mark)
    assert all(q["resourceVersion"] == [str(last_rv)] for _, q in resumed[:3])
    assert len(c.of_type(SourceError)) >= 1  # the drops were reported, nothing else
    assert sample("dnsside_watch_restarts_total", resource="services", reason="dropped") >= 1


async def test_stream_timeouts_reopen_from_bookmarked_version(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    """Bookmarks move a quiet stream's resume point past compaction: no 410, no relist."""
    kube = fake_kube_demo
    c = start(watch_timeout=1)
    await c.converged(kube)
    relists = sample("dnsside_relists_total", resource="services")
    mark = len(kube.request_log)
    kube.apply(gateway_slice("web-west", "default", ready=False))  # slices only
    target = str(kube.resource_version)
    # The services stream sees no event, only bookmarks; when the server closes it
    # (timeoutSeconds=1), it must come back from the bookmarked version.
    await c.wait_for(lambda: any(
        p == "/api/v1/services" and q["resourceVersion"] == [target]
        for p, q in watch_requests(kube, mark)
    ))
    # So forgetting the history before it costs nothing.
    kube.compact()
    kube.drop_streams()
    kube.apply(svc("late", "db"))
    await c.converged(kube)
    assert sample("dnsside_relists_total", resource="services") == relists
    assert len(c.of_type(Replace)) == 1
    assert all("dropped" in e.message for e in c.of_type(SourceError))  # closes aren't errors
    assert sample("dnsside_watch_restarts_total", resource="services", reason="closed") >= 1


async def test_api_errors_are_retried_then_recover(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)
    await c.wait_for(lambda: kube.open_streams == 3)
    errors = len(c.of_type(SourceError))
    kube.fail_next(6, status=503)
    kube.drop_streams()
    kube.apply(svc("while-failing", "db"))
    await c.wait_for(lambda: kube.pending_failures == 0)
    await c.converged(kube)
    assert len(c.of_type(SourceError)) >= errors + 6 + 1  # 6 answers + at least one drop
    assert any("503" in e.message for e in c.of_type(SourceError))
    assert len(c.of_type(Replace)) == 1  # a 5xx is no reason to relist


async def test_unreachable_api_then_410_relists_and_replaces(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], caplog: pytest.LogCaptureFixture
):
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)
    relists = {r: sample("dnsside_relists_total", resource=r) for r in ("services",
                                                                      "endpointslices", "links")}
    await kube.set_unreachable(True)
    await c.wait_for(lambda: len(c.of_type(SourceError)) >= 4)  # both watches keep trying

    # While away: a per-pod mirror and its slice go, a local pod comes, a gateway fails.
    kube.delete("Service", "default", "nginx-set-1-north")
    kube.delete("EndpointSlice", "default", "nginx-set-1-north-f1ad1")
    local = kube.get("EndpointSlice", "default", "nginx-svc-b060a")
    assert local is not None
    local["endpoints"].append({
        "addresses": ["10.42.1.12"], "conditions": {"ready": True}, "hostname": "nginx-set-2",
    })
    kube.apply(local)
    kube.apply(gateway_slice("web-west", "default", ready=False))
    kube.compact()  # the history the watches would resume from is gone
    gone = {(Kind.SERVICE, "default", "nginx-set-1-north"),
            (Kind.SLICE, "default", "nginx-set-1-north-f1ad1")}
    assert gone <= c.state.keys()

    with caplog.at_level(logging.INFO, logger="dnsside.kube"):
        await kube.set_unreachable(False)
        await c.converged(kube)
        # The Link watch's history is gone too (its Links did not change, so the state
        # above converges without it).
        await c.wait_for(lambda: len(c.of_type(Replace)) == 4)
    replaces = c.of_type(Replace)[1:]
    assert sorted(next(iter(r.kinds)).value for r in replaces) == [
        "EndpointSlice", "Link", "Service"]
    for r in replaces:
        assert len(r.kinds) == 1
        assert not gone & {key_of(rec) for rec in r.records}
        assert {key_of(rec) for rec in r.records} == {
            k for k in expected_state(kube) if k[0] in r.kinds
        }
    assert not gone & c.state.keys()
    for resource in relists:
        assert sample("dnsside_relists_total", resource=resource) == relists[resource] + 1
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("relisting services") and "410" in m for m in messages)
    assert any(m.startswith("relisting endpointslices") for m in messages)
    assert any(m.startswith("relisting links") for m in messages)

    # And it keeps watching afterwards.
    kube.apply(svc("after-relist", "db"))
    await c.converged(kube)


async def test_namespace_filter(fake_kube_demo: FakeKube, start: Callable[..., Collector]):
    kube = fake_kube_demo
    namespaces = ["db", "linkerd-multicluster"]
    c = start(namespaces=namespaces)
    await c.converged(kube, namespaces)
    assert {k[1] for k in c.state} == set(namespaces)
    await c.wait_for(lambda: len(watch_requests(kube)) == 5)
    paths = {urlsplit(t).path for _, t in kube.request_log}
    # Links are read cluster-wide (they live in linkerd-multicluster, not in the app's).
    assert paths == {
        f"{prefix}/namespaces/{ns}/{plural}"
        for ns in namespaces
        for prefix, plural in (("/api/v1", "services"),
                               ("/apis/discovery.k8s.io/v1", "endpointslices"))
    } | {"/apis/multicluster.linkerd.io", LINKS_PATH}
    kube.apply(svc("elsewhere", "default"))
    kube.apply(svc("here", "db"))
    await c.converged(kube, namespaces)
    assert all(e.record.namespace == "db" for e in c.of_type(Upsert))

    # A 410 in one namespace relists that resource in all of them, as one Replace.
    await kube.set_unreachable(True)
    kube.delete("Service", "linkerd-multicluster", "probe-north")
    kube.compact()
    await kube.set_unreachable(False)
    await c.converged(kube, namespaces)
    replace = next(r for r in c.of_type(Replace)[1:] if Kind.SERVICE in r.kinds)
    assert replace.kinds == frozenset({Kind.SERVICE})
    assert {r.namespace for r in replace.records} == set(namespaces)


async def test_only_get_requests(fake_kube_demo: FakeKube, start: Callable[..., Collector]):
    kube = fake_kube_demo
    c = start(watch_timeout=1)
    await c.converged(kube)
    kube.drop_streams()
    kube.apply(svc("x", "db"))
    await c.converged(kube)
    assert kube.verbs() == {"GET"}
    assert {urlsplit(t).path for _, t in kube.request_log} == SVC_PATHS | {
        "/apis/multicluster.linkerd.io"}


async def test_closing_the_generator_closes_streams(fake_kube_demo: FakeKube):
    source = KubeSource(kubeconfig=fake_kube_demo.kubeconfig, pacing=Pacing(backoff_base=0.01))
    events = source.events()
    first = await anext(events)
    assert isinstance(first[0], Replace)
    await _poll(lambda: fake_kube_demo.open_streams == 3)
    await events.aclose()
    await _poll(lambda: fake_kube_demo.open_streams == 0)


# --------------------------------------------------------------------------- configuration


async def test_kubeconfig_from_environment(
    fake_kube_demo: FakeKube, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("KUBECONFIG", fake_kube_demo.kubeconfig)
    events = KubeSource(kubeconfig=None).events()
    try:
        first = await asyncio.wait_for(anext(events), DEADLINE)
        assert isinstance(first[0], Replace) and len(first[0].records) == 61
    finally:
        await events.aclose()


async def test_missing_configuration_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    with pytest.raises(KubeConfigError, match="nope"):
        await anext(KubeSource(kubeconfig=str(tmp_path / "nope")).events())
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match="--kubeconfig"):
        await anext(KubeSource().events())


async def test_wrong_token_is_retried_as_an_error(
    fake_kube_demo: FakeKube, start: Callable[..., Collector]
):
    fake_kube_demo.token = "rotated"
    c = start()
    await c.wait_for(lambda: len(c.of_type(SourceError)) >= 2)
    assert "401" in c.of_type(SourceError)[0].message
    assert not c.synced
    fake_kube_demo.token = "fake-token"
    await c.converged(fake_kube_demo)


def test_backoff_is_exponential_with_full_jitter_and_capped():
    b = Backoff(0.5, 30.0, random.Random(7))
    delays = [b.next() for _ in range(12)]
    for attempt, delay in enumerate(delays):
        assert 0 <= delay <= min(30.0, 0.5 * 2**attempt)
    assert max(delays[8:]) <= 30.0 and max(delays[6:]) > 2.0
    b.reset()
    assert b.next() <= 0.5
    assert all(Backoff(1.0, 30.0).next() <= 1.0 for _ in range(100))


async def _poll(pred: Callable[[], bool], timeout: float = DEADLINE) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


def test_watch_lines_whatever_the_chunks() -> None:
    """The watch stream's line splitter (no growing buffer, no copy of a chunk
    that is one whole event) yields the same lines however the stream is cut."""
    from dnsside.kubeapi.client import WatchLines

    events = [b'{"type":"ADDED","n":%d,"pad":"%s"}' % (i, b"x" * (i * 7 % 50))
              for i in range(40)]
    stream = b"".join(e + b"\n" for e in events) + b'{"type":"BOOKMARK"}'
    for size in (1, 2, 7, 33, 64, 1000, len(stream)):
        lines = WatchLines()
        got: list[bytes] = []
        for i in range(0, len(stream), size):
            got.extend(line.rstrip(b"\n") for line in lines.feed(stream[i : i + size]))
        assert [g for g in got if g] == events, size
        assert lines.rest() == b'{"type":"BOOKMARK"}'
    one = events[0] + b"\n"
    lines = WatchLines()
    assert lines.feed(one)[0] is one  # a chunk that is one event goes on as is
    assert lines.feed(b"") == [] and lines.rest() == b""


async def test_records_replaced_since_a_list_are_not_kept(fake_kube_demo: FakeKube) -> None:
    """The source keeps no list of what it listed once it handed it on. Its
    frames live as long as the watches: the initial list (or a relist's) kept there held
    every record that churn replaced since alive next to its successor, up to twice the
    index."""
    import gc

    def alive() -> int:
        gc.unfreeze()  # what an index froze is counted too
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is ServiceRecord)

    before = alive()
    kube = fake_kube_demo
    model: dict[tuple[str, str], Record] = {}
    synced = asyncio.Event()
    replaces = [0]  # the initial list's, then each relist's

    async def consume() -> None:
        async for batch in KubeSource(kubeconfig=kube.kubeconfig, pacing=Pacing(
                backoff_base=0.01, backoff_cap=0.1)).events():
            for event in batch:
                if isinstance(event, Replace):
                    replaces[0] += 1
                    model.update(((r.namespace, r.name), r) for r in event.records
                                 if isinstance(r, ServiceRecord))
                elif isinstance(event, Upsert) and isinstance(event.record, ServiceRecord):
                    model[(event.record.namespace, event.record.name)] = event.record
                elif isinstance(event, Synced):
                    synced.set()
            del batch, event  # the model, like the index, is all that holds records

    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(synced.wait(), DEADLINE)
        for relist in (False, True):
            changed = []
            for obj in kube.objects("Service"):
                if obj["spec"].get("clusterIP") not in (None, "None"):
                    obj["metadata"].setdefault("labels", {})["churned"] = str(relist)
                    obj["spec"]["clusterIP"] = obj["spec"]["clusterIPs"][0] = (
                        "10.99.0.1" if relist else "10.99.0.2")
                    kube.apply(obj)
                    changed.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
            assert changed
            async with asyncio.timeout(DEADLINE):
                while any(isinstance(model.get(k), ServiceRecord)
                          and model[k].cluster_ips != (("10.99.0.1",) if relist else
                                                       ("10.99.0.2",)) for k in changed):
                    await asyncio.sleep(0.02)
            if not relist:  # then a relist: its list must not stay behind either
                kube.compact()
                kube.drop_streams()
                async with asyncio.timeout(DEADLINE):  # the resumed watch gets 410: relist
                    while replaces[0] < 2:
                        await asyncio.sleep(0.02)
        assert alive() - before == len(model)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_long_watch_line_is_decoded_and_parsed_off_the_event_loop(
    fake_kube_demo: FakeKube, start: Callable[..., Collector], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1 MB watch line (a 12,000-endpoint slice) costs 40-80 ms of JSON and parsing:
    it is done in a worker thread, and gives the same record and the same refusal as a
    short line decoded on the loop."""
    threads: dict[str, int] = {}

    def parse_recording(obj: Any, where: str) -> Record | None:
        threads[obj["metadata"]["name"]] = threading.get_ident()
        return parse_service(obj, where)

    monkeypatch.setattr(kube_source, "RESOURCES", tuple(
        dataclasses.replace(r, parse=parse_recording) if r.kind is Kind.SERVICE else r
        for r in kube_source.RESOURCES))
    kube = fake_kube_demo
    c = start()
    await c.converged(kube)
    loop_thread = threading.get_ident()
    long_one, short_one = svc("long", "db"), svc("short", "db")
    long_one["metadata"]["annotations"] = {"example.com/padding": "x" * (OFF_LOOP_BYTES + 1)}
    broken = svc("long-broken", "db", ip="not-an-ip")
    broken["metadata"]["annotations"] = long_one["metadata"]["annotations"]
    kube.apply(long_one)
    kube.apply(broken)
    kube.apply(short_one)
    await c.wait_for(lambda: (Kind.SERVICE, "db", "short") in c.state)
    assert (Kind.SERVICE, "db", "long") in c.state
    assert (Kind.SERVICE, "db", "long-broken") not in c.state, "refused as on the loop"
    assert threads["short"] == loop_thread
    assert threads["long"] != loop_thread and threads["long-broken"] != loop_thread
