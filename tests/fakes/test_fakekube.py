"""Tests of the fake API server itself, with plain aiohttp."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from testkit import objects
from testkit.fakekube import FakeKube, parse_selector
from testkit.serve import DEMO as DEMO_EAST

pytestmark = pytest.mark.quick

SVC = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"


def svc(name: str, ns: str = "default", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return objects.service(ns, name, ["10.0.0.1"], [{"port": 80}], labels)


@pytest.fixture
async def http(fake_kube: FakeKube) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {fake_kube.token}"}
    async with aiohttp.ClientSession(fake_kube.url, headers=headers) as session:
        yield session


async def get_json(http: aiohttp.ClientSession, path: str, **params: Any) -> Any:
    async with http.get(path, params={k: str(v) for k, v in params.items()}) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


class Stream:
    """A watch stream read line by line with deadlines."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, timeout: float = 5.0) -> dict[str, Any] | None:
        line = await asyncio.wait_for(self.resp.content.readline(), timeout)
        return json.loads(line) if line else None

    async def until(self, pred: Any, timeout: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                ev = await self.next(timeout)
                assert ev is not None, "stream closed"
                if pred(ev):
                    return ev

    async def rest(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        out = []
        async with asyncio.timeout(timeout):
            while (ev := await self.next(timeout)) is not None:
                out.append(ev)
        self.resp.release()
        return out


async def watch(http: aiohttp.ClientSession, path: str, **params: Any) -> Stream:
    q = {k: str(v) for k, v in {"watch": "true", **params}.items()}
    resp = await http.get(path, params=q)
    assert resp.status == 200
    return Stream(resp)


def names(items: list[dict[str, Any]]) -> list[str]:
    return [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items]


# --------------------------------------------------------------------------- lists


async def test_list_shape_and_namespace(fake_kube_demo: FakeKube, http: aiohttp.ClientSession):
    body = await get_json(http, SVC)
    assert body["kind"] == "ServiceList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(fake_kube_demo.resource_version)
    assert "continue" not in body["metadata"]
    assert len(body["items"]) == 32
    assert all("kind" not in i and "apiVersion" not in i for i in body["items"])
    assert names(body["items"]) == sorted(names(body["items"]))
    rvs = [int(i["metadata"]["resourceVersion"]) for i in body["items"]]
    assert len(set(rvs)) == len(rvs) and max(rvs) <= fake_kube_demo.resource_version

    db = await get_json(http, "/api/v1/namespaces/db/services")
    assert {i["metadata"]["namespace"] for i in db["items"]} == {"db"}
    assert len(db["items"]) == 11
    slices = await get_json(http, "/apis/discovery.k8s.io/v1/namespaces/db/endpointslices")
    assert slices["kind"] == "EndpointSliceList"
    assert slices["apiVersion"] == "discovery.k8s.io/v1"
    assert len(slices["items"]) == 11
    single = await get_json(http, "/api/v1/namespaces/db/services/cockroachdb")
    assert single["kind"] == "Service" and single["metadata"]["name"] == "cockroachdb"


async def test_paging_is_a_consistent_snapshot(
    fake_kube_demo: FakeKube, http: aiohttp.ClientSession
):
    kube = fake_kube_demo
    first = await get_json(http, SVC, limit=10)
    assert len(first["items"]) == 10
    assert first["metadata"]["remainingItemCount"] == 22
    snapshot = first["metadata"]["resourceVersion"]
    # Writes after the first page are invisible to the rest of the list.
    kube.apply(svc("zzz-new"))
    changed = kube.get("Service", "default", "web")
    assert changed is not None
    changed["spec"]["clusterIP"] = "10.9.9.9"
    kube.apply(changed)
    kube.delete("Service", "linkerd-multicluster", "probe-west")

    items, token = list(first["items"]), first["metadata"]["continue"]
    while token:
        page = await get_json(http, SVC, limit=10, **{"continue": token})
        assert page["metadata"]["resourceVersion"] == snapshot
        items += page["items"]
        token = page["metadata"].get("continue")
    assert len(items) == 32
    assert names(items) == sorted(names(items))
    assert "default/zzz-new" not in names(items)
    assert "linkerd-multicluster/probe-west" in names(items)
    web = next(i for i in items if i["metadata"]["name"] == "web")
    assert web["spec"]["clusterIP"] != "10.9.9.9"


async def test_continue_after_compaction_is_410(
    fake_kube_demo: FakeKube, http: aiohttp.ClientSession
):
    first = await get_json(http, SVC, limit=5)
    fake_kube_demo.apply(svc("another"))
    fake_kube_demo.compact()
    async with http.get(SVC, params={"limit": "5", "continue": first["metadata"]["continue"]}) as r:
        assert r.status == 410
        status = await r.json()
    assert status["kind"] == "Status" and status["reason"] == "Expired" and status["code"] == 410


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", {"web", "web-west", "web-north", "web-south", "web-federated"}),
        ("app==web,mirror.linkerd.io/cluster-name=north", {"web-north"}),
        ("mirror.linkerd.io/headless-mirror-svc-name", None),  # checked below
        ("app=web,!mirror.linkerd.io/mirrored-service", {"web"}),
        ("app=web,mirror.linkerd.io/cluster-name!=west",
         {"web", "web-north", "web-south", "web-federated"}),
        ("app in (web, metrics),mirror.linkerd.io/cluster-name notin (west,north)",
         {"web", "web-south", "web-federated", "metrics"}),
    ],
)
async def test_label_selectors(
    fake_kube_demo: FakeKube, http: aiohttp.ClientSession, selector: str, expected: set[str] | None
):
    body = await get_json(http, SVC, labelSelector=selector)
    got = {i["metadata"]["name"] for i in body["items"]}
    if expected is None:
        assert len(got) == 12 and all(n.rsplit("-", 1)[1] in ("west", "north", "old")
                                      for n in got)
    else:
        assert got == expected
    assert "remainingItemCount" not in body["metadata"]


async def test_invalid_selector_is_400(fake_kube: FakeKube, http: aiohttp.ClientSession):
    async with http.get(SVC, params={"labelSelector": "a=b,,c"}) as resp:
        assert resp.status == 400
        assert (await resp.json())["reason"] == "BadRequest"


def test_selector_parser():
    sel = parse_selector("a=1, b!=2, c, !d, e in (x, y), f notin (z)")
    assert sel({"a": "1", "c": "", "e": "x"})
    assert sel({"a": "1", "b": "3", "c": "", "e": "y", "f": "w"})
    assert not sel({"a": "1", "b": "2", "c": "", "e": "x"})
    assert not sel({"a": "1", "c": "", "d": "", "e": "x"})
    assert not sel({"a": "1", "c": "", "e": "x", "f": "z"})
    assert not sel({"a": "1", "e": "x"})
    assert parse_selector("")({"anything": "at all"})


# --------------------------------------------------------------------------- watches


async def test_watch_resume_from_resource_version(
    fake_kube_demo: FakeKube, http: aiohttp.ClientSession
):
    kube = fake_kube_demo
    rv = (await get_json(http, SVC))["metadata"]["resourceVersion"]
    kube.apply(svc("a"))  # before the watch: delivered from history
    stream = await watch(http, SVC, resourceVersion=rv)
    ev = await stream.next()
    assert ev is not None and ev["type"] == "ADDED"
    assert ev["object"]["kind"] == "Service" and ev["object"]["metadata"]["name"] == "a"
    a = kube.get("Service", "default", "a")
    assert a is not None
    a["metadata"]["labels"] = {"x": "y"}
    kube.apply(a)
    kube.apply({**svc("s", ns="db")})
    kube.delete("Service", "default", "a")
    got = [await stream.next() for _ in range(3)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got if e] == [
        ("MODIFIED", "a"), ("ADDED", "s"), ("DELETED", "a")
    ]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in got if e]
    assert rvs == sorted(rvs) and rvs[-1] == kube.resource_version
    stream.resp.close()

    # Resuming from the middle replays exactly what came after it.
    again = await watch(http, SVC, resourceVersion=rvs[0])
    replay = [await again.next() for _ in range(2)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in replay if e] == [
        ("ADDED", "s"), ("DELETED", "a")
    ]
    again.resp.close()

    # Namespaced watch sees only its namespace; slices are a different resource.
    ns = await watch(http, "/api/v1/namespaces/db/services", resourceVersion=rv)
    ev = await ns.next()
    assert ev is not None and ev["object"]["metadata"]["name"] == "s"
    ns.resp.close()


async def test_watch_without_version_starts_with_current_state(
    fake_kube_demo: FakeKube, http: aiohttp.ClientSession
):
    stream = await watch(http, "/apis/discovery.k8s.io/v1/namespaces/db/endpointslices",
                         timeoutSeconds=1)
    events = await stream.rest()
    assert len(events) == 11 and {e["type"] for e in events} == {"ADDED"}


async def test_watch_selector_transitions(fake_kube: FakeKube, http: aiohttp.ClientSession):
    rv = fake_kube.resource_version
    stream = await watch(http, SVC, resourceVersion=rv, labelSelector="app=web")
    fake_kube.apply(svc("x", labels={"app": "other"}))  # never matches: not seen
    fake_kube.apply(svc("x", labels={"app": "web"}))  # enters → ADDED
    fake_kube.apply(svc("x", labels={"app": "web", "v": "2"}))  # stays → MODIFIED
    fake_kube.apply(svc("x", labels={"app": "gone"}))  # leaves → DELETED
    fake_kube.delete("Service", "default", "x")  # already out: not seen
    fake_kube.apply(svc("y", labels={"app": "web"}))
    got = [await stream.next() for _ in range(4)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got if e] == [
        ("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x"), ("ADDED", "y")
    ]
    stream.resp.close()


async def test_bookmarks(fake_kube: FakeKube, http: aiohttp.ClientSession):
    fake_kube.apply(svc("a"))
    rv = fake_kube.resource_version
    stream = await watch(http, SVC, resourceVersion=rv, allowWatchBookmarks="true")
    fake_kube.apply({**svc("s"), "kind": "EndpointSlice", "addressType": "IPv4"})  # other resource
    ev = await stream.until(lambda e: e["type"] == "BOOKMARK")
    assert ev["object"] == {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(fake_kube.resource_version)},
    }
    assert int(ev["object"]["metadata"]["resourceVersion"]) == rv + 1
    stream.resp.close()

    # Without allowWatchBookmarks there are none.
    quiet = await watch(http, SVC, resourceVersion=rv, timeoutSeconds=0.6)
    assert [e["type"] for e in await quiet.rest()] == []


async def test_watch_timeout_closes_cleanly(fake_kube: FakeKube, http: aiohttp.ClientSession):
    stream = await watch(http, SVC, resourceVersion=0, timeoutSeconds=0.3)
    assert await stream.rest() == []
    assert stream.resp.content.at_eof()
    await asyncio.wait_for(_until(lambda: fake_kube.open_streams == 0), 5)


async def test_watch_from_compacted_version_is_410(
    fake_kube: FakeKube, http: aiohttp.ClientSession
):
    fake_kube.apply(svc("a"))
    old = fake_kube.resource_version
    fake_kube.apply(svc("b"))
    fake_kube.compact()
    stream = await watch(http, SVC, resourceVersion=old)
    events = await stream.rest()
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"

    # The compaction point itself is still fine.
    ok = await watch(http, SVC, resourceVersion=fake_kube.resource_version)
    fake_kube.apply(svc("c"))
    ev = await ok.next()
    assert ev is not None and ev["type"] == "ADDED"
    ok.resp.close()


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.01)


# --------------------------------------------------------------------------- faults


async def test_fail_next(fake_kube: FakeKube, http: aiohttp.ClientSession):
    fake_kube.fail_next(2, status=503)
    for _ in range(2):
        async with http.get(SVC) as resp:
            assert resp.status == 503
            body = await resp.json()
            assert body["kind"] == "Status" and body["code"] == 503
    async with http.get(SVC) as resp:
        assert resp.status == 200
    fake_kube.fail_next(1, match=lambda r: "watch" in r.query)
    async with http.get(SVC) as resp:
        assert resp.status == 200
    async with http.get(SVC, params={"watch": "1", "timeoutSeconds": "0.1"}) as resp:
        assert resp.status == 500
    assert fake_kube.pending_failures == 0


async def test_drop_streams(fake_kube: FakeKube, http: aiohttp.ClientSession):
    streams = [await watch(http, p, resourceVersion=0) for p in (SVC, SLICES)]
    await asyncio.wait_for(_until(lambda: fake_kube.open_streams == 2), 5)
    assert fake_kube.drop_streams() == 2
    for s in streams:
        with pytest.raises(aiohttp.ClientError):
            await s.rest()
        s.resp.close()
    assert fake_kube.open_streams == 0
    async with http.get(SVC) as resp:  # the server itself is fine
        assert resp.status == 200


async def test_unreachable(fake_kube: FakeKube, http: aiohttp.ClientSession):
    await fake_kube.set_unreachable(True)
    with pytest.raises(aiohttp.ClientError):
        async with http.get(SVC) as resp:
            await resp.read()
    await fake_kube.set_unreachable(False)
    async with http.get(SVC) as resp:
        assert resp.status == 200


async def test_auth_verbs_and_counters(fake_kube: FakeKube, http: aiohttp.ClientSession):
    async with aiohttp.ClientSession(fake_kube.url) as anonymous, anonymous.get(SVC) as resp:
        assert resp.status == 401
    async with http.post(SVC, json={}) as resp:
        assert resp.status == 405
    async with http.get("/version") as resp:
        assert (await resp.json())["major"] == "1"
    async with http.get("/nope") as resp:
        assert resp.status == 404
    assert fake_kube.verbs() == {"GET", "POST"}
    assert fake_kube.count(SVC) == 1 and fake_kube.count(SVC, "POST") == 1


async def test_kubeconfig_and_load(fake_kube: FakeKube):
    text = Path(fake_kube.kubeconfig).read_text()
    assert fake_kube.url in text and "fake-token" in text
    stored = fake_kube.load(DEMO_EAST)
    assert len(stored) == 61
    assert [int(o["metadata"]["resourceVersion"]) for o in stored] == list(range(1, 62))
    assert len(fake_kube.objects("Service")) == 32
    assert len(fake_kube.objects("EndpointSlice")) == 26
    assert len(fake_kube.objects("Link")) == 3


def link(name: str, target: str | None = None, ns: str = "linkerd-multicluster") -> dict[str, Any]:
    return {
        "apiVersion": "multicluster.linkerd.io/v1alpha3",
        "kind": "Link",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetClusterName": target or name, "probeSpec": {"path": "/ready"}},
    }


async def test_links_at_every_served_version_and_discovery(
    fake_kube: FakeKube, http: aiohttp.ClientSession
):
    fake_kube.apply(link("west"))
    groups = await get_json(http, "/apis")
    group = next(g for g in groups["groups"] if g["name"] == "multicluster.linkerd.io")
    assert group["preferredVersion"]["version"] == "v1alpha3"
    assert [v["version"] for v in group["versions"]] == ["v1alpha3", "v1alpha2", "v1alpha1"]
    for version in ("v1alpha1", "v1alpha2", "v1alpha3"):
        body = await get_json(http, f"/apis/multicluster.linkerd.io/{version}/links")
        assert body["kind"] == "LinkList"
        assert body["apiVersion"] == f"multicluster.linkerd.io/{version}"
        assert [i["spec"]["targetClusterName"] for i in body["items"]] == ["west"]
    one = await get_json(
        http, "/apis/multicluster.linkerd.io/v1alpha1/namespaces/linkerd-multicluster/links/west")
    assert one["apiVersion"] == "multicluster.linkerd.io/v1alpha1"
    resources = await get_json(http, "/apis/multicluster.linkerd.io/v1alpha2")
    assert [r["name"] for r in resources["resources"]] == ["links"]


async def test_link_watch_and_crd_versions(fake_kube: FakeKube, http: aiohttp.ClientSession):
    fake_kube.set_link_crd(["v1alpha1"])
    async with http.get("/apis/multicluster.linkerd.io/v1alpha3/links") as resp:
        assert resp.status == 404
    path = "/apis/multicluster.linkerd.io/v1alpha1/links"
    listed = await get_json(http, path)
    async with http.get(path, params={"watch": "1",
                                      "resourceVersion": listed["metadata"]["resourceVersion"]}
                        ) as resp:
        stream = Stream(resp)
        fake_kube.apply(link("north"))
        ev = await stream.next()
        assert ev is not None and ev["type"] == "ADDED"
        assert ev["object"]["apiVersion"] == "multicluster.linkerd.io/v1alpha1"
        fake_kube.set_link_crd(None)  # uninstalled: the stream ends
        assert await stream.rest() == []
    groups = await get_json(http, "/apis")
    assert "multicluster.linkerd.io" not in {g["name"] for g in groups["groups"]}
    async with http.get("/apis/multicluster.linkerd.io") as resp:
        assert resp.status == 404
    async with http.get(path) as resp:
        assert resp.status == 404


async def test_forbid_per_resource_and_user(fake_kube: FakeKube, http: aiohttp.ClientSession):
    path = "/apis/multicluster.linkerd.io/v1alpha3/links"
    fake_kube.forbid("links", "system:serviceaccount:dnsside:dnsside")
    assert (await get_json(http, path))["items"] == []  # admin may
    headers = {"Impersonate-User": "system:serviceaccount:dnsside:dnsside"}
    async with http.get(path, headers=headers) as resp:
        assert resp.status == 403
        status = await resp.json()
        assert status["reason"] == "Forbidden"
        assert 'cannot list resource "links" in API group "multicluster.linkerd.io"' in (
            status["message"])
    fake_kube.forbid("services")
    async with http.get(SVC) as resp:
        assert resp.status == 403
    fake_kube.allow("services")
    assert (await get_json(http, SVC))["kind"] == "ServiceList"
