"""Links through the Kubernetes source: whatever version the API serves, a deleted Link,
a re-created one, a 403, a missing CRD — seen first as source events, then through
`dnsside serve` as DNS answers, logs, metrics and explain."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from urllib.parse import urlsplit
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from dnsside.model.events import (
    Event,
    Kind,
    LinksUnavailable,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import LinkRecord
from dnsside.sources.kube import KubeSource
from dnsside.sources.pacing import Pacing
from testkit.fakekube import FakeKube
from testkit.serve import DEMO, Dnsside, answers, run_cli, wait_for
from testkit.threadedkube import ThreadedKube

NGINX = "nginx-svc.default.svc-global"
WEST = {"10.43.179.60", "10.43.218.18", "10.43.245.244"}
ORPHAN = "10.45.0.10"  # nginx-set-0 of cluster "old", whose Link was deleted
ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]
DEADLINE = 10.0
NS = "linkerd-multicluster"


def obj(name: str, kind: str = "Link") -> dict[str, Any]:
    return copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == name
                              and o["kind"] == kind))


# --------------------------------------------------------------------------- source events


@pytest.fixture
async def events(fake_kube_demo: FakeKube) -> AsyncIterator[list[list[Event]]]:
    """Batches from a KubeSource on the demo, collected in the background."""
    batches: list[list[Event]] = []
    source = KubeSource(kubeconfig=fake_kube_demo.kubeconfig,  # Links again every 0.1 s
                        pacing=Pacing(backoff_base=0.01, backoff_cap=0.1))

    async def collect() -> None:
        async for batch in source.events():
            batches.append(batch)

    task = asyncio.create_task(collect())
    yield batches
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def until(pred: Any, timeout: float = DEADLINE) -> Any:
    async with asyncio.timeout(timeout):
        while not (result := pred()):
            await asyncio.sleep(0.01)
    return result


def flat(batches: list[list[Event]]) -> list[Event]:
    return [e for b in batches for e in b]


@pytest.mark.parametrize("versions", [["v1alpha1"], ["v1alpha2", "v1alpha1"],
                                      ["v1alpha3", "v1alpha2", "v1alpha1"]])
async def test_links_at_the_version_the_api_prefers(
    fake_kube_demo: FakeKube, events: list[list[Event]], versions: list[str]
) -> None:
    fake_kube_demo.set_link_crd(versions)
    first = await until(lambda: events and events[0])
    replace = first[0]
    assert isinstance(replace, Replace) and Kind.LINK in replace.kinds and first[-1] == Synced()
    links = {r.target_cluster for r in replace.records if isinstance(r, LinkRecord)}
    assert links == {"west", "north", "south"}
    paths = {path for _, path in fake_kube_demo.request_log}
    assert any(p.startswith(f"/apis/multicluster.linkerd.io/{versions[0]}/namespaces/"
                            "linkerd-multicluster/links") for p in paths)


def shadow(name: str, target: str, namespace: str = "aaa",
           created: str = "2020-01-01T00:00:00Z") -> dict[str, Any]:
    """A Link written by someone who may write Links (elsewhere, or a second one): older
    than the real ones, so no rule of age could let it win by accident."""
    link = obj("west")
    link["metadata"] = {"name": name, "namespace": namespace, "creationTimestamp": created}
    link["spec"] = {**link["spec"], "targetClusterName": target,
                    "probeSpec": {**link["spec"].get("probeSpec", {}), "path": "/evil"}}
    return link


async def test_links_are_read_in_the_links_namespace_only(fake_kube_demo: FakeKube,
                                                          events: list[list[Event]]) -> None:
    """Links elsewhere are never asked for, so never delivered: not listed, not watched."""
    fake_kube_demo.apply(shadow("west-shadow", "west"))
    first = await until(lambda: events and events[0])
    assert isinstance(first[0], Replace) and Kind.LINK in first[0].kinds
    links = [r for r in first[0].records if isinstance(r, LinkRecord)]
    assert {(lk.namespace, lk.name) for lk in links} == {
        ("linkerd-multicluster", c) for c in ("west", "north", "south")}
    fake_kube_demo.apply(shadow("old-shadow", "old"))  # while watching
    fake_kube_demo.apply(shadow("east-back", "east", "linkerd-multicluster"))
    await until(lambda: any(isinstance(e, Upsert) and isinstance(e.record, LinkRecord)
                            and e.record.name == "east-back" for e in flat(events)))
    assert not [e for e in flat(events) if isinstance(e, Upsert)
                and isinstance(e.record, LinkRecord) and e.record.namespace != NS]
    asked = {urlsplit(path).path for _, path in fake_kube_demo.request_log
             if urlsplit(path).path.endswith("/links")}
    assert asked == {f"/apis/multicluster.linkerd.io/v1alpha3/namespaces/{NS}/links"}, asked


@pytest.mark.parametrize("fault", ["crd-missing", "forbidden"])
async def test_unreadable_links_never_hold_up_the_sync(
    fake_kube_demo: FakeKube, events: list[list[Event]], fault: str
) -> None:
    if fault == "crd-missing":
        fake_kube_demo.set_link_crd(None)
    else:
        fake_kube_demo.forbid("links")
    first = await until(lambda: events and events[0])
    assert isinstance(first[0], Replace) and Kind.LINK not in first[0].kinds
    unavailable = first[1]
    assert isinstance(unavailable, LinksUnavailable)
    expected = "not installed" if fault == "crd-missing" else "forbidden"
    assert expected in unavailable.reason
    assert first[-1] == Synced()
    # Fixed later (the CRD installed, the RBAC granted): the Links are read then.
    fake_kube_demo.set_link_crd(["v1alpha3"])
    fake_kube_demo.allow("links")
    replace = await until(lambda: next((e for e in flat(events)[2:] if isinstance(e, Replace)
                                        and e.kinds == {Kind.LINK}), None))
    assert len(replace.records) == 3


async def test_a_failing_link_list_holds_the_first_sync(
    fake_kube_demo: FakeKube, events: list[list[Event]]
) -> None:
    """A transient failure is not "cannot be read": the first answers wait for the Links
    rather than start wider than they allow (orphans served). The failure lasts longer
    than any grace a source could give itself before going on without them (a first
    version gave up after 5 s)."""
    held = 7.0  # the stimulus: seconds the Link list keeps failing, not a synchronisation
    fake_kube_demo.fail_next(100_000, 500, match=lambda r: r.path.endswith("/links"))
    start = time.monotonic()
    await until(lambda: time.monotonic() - start > held, timeout=held + DEADLINE)
    assert fake_kube_demo.pending_failures < 100_000 - 20  # it kept asking
    assert not any(isinstance(e, (Replace, Synced, LinksUnavailable)) for e in flat(events))
    fake_kube_demo.clear_failures()
    first = await until(lambda: next((b for b in events if any(isinstance(e, Replace)
                                                               for e in b)), None))
    assert isinstance(first[0], Replace) and Kind.LINK in first[0].kinds
    assert not any(isinstance(e, LinksUnavailable) for e in flat(events))


async def test_links_revoked_while_watching(fake_kube_demo: FakeKube,
                                            events: list[list[Event]]) -> None:
    await until(lambda: any(isinstance(e, Synced) for e in flat(events)))
    fake_kube_demo.forbid("links")
    fake_kube_demo.drop_streams()
    gone = await until(lambda: next((e for e in flat(events) if isinstance(e, LinksUnavailable)),
                                    None))
    assert "403" in gone.reason
    # Never a Replace that would empty the Link set: the listed one stands in the index.
    assert not any(isinstance(e, Replace) and Kind.LINK in e.kinds and not e.records
                   for e in flat(events))


# --------------------------------------------------------------------------- through DNS


def serve(kube: ThreadedKube, *extra: str) -> Dnsside:
    return Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                   "--kube-backoff-cap", "0.3", *extra)


def nginx(srv: Dnsside) -> set[str]:
    return set(answers(srv.query(NGINX)))


def metric(srv: Dnsside, name: str, **labels: str) -> float | None:
    return srv.metric(name, **labels)


def test_link_deleted_and_recreated(kube: ThreadedKube) -> None:
    with serve(kube) as srv:
        assert nginx(srv) >= WEST and ORPHAN not in nginx(srv)
        assert metric(srv, "dnsside_orphaned_mirrors", cluster="old") == 1
        kube.call(kube.kube.delete, "Link", "linkerd-multicluster", "west")
        wait_for(lambda: not WEST & nginx(srv), what="west's members gone")
        srv.wait_log("cluster west: 7 mirrors are orphans")
        _, body = srv.http(f"/debug/explain?name=nginx-set-1.west.{NGINX}")
        (member,) = json.loads(body)["members"]
        assert member["status"].startswith("left out: orphaned: no Link targets cluster west")
        assert metric(srv, "dnsside_orphaned_mirrors", cluster="west") == 7
        kube.call(kube.kube.apply, obj("west"))
        wait_for(lambda: nginx(srv) >= WEST, what="west's members back")
        assert metric(srv, "dnsside_orphaned_mirrors", cluster="west") == 0


@pytest.mark.parametrize("fault", ["forbidden", "crd-missing"])
def test_unreadable_links_keep_serving_unfiltered(kube: ThreadedKube, fault: str) -> None:
    if fault == "forbidden":
        kube.call(kube.kube.forbid, "links")
    else:
        kube.call(kube.kube.set_link_crd, None)
    with serve(kube) as srv:
        # Nothing filtered: the orphan is served, and so is everything else.
        assert ORPHAN in nginx(srv) and nginx(srv) >= WEST
        assert metric(srv, "dnsside_links_readable") == 0
        srv.wait_log("Links cannot be read")
        _, body = srv.http(f"/debug/explain?name={NGINX}")
        assert "orphaned mirrors are not filtered" in json.loads(body)["links"]
        if fault == "forbidden":
            kube.call(kube.kube.allow, "links")
        else:
            kube.call(kube.kube.set_link_crd, ["v1alpha3", "v1alpha2", "v1alpha1"])
        wait_for(lambda: ORPHAN not in nginx(srv), what="orphans filtered once Links are read")
        assert nginx(srv) >= WEST
        assert metric(srv, "dnsside_links_readable") == 1


def test_a_link_elsewhere_or_a_second_link_never_takes_a_cluster(kube: ThreadedKube) -> None:
    """`aaa/old-shadow` would bring the unlinked cluster old back and `aaa/west-shadow` take
    west (both sort before linkerd-multicluster); a second Link for west in the links
    namespace, newer, is refused. Each told once, counted, explained and checked; the
    same after a restart."""
    kube.call(kube.kube.apply, shadow("old-shadow", "old"))
    kube.call(kube.kube.apply, shadow("west-shadow", "west"))
    kube.call(kube.kube.apply, shadow("aaa-west", "west", NS, "2026-11-02T00:00:00Z"))
    for _ in range(2):  # and once more after a restart
        with serve(kube) as srv:
            assert ORPHAN not in nginx(srv) and nginx(srv) >= WEST
            kube.call(kube.kube.apply, obj("north"))  # a Link event after the sync
            srv.wait_log("is refused: cluster west is linked by Link linkerd-multicluster/west")
            told = [line for line in list(srv.lines) if "aaa-west is refused" in line
                    and "initial sync" not in line]
            assert len(told) == 1 and "WARNING" in told[0] and "created first" in told[0], told
            assert not [line for line in list(srv.lines) if "aaa/" in line]  # never read
            assert metric(srv, "dnsside_links_refused", reason="duplicate") == 1
            assert metric(srv, "dnsside_links_refused", reason="outside-namespace") == 0
            assert metric(srv, "dnsside_orphaned_mirrors", cluster="old") == 1
            _, body = srv.http(f"/debug/explain?name={NGINX}")
            assert "Link linkerd-multicluster/aaa-west is refused" in json.loads(body)["links"]
    checked = run_cli(["check", "--kubeconfig", kube.kubeconfig, "--cluster-name", "east"])
    for link in ("aaa/old-shadow", "aaa/west-shadow", f"{NS}/aaa-west"):
        line = f"‼ Link {link} counts"
        assert line in checked.stdout, checked.stdout
    hint = checked.stdout.split("‼ Link aaa/west-shadow counts", 1)[1].split("\n", 2)[1]
    assert "only Links in linkerd-multicluster (--links-namespace) count" in hint, hint


def test_a_link_watch_fault_never_brings_an_unlinked_cluster_back(kube: ThreadedKube) -> None:
    """Link west deleted (its mirrors stay, as Linkerd leaves them);
    then the API expires every watch (410 after compaction) and answers the next three Link
    lists with 500. West must stay out all along, and a Link deleted while the watch was
    down (south) is honoured at the relist that finally succeeds."""
    with serve(kube, "--kube-backoff-cap", "4") as srv:
        kube.call(kube.kube.delete, "Link", "linkerd-multicluster", "west")
        wait_for(lambda: not WEST & nginx(srv), what="west's members gone")
        assert "10.44.0.20" in answers(srv.query("kafka.db.svc-global"))  # south's mirror

        def fault() -> None:
            k = kube.kube
            k.fail_next(3, 500, match=lambda r: r.path.endswith("/links")
                        and "watch" not in r.query)
            k.drop_streams()
            k.delete("Link", "linkerd-multicluster", "south")  # unseen by any watch
            k.compact()  # resuming any watch now answers 410 Expired: relist

        kube.call(fault)
        seen: set[str] = set()
        relisted = False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not relisted:
            seen |= nginx(srv)
            # South's mirror leaves the answers once a relist has seen its Link gone.
            relisted = "10.44.0.20" not in answers(srv.query("kafka.db.svc-global"))
        assert relisted, "south, unlinked while the watch was down, still answered"
        assert not WEST & seen, f"an unlinked cluster answered: {sorted(WEST & seen)}"
        assert kube.call(lambda: kube.kube.pending_failures) == 0  # the 500s were all seen
        srv.wait_log("Link watch down")
        assert not WEST & nginx(srv)
        assert metric(srv, "dnsside_links_watch_up") == 1
        assert metric(srv, "dnsside_links_readable") == 1
        _, body = srv.http(f"/debug/explain?name={NGINX}")
        assert json.loads(body)["links"] == "1 read (north)"


def test_links_revoked_after_a_list_keep_the_list(kube: ThreadedKube) -> None:
    """RBAC revoked (or the CRD gone) after Links were listed: the list stands, the orphan
    stays out, and the log, the metrics and explain say the watch is down."""
    with serve(kube) as srv:
        assert ORPHAN not in nginx(srv)

        def revoke() -> None:
            kube.kube.forbid("links")
            kube.kube.drop_streams()

        kube.call(revoke)
        srv.wait_log("Link watch down")
        wait_for(lambda: metric(srv, "dnsside_links_watch_up") == 0, what="watch down metric")
        assert ORPHAN not in nginx(srv) and nginx(srv) >= WEST
        assert metric(srv, "dnsside_links_readable") == 1

        def described() -> str:
            _, body = srv.http(f"/debug/explain?name={NGINX}")
            return str(json.loads(body)["links"])

        links = wait_for(lambda: "403" in described() and described(), what="403 in explain")
        assert links.startswith("3 read (north, south, west); the Link watch is down (")
        assert "s ago stands" in links
        kube.call(kube.kube.allow, "links")
        wait_for(lambda: metric(srv, "dnsside_links_watch_up") == 1, what="watch back")
        srv.wait_log("Links listed again (3)")
        assert ORPHAN not in nginx(srv)
