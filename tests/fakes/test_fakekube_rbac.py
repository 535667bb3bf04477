"""The fake API server as a local and a remote (linked) cluster for --flat-network: Secrets
and v1 Endpoints served like the rest, several users by bearer token, RBAC allow-lists
with the real 403 messages, and the credentials Secret `linkerd multicluster link` writes.

If these drift from the real API server, --flat-network's tests would pass against a
cluster that does not exist, so each check below is made over HTTP, as a client sees it.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from dnsside.kubeapi.client import (
    Forbidden,
    KubeApi,
    NotFound,
    Unauthorized,
)
from testkit.fakekube import (
    REMOTE_ACCESS_RULES,
    REMOTE_ACCESS_RULES_PRE_214,
    FakeKube,
    Rule,
    running_fake_kube,
)

pytestmark = pytest.mark.quick

# The service account `linkerd multicluster link` uses on the remote cluster.
MIRROR = "system:serviceaccount:linkerd-multicluster:linkerd-service-mirror-remote-access-default"
MIRROR_TOKEN = "mirror-token"
MC = "linkerd-multicluster"


async def get(kube: FakeKube, path: str, token: str | None = None,
              **headers: str) -> tuple[int, Any]:
    auth = {"Authorization": f"Bearer {token or kube.token}", **headers}
    async with aiohttp.ClientSession() as s, s.get(kube.url + path, headers=auth) as r:
        return r.status, await r.json()


async def wait_until(predicate: Any, what: str, timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true or fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[FakeKube]:
    """A remote cluster whose mirror service account has Linkerd's remote-access role."""
    (tmp_path / "remote").mkdir()
    async with running_fake_kube(tmp_path / "remote", bookmark_interval=0.2) as kube:
        kube.add_token(MIRROR_TOKEN, MIRROR)
        kube.restrict(MIRROR, REMOTE_ACCESS_RULES)
        yield kube


def secret(name: str, namespace: str = MC, **labels: str) -> dict[str, Any]:
    return {"kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"k": base64.b64encode(b"v").decode()}}


def endpoints(name: str, ip: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {"kind": "Endpoints",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "subsets": [{"addresses": [{"ip": ip}], "ports": [{"port": 80}]}]}


async def test_remote_access_rules_allow_what_linkerd_grants_and_deny_the_rest(
        remote: FakeKube) -> None:
    remote.apply(secret("s"))
    remote.apply({"kind": "ConfigMap", "metadata": {"name": "linkerd-config",
                                                    "namespace": "linkerd"}, "data": {}})
    for path in ("/api/v1/services", "/api/v1/endpoints", "/api/v1/pods",
                 "/apis/discovery.k8s.io/v1/endpointslices",
                 "/api/v1/namespaces/default/services?watch=1&timeoutSeconds=0.1"):
        status, _ = await get(remote, path, MIRROR_TOKEN)
        assert status == 200, path
    status, cm = await get(remote, "/api/v1/namespaces/linkerd/configmaps/linkerd-config",
                           MIRROR_TOKEN)
    assert status == 200 and cm["metadata"]["name"] == "linkerd-config"

    status, body = await get(remote, f"/api/v1/namespaces/{MC}/secrets", MIRROR_TOKEN)
    assert status == 403 and body["reason"] == "Forbidden" and body["code"] == 403
    assert body["message"] == (
        f'secrets is forbidden: User "{MIRROR}" cannot list resource "secrets" in API group "" '
        f'in the namespace "{MC}"')
    status, body = await get(remote, f"/api/v1/namespaces/{MC}/secrets/s", MIRROR_TOKEN)
    assert status == 403 and body["message"] == (
        f'secrets "s" is forbidden: User "{MIRROR}" cannot get resource "secrets" in API group '
        f'"" in the namespace "{MC}"')
    status, body = await get(remote, "/apis/multicluster.linkerd.io/v1alpha3/links?watch=1",
                             MIRROR_TOKEN)
    assert status == 403 and body["message"] == (
        f'links.multicluster.linkerd.io is forbidden: User "{MIRROR}" cannot watch resource '
        f'"links" in API group "multicluster.linkerd.io" at the cluster scope')
    # configmaps: get of linkerd-config only; a list has no name, so resourceNames never grant it.
    status, body = await get(remote, "/api/v1/namespaces/linkerd/configmaps", MIRROR_TOKEN)
    assert status == 403 and 'cannot list resource "configmaps"' in body["message"]
    status, body = await get(remote, "/api/v1/namespaces/linkerd/configmaps/other",
                             MIRROR_TOKEN)
    assert status == 403 and body["message"].startswith('configmaps "other" is forbidden')
    # Nor may a restricted user become someone else.
    status, body = await get(remote, "/api/v1/secrets", MIRROR_TOKEN, **{"Impersonate-User": "a"})
    assert status == 403 and body["message"] == (
        f'users "a" is forbidden: User "{MIRROR}" cannot impersonate resource "users" in API '
        'group "" at the cluster scope')
    # Discovery stays open; the default token is still an unrestricted admin.
    for path in ("/api", "/apis", "/version", "/api/v1", "/apis/discovery.k8s.io/v1"):
        assert (await get(remote, path, MIRROR_TOKEN))[0] == 200, path
    assert (await get(remote, f"/api/v1/namespaces/{MC}/secrets"))[0] == 200


async def test_pre_214_remote_access_has_no_endpointslices(remote: FakeKube) -> None:
    remote.restrict(MIRROR, REMOTE_ACCESS_RULES_PRE_214)
    assert (await get(remote, "/api/v1/endpoints", MIRROR_TOKEN))[0] == 200
    assert (await get(remote, "/api/v1/services", MIRROR_TOKEN))[0] == 200
    status, body = await get(remote, "/apis/discovery.k8s.io/v1/endpointslices", MIRROR_TOKEN)
    assert status == 403 and body["message"] == (
        f'endpointslices.discovery.k8s.io is forbidden: User "{MIRROR}" cannot list resource '
        '"endpointslices" in API group "discovery.k8s.io" at the cluster scope')
    remote.unrestrict(MIRROR)
    assert (await get(remote, "/apis/discovery.k8s.io/v1/endpointslices", MIRROR_TOKEN))[0] == 200


async def test_a_role_grants_secrets_in_its_namespace_only(fake_kube: FakeKube) -> None:
    dnsside = "system:serviceaccount:dnsside:dnsside"
    fake_kube.add_token("dnsside-token", dnsside)
    fake_kube.restrict(dnsside, [Rule("services"), Rule("secrets", namespace=MC)])
    fake_kube.apply(secret("cluster-credentials-east"))
    fake_kube.apply(secret("elsewhere", namespace="default"))
    status, body = await get(fake_kube, f"/api/v1/namespaces/{MC}/secrets", "dnsside-token")
    assert status == 200 and body["kind"] == "SecretList"
    assert [s["metadata"]["name"] for s in body["items"]] == ["cluster-credentials-east"]
    status, one = await get(fake_kube, f"/api/v1/namespaces/{MC}/secrets/cluster-credentials-east",
                            "dnsside-token")
    assert status == 200 and (one["kind"], one["type"]) == ("Secret", "Opaque")
    status, body = await get(fake_kube, "/api/v1/secrets", "dnsside-token")
    assert status == 403 and body["message"].endswith(
        'cannot list resource "secrets" in API group "" at the cluster scope')
    status, body = await get(fake_kube, "/api/v1/namespaces/default/secrets", "dnsside-token")
    assert status == 403 and body["message"].endswith('in the namespace "default"')
    status, body = await get(fake_kube, f"/api/v1/namespaces/{MC}/secrets/nope", "dnsside-token")
    assert status == 404 and body["message"] == 'secrets "nope" not found'


async def test_resource_names_grant_a_get_of_those_objects_only(fake_kube: FakeKube) -> None:
    fake_kube.add_token("t", "u")
    fake_kube.restrict("u", [Rule("secrets", verbs=frozenset({"get"}), namespace=MC,
                                  resource_names=frozenset({"cluster-credentials-east"}))])
    fake_kube.apply(secret("cluster-credentials-east"))
    fake_kube.apply(secret("cluster-credentials-west"))
    base = f"/api/v1/namespaces/{MC}/secrets"
    assert (await get(fake_kube, base + "/cluster-credentials-east", "t"))[0] == 200
    assert (await get(fake_kube, base + "/cluster-credentials-west", "t"))[0] == 403
    assert (await get(fake_kube, base, "t"))[0] == 403
    assert (await get(fake_kube, base + "?watch=1", "t"))[0] == 403


async def test_tokens_authenticate_as_their_users(fake_kube: FakeKube) -> None:
    fake_kube.add_token("alice-token", "alice")
    fake_kube.add_token("bob-token", "bob")
    fake_kube.restrict("bob", [Rule("pods")])
    assert (await get(fake_kube, "/api/v1/services", "alice-token"))[0] == 200
    status, body = await get(fake_kube, "/api/v1/services", "bob-token")
    assert status == 403 and 'User "bob" cannot list' in body["message"]
    fake_kube.forbid("services", "alice")  # forbid() composes with the new users
    status, body = await get(fake_kube, "/api/v1/services", "alice-token")
    assert status == 403 and 'User "alice" cannot list' in body["message"]
    status, body = await get(fake_kube, "/api/v1/services", "stolen-token")
    assert status == 401 and body["reason"] == "Unauthorized"
    status, body = await get(fake_kube, "/version", "stolen-token")
    assert status == 401
    assert (await get(fake_kube, "/api/v1/services"))[0] == 200  # the default token: admin


async def test_endpoints_are_listed_paged_and_watched(fake_kube: FakeKube) -> None:
    for i in range(3):
        fake_kube.apply(endpoints(f"e{i}", f"10.0.0.{i}", app="web" if i else "db"))
    status, page = await get(fake_kube, "/api/v1/endpoints?limit=2")
    assert status == 200 and page["kind"] == "EndpointsList"
    assert [e["metadata"]["name"] for e in page["items"]] == ["e0", "e1"]
    assert page["metadata"]["remainingItemCount"] == 1
    status, rest = await get(fake_kube, "/api/v1/endpoints?limit=2&continue="
                             + page["metadata"]["continue"])
    assert status == 200 and [e["metadata"]["name"] for e in rest["items"]] == ["e2"]
    status, web = await get(fake_kube,
                            "/api/v1/namespaces/default/endpoints?labelSelector=app%3Dweb")
    assert status == 200
    assert [e["metadata"]["name"] for e in web["items"]] == ["e1", "e2"]
    status, missing = await get(fake_kube, "/api/v1/namespaces/default/endpoints/nope")
    assert status == 404 and missing["message"] == 'endpoints "nope" not found'

    rv = page["metadata"]["resourceVersion"]
    auth = {"Authorization": f"Bearer {fake_kube.token}"}
    async with aiohttp.ClientSession() as s, s.get(
            fake_kube.url + f"/api/v1/namespaces/default/endpoints?watch=1&resourceVersion={rv}"
            "&timeoutSeconds=5", headers=auth) as r:
        assert r.status == 200
        fake_kube.apply(endpoints("e3", "10.0.0.3"))
        fake_kube.apply(endpoints("e3", "10.0.0.4"))
        fake_kube.delete("Endpoints", "default", "e3")
        events = [json.loads(await r.content.readline()) for _ in range(3)]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert {(e["object"]["kind"], e["object"]["apiVersion"]) for e in events} == {
        ("Endpoints", "v1")}
    assert events[1]["object"]["subsets"][0]["addresses"] == [{"ip": "10.0.0.4"}]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[-1] == fake_kube.resource_version


async def test_secret_string_data_is_stored_as_data(fake_kube: FakeKube) -> None:
    stored = fake_kube.apply({"kind": "Secret", "metadata": {"name": "s", "namespace": MC},
                              "stringData": {"kubeconfig": "x: 1"}})
    assert "stringData" not in stored
    assert base64.b64decode(stored["data"]["kubeconfig"]) == b"x: 1"


async def test_restrict_ends_the_watches_the_rules_no_longer_allow(remote: FakeKube) -> None:
    auth = {"Authorization": f"Bearer {MIRROR_TOKEN}"}
    remote.unrestrict(MIRROR)
    async with aiohttp.ClientSession() as s:
        svc = await s.get(remote.url + "/api/v1/services?watch=1", headers=auth)
        sec = await s.get(remote.url + "/api/v1/secrets?watch=1", headers=auth)
        assert (svc.status, sec.status) == (200, 200)
        await wait_until(lambda: remote.open_streams == 2, "both watches open")
        remote.restrict(MIRROR, REMOTE_ACCESS_RULES)
        await wait_until(lambda: remote.open_streams == 1, "the secrets watch to end")
        remote.apply({"kind": "Service", "metadata": {"name": "a", "namespace": "default"}})
        event = json.loads(await asyncio.wait_for(svc.content.readline(), 5))
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "a")
        svc.close()
        sec.close()


async def test_link_credentials_authenticate_as_their_user(tmp_path: Path,
                                                           remote: FakeKube) -> None:
    (tmp_path / "local").mkdir()
    async with running_fake_kube(tmp_path / "local") as local:
        remote.apply({"kind": "Service", "metadata": {"name": "web", "namespace": "default"}})
        creds = remote.link_credentials("east", token=MIRROR_TOKEN)
        assert (creds["kind"], creds["type"]) == ("Secret", "mirror.linkerd.io/remote-kubeconfig")
        assert creds["metadata"] == {"name": "cluster-credentials-east", "namespace": MC}
        local.apply(creds)

        admin = await KubeApi.connect(local.kubeconfig)
        try:
            stored = await admin.get_json(f"/api/v1/namespaces/{MC}/secrets/"
                                          "cluster-credentials-east")
        finally:
            await admin.close()
        text = base64.b64decode(stored["data"]["kubeconfig"])
        config = yaml.safe_load(text)
        assert config["current-context"] == "east"
        assert [c["cluster"]["server"] for c in config["clusters"]] == [remote.tls_url]
        assert config["users"][0]["user"] == {"token": MIRROR_TOKEN}

        api = await KubeApi.from_kubeconfig_text(text, "secret cluster-credentials-east")
        try:
            services = await api.list_all("/api/v1/services")
            assert [s["metadata"]["name"] for s in services] == ["web"]
            with pytest.raises(Forbidden) as denied:
                await api.get_json(f"/api/v1/namespaces/{MC}/secrets")
            assert f'User "{MIRROR}" cannot list resource "secrets"' in denied.value.message
            with pytest.raises(NotFound):  # authorized (linkerd-config), just absent
                await api.get_json("/api/v1/namespaces/linkerd/configmaps/linkerd-config")
        finally:
            await api.close()

        # The same kubeconfig against the local cluster, which does not know the token.
        wrong = text.decode().replace(remote.tls_url, local.tls_url)
        api = await KubeApi.from_kubeconfig_text(wrong, "rewritten")
        try:
            with pytest.raises(Unauthorized):
                await api.get_json("/api/v1/services")
        finally:
            await api.close()
