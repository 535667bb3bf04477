"""The fake API server's ConfigMaps, Pods and Deployments (what `dnsside check` reads):
same conventions as its Services and EndpointSlices, read-only over HTTP."""

from __future__ import annotations

from typing import Any

import aiohttp

from testkit.fakekube import FakeKube


async def get(kube: FakeKube, path: str, **headers: str) -> tuple[int, Any]:
    auth = {"Authorization": f"Bearer {kube.token}", **headers}
    async with aiohttp.ClientSession() as s, s.get(kube.url + path, headers=auth) as r:
        return r.status, await r.json()


def pod(name: str, app: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "kube-system",
                                        "labels": {"k8s-app": app}},
            "status": {"containerStatuses": [{"name": "c", "ready": True}]}}


async def test_configmaps_pods_and_deployments_are_listed_and_read(fake_kube: FakeKube) -> None:
    fake_kube.apply({"kind": "ConfigMap", "metadata": {"name": "dnsside", "namespace": "dnsside"},
                     "data": {"DNSSIDE_CLUSTER_NAME": "east"}})
    fake_kube.apply(pod("coredns-a", "kube-dns"))
    fake_kube.apply(pod("other", "x"))
    fake_kube.apply({"kind": "Deployment", "metadata": {"name": "dnsside", "namespace": "dnsside"},
                     "spec": {"replicas": 2}, "status": {"readyReplicas": 2}})
    status, cm = await get(fake_kube, "/api/v1/namespaces/dnsside/configmaps/dnsside")
    assert status == 200
    assert (cm["kind"], cm["apiVersion"], cm["data"]) == (
        "ConfigMap", "v1", {"DNSSIDE_CLUSTER_NAME": "east"})
    status, pods = await get(fake_kube, "/api/v1/namespaces/kube-system/pods"
                             "?labelSelector=k8s-app%3Dkube-dns")
    assert status == 200 and pods["kind"] == "PodList"
    assert [p["metadata"]["name"] for p in pods["items"]] == ["coredns-a"]
    assert "kind" not in pods["items"][0]  # list items carry no kind, like the real thing
    status, dep = await get(fake_kube, "/apis/apps/v1/namespaces/dnsside/deployments/dnsside")
    assert status == 200 and dep["apiVersion"] == "apps/v1"
    assert dep["status"] == {"readyReplicas": 2}
    status, deps = await get(fake_kube, "/apis/apps/v1/deployments?limit=1")
    assert status == 200 and deps["kind"] == "DeploymentList" and len(deps["items"]) == 1
    status, missing = await get(fake_kube, "/apis/apps/v1/namespaces/x/deployments/nope")
    assert status == 404 and missing["reason"] == "NotFound"


async def test_discovery_lists_every_resource_of_a_group_version(fake_kube: FakeKube) -> None:
    _, core = await get(fake_kube, "/api/v1")
    assert {r["name"] for r in core["resources"]} == {
        "services", "configmaps", "pods", "endpoints", "secrets"}
    assert {r["kind"] for r in core["resources"]} >= {"Endpoints", "Secret"}
    _, groups = await get(fake_kube, "/apis")
    assert {g["name"] for g in groups["groups"]} == {
        "discovery.k8s.io", "apps", "multicluster.linkerd.io"}
    _, apps = await get(fake_kube, "/apis/apps")
    assert apps["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    _, resources = await get(fake_kube, "/apis/apps/v1")
    assert [r["kind"] for r in resources["resources"]] == ["Deployment"]


async def test_a_denial_is_for_its_own_resource_only(fake_kube: FakeKube) -> None:
    fake_kube.forbid("services", "system:serviceaccount:dnsside:dnsside")
    who = {"Impersonate-User": "system:serviceaccount:dnsside:dnsside"}
    status, body = await get(fake_kube, "/api/v1/services?limit=1", **who)
    assert status == 403 and 'cannot list resource "services"' in body["message"]
    # Same group version, another resource: not denied.
    assert (await get(fake_kube, "/api/v1/configmaps?limit=1", **who))[0] == 200
    assert (await get(fake_kube, "/api/v1/services?limit=1"))[0] == 200  # admin


async def test_deployments_are_watched_like_the_rest(fake_kube: FakeKube) -> None:
    dep = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}, "spec": {}}
    fake_kube.apply(dep)
    rv = fake_kube.resource_version
    auth = {"Authorization": f"Bearer {fake_kube.token}"}
    async with aiohttp.ClientSession() as s, s.get(
            fake_kube.url + f"/apis/apps/v1/deployments?watch=1&resourceVersion={rv}"
            "&timeoutSeconds=5", headers=auth) as r:
        fake_kube.apply({**dep, "status": {"readyReplicas": 1}})
        line = await r.content.readline()
    import json

    event = json.loads(line)
    assert event["type"] == "MODIFIED"
    assert event["object"]["kind"] == "Deployment"
    assert event["object"]["status"] == {"readyReplicas": 1}
