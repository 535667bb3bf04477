"""`dnsside check` against the fake API server: all ✓ on the demo cluster, and the right ×
with a hint for each way it can be broken.

The demo cluster is examples/demo-east.yaml without its deliberately orphaned
cluster `old` (the file shows what an unlink by Link deletion leaves; here the
cluster is clean), with dnsside's ConfigMap and a ready Deployment, as `dnsside
install` would leave them. The file's own orphan is checked on its own below.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_EAST
from fakekube import FakeKube
from support import ROOT, Dnsside, ThreadedKube

from dnsside.ops.check import CheckOptions, Result, render, run_checks

SA = "system:serviceaccount:dnsside:dnsside"


def link(cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
        "metadata": {"name": cluster, "namespace": "linkerd-multicluster"},
        "spec": {"targetClusterName": cluster, "gatewayAddress": f"gw.{cluster}.example",
                 "probeSpec": {"path": "/ready", "port": "4191", "period": "3s"}},
    }


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
    print(render(results))  # shown by pytest on failure, and with -s
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
    text = render(results)
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
    assert render(results).rstrip().endswith("(4 failed)")


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
    assert "1 gateway mirrors without endpoints" in line(results, "link west:").text


async def test_missing_rbac_as_dnsside(fake_kube: FakeKube) -> None:
    demo(fake_kube).forbid("endpointslices", SA)
    fake_kube.forbid("links", SA)
    # As the kubeconfig's user everything is listable ...
    assert not failed(await check(fake_kube))
    # ... as dnsside's ServiceAccount two resources are not.
    results = await check(fake_kube, as_user=SA)
    bad = failed(results)
    assert [r.text for r in bad] == [f"{SA} can list endpointslices",
                                     f"{SA} can list links.multicluster.linkerd.io"]
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


async def test_links_forbidden_and_a_broken_link(fake_kube: FakeKube) -> None:
    demo(fake_kube).forbid("links")  # everyone, the kubeconfig's user included
    results = await check(fake_kube)
    assert [r.text for r in failed(results)] == [
        "the kubeconfig's user can list links.multicluster.linkerd.io", "Links are readable"]
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
