"""Links through the Kubernetes source: whatever version the API serves, a deleted Link,
a re-created one, a 403, a missing CRD — seen first as source events, then through
`dnsside serve` as DNS answers, logs, metrics and explain."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from fakekube import FakeKube
from support import DEMO, Dnsside, ThreadedKube, answers, wait_for

from dnsside.events import Event, Kind, LinksUnavailable, Replace, Synced
from dnsside.linkerd import LinkRecord
from dnsside.sources.kube import KubeSource

NGINX = "nginx-svc.default.svc-global"
WEST = {"10.43.179.60", "10.43.218.18", "10.43.245.244"}
ORPHAN = "10.45.0.10"  # nginx-set-0 of cluster "old", whose Link was deleted
ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]
DEADLINE = 10.0


def obj(name: str, kind: str = "Link") -> dict[str, Any]:
    return copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == name
                              and o["kind"] == kind))


# --------------------------------------------------------------------------- source events


@pytest.fixture
async def events(fake_kube_demo: FakeKube) -> AsyncIterator[list[list[Event]]]:
    """Batches from a KubeSource on the demo, collected in the background."""
    batches: list[list[Event]] = []
    source = KubeSource(kubeconfig=fake_kube_demo.kubeconfig, backoff_base=0.01,
                        backoff_cap=0.1, links_retry=0.1)

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
    assert any(p.startswith(f"/apis/multicluster.linkerd.io/{versions[0]}/links") for p in paths)


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


async def test_links_revoked_while_watching(fake_kube_demo: FakeKube,
                                            events: list[list[Event]]) -> None:
    await until(lambda: any(isinstance(e, Synced) for e in flat(events)))
    fake_kube_demo.forbid("links")
    gone = await until(lambda: next((e for e in flat(events) if isinstance(e, LinksUnavailable)),
                                    None))
    assert "403" in gone.reason
    # Never a Replace that would empty the Link set.
    assert not any(isinstance(e, Replace) and Kind.LINK in e.kinds and not e.records
                   for e in flat(events))


# --------------------------------------------------------------------------- through DNS


def serve(kube: ThreadedKube, *extra: str) -> Dnsside:
    return Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                   "--kube-backoff-cap", "0.3", *extra)


def nginx(srv: Dnsside) -> set[str]:
    return set(answers(srv.query(NGINX)))


def metric(srv: Dnsside, name: str, **labels: str) -> float | None:
    _, text = srv.http("/metrics")
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{label_text}}} (\S+)$" if labels else rf"^{name} (\S+)$", text,
                  re.MULTILINE)
    return float(m.group(1)) if m else None


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
