"""`dnsside check` against the fake API server: all ✓ on the demo cluster, and the right ×
with a hint for each way it can be broken.

The demo cluster is examples/demo-east.yaml without its deliberately orphaned
cluster `old` (the file shows what an unlink by Link deletion leaves; here the
cluster is clean), with dnsside's ConfigMap and a ready Deployment, as `dnsside
install` would leave them. The file's own orphan is checked on its own below.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dnsside.kubeapi.client import KubeApi
from dnsside.ops.check import CheckOptions, Result, passed, render_results, run_checks
from testkit import objects
from testkit.fakekube import (
    REMOTE_ACCESS_RULES,
    REMOTE_ACCESS_RULES_PRE_214,
    FakeKube,
    Rule,
    running_fake_kube,
)
from testkit.serve import DEMO as DEMO_EAST
from testkit.serve import ROOT, Dnsside
from testkit.threadedkube import ThreadedKube

SA = "system:serviceaccount:dnsside:dnsside"


def link(cluster: str) -> dict[str, Any]:
    return objects.link(cluster, f"gw.{cluster}.example",
                        probe={"path": "/ready", "port": "4191", "period": "3s"})


def config_map(cluster: str, namespace: str = "dnsside") -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": {"name": "dnsside", "namespace": namespace},
            "data": {"DNSSIDE_CLUSTER_NAME": cluster}}


def deployment(ready: int, replicas: int = 2) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "dnsside"}
    return {
        "kind": "Deployment", "metadata": {"name": "dnsside", "namespace": "dnsside"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "dnsside", "image": "x"}]}}},
        "status": {"replicas": replicas, "updatedReplicas": replicas, "readyReplicas": ready,
                   "availableReplicas": ready},
    }


def demo(kube: FakeKube, cluster: str = "east", orphans: bool = False) -> FakeKube:
    kube.load(DEMO_EAST)
    if not orphans:
        for name in ("nginx-svc-old", "nginx-set-0-old"):
            kube.delete("Service", "default", name)
    for cl in ("west", "north", "south"):
        kube.apply(link(cl))
    kube.apply(config_map(cluster))
    kube.apply(deployment(ready=2))
    return kube


def remove_links(kube: FakeKube, keep: tuple[str, ...] = ()) -> None:
    for obj in kube.objects("Link"):
        if obj["spec"].get("targetClusterName", obj["metadata"]["name"]) not in keep:
            kube.delete("Link", obj["metadata"]["namespace"], obj["metadata"]["name"])


async def check(kube: FakeKube, **kw: Any) -> list[Result]:
    results = await run_checks(CheckOptions(kubeconfig=kube.kubeconfig, **kw))
    print(render_results(results))  # shown by pytest on failure, and with -s
    return results


def failed(results: list[Result]) -> list[Result]:
    return [r for r in results if not r.ok]


def only_failure(results: list[Result], *words: str) -> Result:
    (bad,) = failed(results)
    for w in words:
        assert w in bad.text + bad.hint, (w, bad)
    assert bad.hint, "every × has a hint"
    return bad


def line(results: list[Result], text: str) -> Result:
    found = [r for r in results if text in r.text]
    assert found, f"no check says {text!r}"
    return found[0]


async def test_all_checks_pass_on_the_demo_cluster(fake_kube: FakeKube) -> None:
    results = await check(demo(fake_kube), as_user=SA)
    assert not failed(results)
    topics = [r.topic for r in results]
    assert topics[0] == "kubernetes-api"
    for topic in ("dnsside-install", "dnsside-rbac", "linkerd-multicluster", "dnsside-config",
                  "dnsside-workload"):
        assert topic in topics
    assert line(results, "Links are present").text.endswith("north, south, west")
    assert line(results, "link west: mirrors have EndpointSlices").ok
    assert line(results, "link north: mirrors have EndpointSlices").ok
    assert line(results, "no orphaned mirrors").ok
    assert line(results, f"{SA} can list links.multicluster.linkerd.io").ok
    assert line(results, "Deployment dnsside/dnsside is ready (2/2)").ok
    assert "standalone mode" in line(results, "dnsside is installed").text
    text = render_results(results)
    assert text.rstrip().endswith("Status check results are ✓")
    # The impersonated identity is what the RBAC lists were sent as.
    assert fake_kube.count("/api/v1/services") >= 2


async def test_the_demo_file_as_is_shows_its_orphaned_cluster(fake_kube: FakeKube) -> None:
    results = await check(demo(fake_kube, orphans=True), as_user=SA)
    bad = only_failure(results, "mirrors of cluster old match no Link", "unlink")
    assert "default/nginx-set-0-old" in bad.text


async def test_no_links(fake_kube: FakeKube) -> None:
    remove_links(demo(fake_kube))
    results = await check(fake_kube)
    bad = failed(results)
    present = line(results, "Links are present")
    assert not present.ok and "link-gen" in present.hint
    # With no Link at all, every mirror is an orphan: said per cluster.
    orphans = [r for r in bad if "match no Link" in r.text]
    assert {r.text.split(" of cluster ")[1].split()[0] for r in orphans} == {
        "north", "south", "west"}
    assert len(bad) == 4
    assert render_results(results).rstrip().endswith("(4 failed)")


async def test_an_orphaned_link(fake_kube: FakeKube) -> None:
    remove_links(demo(fake_kube), keep=("west", "south"))
    results = await check(fake_kube)
    bad = only_failure(results, "mirrors of cluster north match no Link",
                       "linkerd multicluster unlink --cluster-name north | kubectl delete -f -")
    assert bad.text.startswith("9 mirrors of cluster north") and "6 more" in bad.text
    assert line(results, "Links are present: south, west").ok


async def test_mirrors_without_slices(fake_kube: FakeKube) -> None:
    demo(fake_kube)
    for s in fake_kube.objects("EndpointSlice"):
        if s["metadata"]["labels"].get("kubernetes.io/service-name", "").endswith("-west") \
                and "-set-" in s["metadata"]["name"]:
            fake_kube.delete("EndpointSlice", s["metadata"]["namespace"], s["metadata"]["name"])
    results = await check(fake_kube)
    bad = only_failure(results, "link west:", "have no EndpointSlice",
                       "EndpointSliceMirroring")
    assert "3 mirrors" in bad.text  # nginx-set-0..2-west
    assert line(results, "link north: mirrors have EndpointSlices").ok


async def test_a_gateway_mirror_without_endpoints_is_not_a_failure(fake_kube: FakeKube) -> None:
    # A remote service with no ready endpoint: Kubernetes deletes its mirror's slices.
    demo(fake_kube)
    for s in fake_kube.objects("EndpointSlice"):
        if s["metadata"]["labels"].get("kubernetes.io/service-name") == "web-west":
            fake_kube.delete("EndpointSlice", s["metadata"]["namespace"], s["metadata"]["name"])
    results = await check(fake_kube)
    assert not failed(results)
    assert "1 gateway mirror without endpoints" in line(results, "link west:").text


async def test_missing_rbac_as_dnsside(fake_kube: FakeKube) -> None:
    demo(fake_kube).forbid("endpointslices", SA)
    fake_kube.forbid("links", SA)
    # As the kubeconfig's user everything is listable ...
    assert not failed(await check(fake_kube))
    # ... as dnsside's ServiceAccount two resources are not.
    results = await check(fake_kube, as_user=SA)
    bad = failed(results)
    assert [r.text for r in bad] == [
        f"{SA} can list endpointslices",
        f"{SA} can list links.multicluster.linkerd.io in linkerd-multicluster"]
    assert f"list links.multicluster.linkerd.io -n linkerd-multicluster --as {SA}" in bad[1].hint
    assert "get, list and watch on endpointslices" in bad[0].hint
    assert f"kubectl auth can-i list endpointslices --as {SA}" in bad[0].hint
    assert 'User "system:serviceaccount:dnsside:dnsside" cannot list' in bad[0].hint
    assert line(results, f"{SA} can list services").ok


async def test_cluster_name_local(fake_kube: FakeKube) -> None:
    results = await check(demo(fake_kube, cluster="local"))
    only_failure(results, 'cluster name is not "local"', "DNSSIDE_CLUSTER_NAME",
                 "linkerd multicluster link --cluster-name")


async def test_cluster_name_of_a_linked_cluster(fake_kube: FakeKube) -> None:
    results = await check(demo(fake_kube, cluster="west"))
    only_failure(results, "cluster name is not a linked cluster's name", "west is also")


async def test_notify_without_anybody_allowed_to_transfer(fake_kube: FakeKube) -> None:
    demo(fake_kube)
    data = {"DNSSIDE_CLUSTER_NAME": "east", "DNSSIDE_NOTIFY": "10.0.0.53:53,10.0.0.54:53"}
    fake_kube.apply({**config_map("east"), "data": data})
    results = await check(fake_kube)
    only_failure(results, "(10.0.0.53:53, 10.0.0.54:53) may transfer the zones",
                 "DNSSIDE_ALLOW_TRANSFER", "DNSSIDE_TSIG_KEY_FILE")
    for allowed in ({"DNSSIDE_ALLOW_TRANSFER": "10.0.0.0/24"},
                    {"DNSSIDE_TSIG_KEY_FILE": "/etc/dnsside/tsig/key"}):
        fake_kube.apply({**config_map("east"), "data": {**data, **allowed}})
        results = await check(fake_kube)
        assert not failed(results)
        assert line(results, "may transfer the zones").ok


async def test_cluster_name_from_the_flag_when_the_config_has_none(fake_kube: FakeKube) -> None:
    demo(fake_kube)
    fake_kube.apply({**config_map("east"), "data": {}})
    results = await check(fake_kube)
    only_failure(results, 'cluster name is not "local"', "from the default")
    assert not failed(await check(fake_kube, cluster_name="east"))


async def test_link_crd_not_installed(fake_kube: FakeKube) -> None:
    demo(fake_kube).set_link_crd(None)
    results = await check(fake_kube, as_user=SA)
    crd = line(results, "the Link CRD")
    assert not crd.ok and "linkerd multicluster install" in crd.hint
    assert len(failed(results)) == 1  # Links unreadable: no orphan verdict, no false ×


async def test_deployment_not_ready(fake_kube: FakeKube) -> None:
    demo(fake_kube).apply(deployment(ready=1))
    results = await check(fake_kube)
    only_failure(results, "Deployment dnsside/dnsside is ready (1/2)", "kubectl -n dnsside")


async def test_not_installed(fake_kube: FakeKube) -> None:
    demo(fake_kube).delete("Deployment", "dnsside", "dnsside")
    results = await check(fake_kube)
    bad = only_failure(results, "dnsside is installed", "dnsside install --cluster-name")
    assert "coredns" in bad.hint  # it looked for the sidecar too


async def test_sidecar_install(fake_kube: FakeKube) -> None:
    demo(fake_kube).delete("Deployment", "dnsside", "dnsside")
    fake_kube.apply(config_map("east", "kube-system"))
    labels = {"k8s-app": "kube-dns"}
    fake_kube.apply({
        "kind": "Deployment", "metadata": {"name": "coredns", "namespace": "kube-system"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "coredns"}, {"name": "dnsside"}]}}}})
    for i, ready in enumerate((True, True)):
        fake_kube.apply({
            "kind": "Pod", "metadata": {"name": f"coredns-{i}", "namespace": "kube-system",
                                        "labels": labels},
            "status": {"containerStatuses": [
                {"name": "coredns", "ready": True, "state": {"running": {}}},
                {"name": "dnsside", "ready": ready, "state": {"running": {}}}]}})
    fake_kube.apply({"kind": "Pod", "metadata": {"name": "other", "namespace": "kube-system",
                                                 "labels": {"app": "x"}}})
    results = await check(fake_kube, as_user="system:serviceaccount:kube-system:coredns")
    assert not failed(results)
    assert "sidecar mode, namespace kube-system" in line(results, "dnsside is installed").text
    assert line(results, "sidecar runs in the coredns pods (2/2)").ok
    fake_kube.apply({
        "kind": "Pod", "metadata": {"name": "coredns-1", "namespace": "kube-system",
                                    "labels": labels},
        "status": {"containerStatuses": [
            {"name": "dnsside", "ready": False, "state": {"waiting": {"reason": "CrashLoop"}}}]}})
    only_failure(await check(fake_kube), "(1/2)", "-c dnsside")


async def test_api_unreachable_and_no_kubeconfig(fake_kube: FakeKube, tmp_path: Path) -> None:
    await fake_kube.set_unreachable(True)
    results = await check(fake_kube)
    assert [r.ok for r in results] == [True, False]
    assert "kubeconfig" in results[1].hint
    await fake_kube.set_unreachable(False)
    missing = await run_checks(CheckOptions(kubeconfig=str(tmp_path / "nope")))
    (only,) = missing
    assert not only.ok and only.text == "can initialize the client" and only.hint


@pytest.mark.quick
async def test_without_any_kubeconfig_the_hint_says_each_way_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 37 item 8: the hint once repeated the error's own list ("...or run in a pod:
    # pass --kubeconfig, set $KUBECONFIG or create ~/.kube/config").
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (only,) = await run_checks(CheckOptions())
    assert not only.ok and only.text == "can initialize the client"
    assert only.hint.count("--kubeconfig") == 1 and only.hint.count("$KUBECONFIG") == 1, \
        only.hint


@pytest.fixture
def served_demo(tmp_path: Path) -> Any:
    kube = ThreadedKube(tmp_path)
    kube.call(demo, kube.kube)
    srv = Dnsside("--source", "kube", "--kubeconfig", kube.kubeconfig, "--cluster-name", "east")
    try:
        yield kube, srv
    finally:
        srv.__exit__(None)
        kube.close()


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dnsside", "check", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_cli_with_dns_through_a_real_dnsside(served_demo: Any) -> None:
    kube, srv = served_demo
    out = run_check("--kubeconfig", kube.kubeconfig, "--as", SA,
                    "--dns", f"127.0.0.1:{srv.port}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "dnsside-dns\n-----------\n" in out.stdout
    assert f"✓ SOA of svc-global. answers through 127.0.0.1:{srv.port} (NOERROR, serial" \
        in out.stdout
    # The global service with ready members in the most clusters: web (east, west,
    # federated); 4 addresses from the API objects, and dnsside answers with them.
    assert "✓ web.default.svc-global. A answers (NOERROR, 4 records; the API objects give 4)" \
        in out.stdout
    assert out.stdout.rstrip().endswith("Status check results are ✓")
    # Nothing answers there: × with the port-forward hint, exit status 1.
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    bad = run_check("--kubeconfig", kube.kubeconfig, "--dns", f"127.0.0.1:{closed}")
    assert bad.returncode == 1
    assert f"× SOA of svc-global. answers through 127.0.0.1:{closed}" in bad.stdout
    assert "port-forward svc/dnsside 5353:53" in bad.stdout


def test_cli_with_dns_asks_the_mcs_zone_too(tmp_path: Path) -> None:
    """With DNSSIDE_MCS_ZONE in the ConfigMap, `check --dns` asks that zone's SOA and a
    global service by its MCS name (`<svc>.<ns>.svc.M`, built by dnsside's own grammar),
    and expects what dnsside's own index answers there."""
    kube = ThreadedKube(tmp_path)
    kube.call(demo, kube.kube)
    cm = config_map("east")
    cm["data"]["DNSSIDE_MCS_ZONE"] = "clusterset.local."
    kube.call(kube.kube.apply, cm)
    srv = Dnsside("--source", "kube", "--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                  "--mcs-zone", "clusterset.local.")
    try:
        out = run_check("--kubeconfig", kube.kubeconfig, "--as", SA,
                        "--dns", f"127.0.0.1:{srv.port}")
    finally:
        srv.__exit__(None)
        kube.close()
    assert out.returncode == 0, out.stdout + out.stderr
    for zone in ("svc-global.", "clusterset.local."):
        assert f"✓ SOA of {zone} answers through 127.0.0.1:{srv.port} (NOERROR, serial" \
            in out.stdout
    assert "✓ web.default.svc-global. A answers (NOERROR, 4 records; the API objects give 4)" \
        in out.stdout
    # KEP-1645: the clusterset name of a ClusterIP service answers one address.
    assert ("✓ web.default.svc.clusterset.local. A answers (NOERROR, 1 records; the API "
            "objects give 1)") in out.stdout


async def test_links_forbidden_and_a_broken_link(fake_kube: FakeKube) -> None:
    demo(fake_kube).forbid("links")  # everyone, the kubeconfig's user included
    results = await check(fake_kube)
    assert [r.text for r in failed(results)] == [
        "the kubeconfig's user can list links.multicluster.linkerd.io in linkerd-multicluster",
        "Links are readable"]
    assert "403" in line(results, "Links are readable").hint
    fake_kube.allow("links")
    fake_kube.apply({**link("bad"), "spec": {"targetClusterName": "Not A Label!"}})
    results = await check(fake_kube)
    bad = only_failure(results, "every Link is readable (1 not)", "targetClusterName")
    assert "linkerd-multicluster/bad" in bad.hint


async def test_config_map_missing(fake_kube: FakeKube) -> None:
    demo(fake_kube).delete("ConfigMap", "dnsside", "dnsside")
    results = await check(fake_kube, cluster_name="east")
    only_failure(results, "ConfigMap dnsside/dnsside exists", "envFrom")


# --------------------------------------------------------------------------- --flat-network
#
# Two fake API servers: the local cluster (demo east) and one linked cluster answering for
# west, north and south, each Link with the Secret `linkerd multicluster link` writes. On
# the remote, the Secret's token is the remote-access service account, restricted to what
# Linkerd's ClusterRole grants it; locally, dnsside's ServiceAccount is restricted to what
# `dnsside install` grants, read from the install's own output.

REMOTE_USER = "system:serviceaccount:linkerd-multicluster:linkerd-service-mirror-remote-access"
REMOTE_TOKEN = "remote-access-token"
FLAT = "dnsside-flat-network"
LINKED = ("west", "north", "south")


def install_rules(*flags: str) -> list[Rule]:
    """The RBAC rules `dnsside install --cluster-name east FLAGS` grants dnsside."""
    from tests.ops.test_install import install

    rules = []
    for obj in install("--cluster-name", "east", *flags):
        if obj["kind"] in ("ClusterRole", "Role"):
            for rule in obj["rules"]:
                rules += [Rule(resource, group, frozenset(rule["verbs"]),
                               obj["metadata"].get("namespace"))
                          for group in rule["apiGroups"] for resource in rule["resources"]]
    return rules


def flat_link(cluster: str, secret: str | None = None) -> dict[str, Any]:
    obj = link(cluster)
    obj["spec"].update(
        clusterCredentialsSecret=f"cluster-credentials-{cluster}" if secret is None else secret,
        remoteDiscoverySelector={"matchLabels": {"mirror.linkerd.io/exported":
                                                 "remote-discovery"}})
    return obj


@pytest.fixture
async def remote_kube(tmp_path: Path) -> AsyncIterator[FakeKube]:
    (tmp_path / "remote").mkdir()
    async with running_fake_kube(tmp_path / "remote") as remote:
        remote.add_token(REMOTE_TOKEN, REMOTE_USER)
        remote.restrict(REMOTE_USER, REMOTE_ACCESS_RULES)
        remote.apply({"kind": "Service", "metadata": {"name": "db", "namespace": "default"},
                      "spec": {"clusterIP": "None", "ports": [{"port": 26257}]}})
        yield remote


def flat_demo(kube: FakeKube, remote: FakeKube, install_flags: tuple[str, ...] = (
        "--flat-network",)) -> FakeKube:
    demo(kube)
    kube.apply({**config_map("east"), "data": {"DNSSIDE_CLUSTER_NAME": "east",
                                               "DNSSIDE_FLAT_NETWORK": "true"}})
    for cluster in LINKED:
        kube.apply(flat_link(cluster))
        kube.apply(remote.link_credentials(cluster, token=REMOTE_TOKEN))
    kube.restrict(SA, install_rules(*install_flags))
    return kube


def flat_results(results: list[Result]) -> list[Result]:
    return [r for r in results if r.topic == FLAT]


async def test_flat_network_all_pass(fake_kube: FakeKube, remote_kube: FakeKube) -> None:
    results = await check(flat_demo(fake_kube, remote_kube), as_user=SA)
    assert not failed(results)
    ours = flat_results(results)
    assert ours[0].text == f"{SA} can get secrets in linkerd-multicluster"
    assert len(ours) == 1 + 3 * len(LINKED)  # the grant, then three lines per Link
    assert [r.text.split(":")[0] for r in ours[1:4]] == ["link north"] * 3  # sorted
    server = remote_kube.tls_url
    assert line(results, "link west: Secret linkerd-multicluster/cluster-credentials-west "
                "has a kubeconfig").ok
    assert line(results, f"link west: its kubeconfig loads (API server {server})").ok
    assert line(results, f"link west: the API at {server} lists services and endpointslices "
                "(remoteDiscoverySelector mirror.linkerd.io/exported=remote-discovery)").ok
    # The remote was read with the Secret's token, one page of each, per Link.
    assert remote_kube.count("/api/v1/services") == len(LINKED)
    assert remote_kube.count("/apis/discovery.k8s.io/v1/endpointslices") == len(LINKED)
    assert remote_kube.count("/api/v1/endpoints") == 0
    # Off in the ConfigMap and not asked for: no such category; asked for: there.
    fake_kube.apply(config_map("east"))
    assert not flat_results(await check(fake_kube, as_user=SA))
    assert flat_results(await check(fake_kube, as_user=SA, flat_network=True)) == ours


async def test_flat_network_without_the_secrets_role(fake_kube: FakeKube,
                                                     remote_kube: FakeKube) -> None:
    # Installed without --flat-network, then the flag turned on in the ConfigMap.
    flat_demo(fake_kube, remote_kube, install_flags=())
    results = await check(fake_kube, as_user=SA)
    bad = only_failure(results, f"{SA} can get secrets in linkerd-multicluster",
                       "dnsside install --flat-network",
                       f"kubectl auth can-i get secrets -n linkerd-multicluster --as {SA}")
    assert f'User "{SA}" cannot get resource "secrets"' in bad.hint
    # A Role that lists but may not get: the Secret's GET is what says so.
    fake_kube.restrict(SA, [*install_rules(), Rule("secrets", verbs=frozenset({"list"}),
                                                    namespace="linkerd-multicluster")])
    bad = only_failure(await check(fake_kube, as_user=SA), "can get secrets")
    assert 'cannot get resource "secrets"' in bad.hint
    # Only get, as install grants it, is enough: dnsside never lists the Secrets there.
    fake_kube.restrict(SA, [*install_rules(), Rule("secrets", verbs=frozenset({"get"}),
                                                    namespace="linkerd-multicluster")])
    assert not failed(await check(fake_kube, as_user=SA))


async def test_flat_network_secrets_missing_or_wrong(fake_kube: FakeKube,
                                                    remote_kube: FakeKube) -> None:
    flat_demo(fake_kube, remote_kube)
    fake_kube.delete("Secret", "linkerd-multicluster", "cluster-credentials-west")
    north = remote_kube.link_credentials("north", token=REMOTE_TOKEN)
    fake_kube.apply({**north, "data": {"config": north["data"]["kubeconfig"]}})
    fake_kube.apply(flat_link("south", secret=""))
    results = await check(fake_kube, as_user=SA)
    bad = {r.text: r for r in failed(results)}
    assert set(bad) == {
        "link north: Secret linkerd-multicluster/cluster-credentials-north has a kubeconfig",
        "link south: names no credentials Secret",
        "link west: Secret linkerd-multicluster/cluster-credentials-west exists"}
    for r in bad.values():
        assert r.topic == FLAT and "writes a fresh one" in r.hint
    north_hint = bad["link north: Secret linkerd-multicluster/cluster-credentials-north "
                     "has a kubeconfig"].hint
    assert "no data key kubeconfig (keys: config)" in north_hint
    assert "clusterCredentialsSecret is empty" in bad["link south: names no credentials "
                                                      "Secret"].hint
    west = bad["link west: Secret linkerd-multicluster/cluster-credentials-west exists"]
    assert "not found" in west.hint
    assert "linkerd multicluster link --cluster-name west" in west.hint
    assert remote_kube.count("/api/v1/services") == 0  # nothing to reach it with


async def test_flat_network_kubeconfig_does_not_load(fake_kube: FakeKube,
                                                     remote_kube: FakeKube) -> None:
    flat_demo(fake_kube, remote_kube)
    broken = remote_kube.link_credentials("west", token=REMOTE_TOKEN)
    serverless = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [],
                  "contexts": [], "current-context": ""}
    fake_kube.apply({**broken, "data": {"kubeconfig": base64.b64encode(
        json.dumps(serverless).encode()).decode()}})
    results = await check(fake_kube, as_user=SA)
    bad = only_failure(results, "link west: its kubeconfig loads",
                       "Secret linkerd-multicluster/cluster-credentials-west key kubeconfig",
                       "writes a fresh one")
    assert bad.topic == FLAT
    fake_kube.apply({**broken, "data": {"kubeconfig": "not base64!"}})
    only_failure(await check(fake_kube), "link west: Secret", "not base64")


async def test_flat_network_the_remote_says_no(fake_kube: FakeKube,
                                               remote_kube: FakeKube) -> None:
    flat_demo(fake_kube, remote_kube)
    server = remote_kube.tls_url
    # A revoked token: 401.
    fake_kube.apply(remote_kube.link_credentials("west", token="revoked"))
    bad = only_failure(await check(fake_kube), f"link west: the API at {server} lists services",
                       "rejects the token", "401", "linkerd multicluster link")
    assert bad.topic == FLAT
    fake_kube.apply(remote_kube.link_credentials("west", token=REMOTE_TOKEN))
    # A remote-access ClusterRole without services: 403 with the remote's message.
    remote_kube.restrict(REMOTE_USER, [r for r in REMOTE_ACCESS_RULES if r.plural != "services"])
    results = await check(fake_kube)
    assert len(failed(results)) == len(LINKED)
    bad = line(results, f"link west: the API at {server} lists services")
    assert not bad.ok and f'User "{REMOTE_USER}" cannot list resource "services"' in bad.hint
    assert "linkerd --context=west multicluster install" in bad.hint
    # Unreachable from here.
    remote_kube.restrict(REMOTE_USER, REMOTE_ACCESS_RULES)
    await remote_kube.set_unreachable(True)
    results = await check(fake_kube)
    bad = line(results, f"link west: the API at {server} lists services")
    assert not bad.ok and "route to" in bad.hint and "--api-server-address" in bad.hint
    await remote_kube.set_unreachable(False)
    # Its API server failing (etcd down): 500.
    remote_kube.failing_status = 500
    bad = line(await check(fake_kube), f"link west: the API at {server} lists services")
    assert not bad.ok and "HTTP 500" in bad.hint and "--context=west get --raw" in bad.hint
    remote_kube.failing_status = 0
    assert not failed(await check(fake_kube))


async def test_flat_network_a_malformed_selector(fake_kube: FakeKube,
                                                 remote_kube: FakeKube) -> None:
    flat_demo(fake_kube, remote_kube)
    broken = flat_link("west")
    broken["spec"]["remoteDiscoverySelector"] = {"matchExpressions": [
        {"key": "app", "operator": "Near"}]}
    fake_kube.apply(broken)
    results = await check(fake_kube)
    bad = only_failure(results, "link west: remoteDiscoverySelector is readable", "'Near'",
                       "serves none of west's pods directly",
                       "kubectl -n linkerd-multicluster edit links.multicluster.linkerd.io west")
    assert bad.topic == FLAT
    # The rest of the Link is read: its credentials are still checked, and work.
    assert line(results, "link west: the API at").ok
    assert "(empty: selects nothing)" in line(results, "link west: the API at").text


async def test_flat_network_a_remote_before_linkerd_2_14_is_a_warning(
        fake_kube: FakeKube, remote_kube: FakeKube) -> None:
    flat_demo(fake_kube, remote_kube)
    remote_kube.restrict(REMOTE_USER, REMOTE_ACCESS_RULES_PRE_214)
    results = await check(fake_kube, as_user=SA)
    server = remote_kube.tls_url
    warning = line(results, f"link west: the API at {server} lists endpointslices")
    assert not warning.ok and warning.warning
    assert "older than 2.14" in warning.hint and "v1 Endpoints instead" in warning.hint
    assert 'cannot list resource "endpointslices"' in warning.hint
    assert line(results, f"link west: the API at {server} lists services and v1 endpoints").ok
    assert not [r for r in results if not passed(r)]
    assert render_results(results).rstrip().endswith("Status check results are ✓")
    assert "‼ link west: the API at" in render_results(results)
    # Neither endpointslices nor endpoints: a failure.
    remote_kube.restrict(REMOTE_USER, [r for r in REMOTE_ACCESS_RULES_PRE_214
                                       if r.plural != "endpoints"])
    bad = line(await check(fake_kube), f"link west: the API at {server} lists endpointslices "
               "or endpoints")
    assert not bad.ok and not bad.warning and "multicluster install" in bad.hint


async def test_flat_network_closes_every_remote_client(
        fake_kube: FakeKube, remote_kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    flat_demo(fake_kube, remote_kube)
    remote_kube.restrict(REMOTE_USER, [r for r in REMOTE_ACCESS_RULES if r.plural != "services"])
    fake_kube.apply(remote_kube.link_credentials("north", token="revoked"))
    open_clients: set[int] = set()
    opened = 0
    load = KubeApi.from_kubeconfig_text.__func__  # type: ignore[attr-defined]
    close = KubeApi.close

    async def counting_load(cls: type[KubeApi], *args: Any, **kw: Any) -> KubeApi:
        nonlocal opened
        api: KubeApi = await load(cls, *args, **kw)
        opened += 1
        open_clients.add(id(api))
        return api

    async def counting_close(self: KubeApi) -> None:
        open_clients.discard(id(self))
        await close(self)

    monkeypatch.setattr(KubeApi, "from_kubeconfig_text", classmethod(counting_load))
    monkeypatch.setattr(KubeApi, "close", counting_close)
    results = await check(fake_kube)
    assert len(failed(results)) == len(LINKED)
    assert opened == len(LINKED) and not open_clients


@pytest.fixture
def served_pair(tmp_path: Path) -> Any:
    (tmp_path / "local").mkdir()
    (tmp_path / "remote").mkdir()
    local, remote = ThreadedKube(tmp_path / "local"), ThreadedKube(tmp_path / "remote")
    try:
        remote.call(remote.kube.add_token, REMOTE_TOKEN, REMOTE_USER)
        remote.call(remote.kube.restrict, REMOTE_USER, REMOTE_ACCESS_RULES)
        local.call(demo, local.kube)
        for cluster in LINKED:
            local.call(local.kube.apply, flat_link(cluster))
            local.call(local.kube.apply, remote.kube.link_credentials(cluster,
                                                                      token=REMOTE_TOKEN))
        yield local, remote
    finally:
        local.close()
        remote.close()


def test_cli_flat_network_flag(served_pair: Any) -> None:
    local, remote = served_pair
    plain = run_check("--kubeconfig", local.kubeconfig)
    assert plain.returncode == 0 and FLAT not in plain.stdout  # the ConfigMap leaves it off
    out = run_check("--kubeconfig", local.kubeconfig, "--flat-network")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{FLAT}\n{'-' * len(FLAT)}\n" in out.stdout
    assert (f"✓ link south: the API at {remote.kube.tls_url} lists services and endpointslices"
            in out.stdout)
    local.call(local.kube.delete, "Secret", "linkerd-multicluster", "cluster-credentials-west")
    bad = run_check("--kubeconfig", local.kubeconfig, "--flat-network")
    assert bad.returncode == 1
    assert "× link west: Secret linkerd-multicluster/cluster-credentials-west exists" \
        in bad.stdout


async def test_flat_network_check_reads_a_linked_cluster_within_a_cap(
        fake_kube: FakeKube, remote_kube: FakeKube) -> None:
    """check reads a linked cluster as serve does: a body without end fails that Link's
    check (its API is not trusted), it is never read whole."""
    from aiohttp import web

    sent = 0

    async def endless(request: web.Request) -> web.StreamResponse | None:
        nonlocal sent
        if not request.path.endswith("/services"):
            return None
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            await resp.write(b'{"kind":"ServiceList","items":[{"x":"')
            for _ in range(64 * 16):  # 64 MiB, if anybody read it all
                await asyncio.sleep(0)
                if request.transport is None or request.transport.is_closing():
                    break
                await resp.write(b"x" * 65536)
                sent += 65536
        except (ConnectionError, RuntimeError):
            pass
        return resp

    flat_demo(fake_kube, remote_kube)
    remote_kube.hostile = endless
    results = await check(fake_kube, as_user=SA)
    bad = [r for r in failed(results) if r.text.startswith("link west: the API at")]
    assert bad and "more than" in bad[0].hint, [r.text for r in failed(results)]
    assert sent < 32 * 1024 * 1024, sent


# --------------------------------------------------------------------------- the walk


async def test_the_walk_runs_entries_in_list_order_and_a_fatal_failure_ends_it() -> None:
    """Entries run in list order, a ForEach over each of its contexts; a fatal failure
    ends the walk there, and the context it stopped in is closed all the same."""
    from dnsside.ops.checker import Category, Finding, Findings, ForEach, Severity, check, walk

    opened: list[int] = []
    closed: list[int] = []

    async def numbers(_: None) -> AsyncGenerator[int, None]:
        for n in (1, 2, 3):
            opened.append(n)
            try:
                yield n
            finally:
                closed.append(n)

    @check("even", "{n} is even", "{n} is odd", Severity.WARNING)
    async def even(n: int) -> Findings:
        yield Finding(n % 2 == 0, n=n)

    @check("small", "{n} is small", "{n} is not", Severity.FATAL)
    async def small(n: int) -> Findings:
        yield Finding(n < 2, n=n)

    @check("after", "never", "never")
    async def after(_: None) -> Findings:
        yield Finding(True)

    results = await walk((Category("numbers", (ForEach(numbers, (even, small)),)),
                          Category("more", (after,))), None)
    assert [(r.text, r.ok, r.hint) for r in results] == [
        ("1 is even", False, "1 is odd"), ("1 is small", True, ""),
        ("2 is even", True, ""), ("2 is small", False, "2 is not")]
    assert [r.warning for r in results] == [True, False, True, False]
    assert opened == closed == [1, 2]


@pytest.mark.quick
async def test_no_kubeconfig_says_the_way_out_once(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint used to repeat it: "... or run in a pod: pass --kubeconfig, set ..."."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (nothing,) = await run_checks(CheckOptions())
    (missing,) = await run_checks(CheckOptions(kubeconfig=str(tmp_path / "nope")))
    for result in (nothing, missing):
        assert not result.ok
        assert result.hint.count("pass --kubeconfig") == 1, result.hint
        assert render_results([result]).count("pass --kubeconfig") == 1
    assert nothing.hint.startswith("no Kubernetes configuration")
    assert f"--kubeconfig names {tmp_path / 'nope'}" in missing.hint
