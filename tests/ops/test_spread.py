"""The cluster DNS keeps dnsside's spread: `loadbalance` in every block `install coredns`
prints, a plain reason where a flavour cannot have one, and `dnsside check` flagging a
live block without it (and unknown dnsside.io/locality values)."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest
import yaml

from dnsside.ops.check import CheckOptions, Result, render_results, run_checks
from dnsside.ops.coredns import FLAVORS, NEEDS_FROM, NO_LOADBALANCE
from dnsside.ops.corefile import upstream
from testkit.corefile import ServerBlock, block_for, parse
from testkit.fakekube import FakeKube
from tests.ops.test_check import demo
from tests.ops.test_install import cli, docs, live_nodelocaldns
from tests.ops.test_install_flavours import OPENSHIFT_LIVE, render_chart_servers

pytestmark = pytest.mark.quick

ADDRESS = "10.96.0.53:53"
LIVE = {"nodelocaldns": live_nodelocaldns(), "openshift": yaml.safe_dump(OPENSHIFT_LIVE)}


def install(flavor: str, *extra: str) -> tuple[str, str]:
    args = ["install", "coredns", "--flavor", flavor, "--address", ADDRESS, "--mcs-zone",
            "clusterset.local", *extra]
    stdin = LIVE.get(flavor) if flavor in NEEDS_FROM and "--block-only" not in extra else None
    if stdin is not None:
        args += ["--from", "-"]
    real = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        code, out, err = cli(*args)
    finally:
        sys.stdin = real
    assert code == 0, err
    return out, err


def dnsside_block(flavor: str, out: str) -> ServerBlock | None:
    """dnsside's server block as the platform will read it; None for the flavours whose
    block dnsside does not write."""
    if flavor in NO_LOADBALANCE:
        return None
    if flavor == "eks":
        text = json.loads(out)["corefile"]
    elif flavor == "rke2":
        (hcc,) = docs(out)
        text = render_chart_servers(yaml.safe_load(hcc["spec"]["valuesContent"])["servers"])
    else:
        (cm,) = docs(out)
        text = cm["data"].get("dnsside.server") or cm["data"]["Corefile"]
    blocks = parse(text)
    block = block_for(blocks, "svc-global.")
    assert block_for(blocks, "clusterset.local.") is block
    return block


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_every_flavour_block_has_loadbalance_or_says_why_not(flavor: str) -> None:
    out, _ = install(flavor)
    block = dnsside_block(flavor, out)
    if block is None:
        # No block of ours: the output says plainly why there is no loadbalance.
        assert NO_LOADBALANCE[flavor] in " ".join(
            line.lstrip("# ") for line in out.splitlines() if line.startswith("#"))
        return
    (balance,) = block.directive("loadbalance")
    assert balance.args == ["round_robin"]


@pytest.mark.parametrize("flavor", ["kubeadm", "k3s", "aks", "eks", "gardener",
                                    "nodelocaldns"])
def test_block_only_has_loadbalance(flavor: str) -> None:
    out, _ = install(flavor, "--block-only")
    (block,) = parse(out)
    assert block.directive("loadbalance")[0].args == ["round_robin"]


def test_the_flavours_without_a_block_are_exactly_those_that_say_why() -> None:
    assert set(NO_LOADBALANCE) <= set(FLAVORS)
    for flavor in set(FLAVORS) - set(NO_LOADBALANCE):
        assert dnsside_block(flavor, install(flavor)[0]) is not None


# --------------------------------------------------------------------------- dnsside check


def coredns_configmap(name: str, key: str, text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "kube-system"}, "data": {key: text}}


async def spread_results(kube: FakeKube) -> list[Result]:
    results = await run_checks(CheckOptions(kubeconfig=kube.kubeconfig))
    print(render_results(results))
    return [r for r in results if r.topic == "dnsside-spread"]


async def test_check_flags_a_live_block_without_loadbalance(fake_kube: FakeKube) -> None:
    kube = demo(fake_kube)
    without = (upstream("kubeadm", "cluster.local")
               + "svc-global:53 {\n    errors\n    cache 5\n    forward . 10.96.0.53\n}\n")
    kube.apply(coredns_configmap("coredns", "Corefile", without))
    kube.apply(coredns_configmap("coredns-custom", "other.server",
                                 "corp.example:53 {\n    forward . 10.0.0.1\n}\n"))
    results = await spread_results(kube)
    (bad,) = [r for r in results if not r.ok]
    assert bad.warning
    assert "ConfigMap kube-system/coredns key Corefile" in bad.text
    assert "svc-global." in bad.text
    assert "loadbalance round_robin" in bad.hint

    # What `install coredns --from -` prints from it passes.
    real = sys.stdin
    sys.stdin = io.StringIO(yaml.safe_dump(coredns_configmap("coredns", "Corefile", without)))
    try:
        code, out, err = cli("install", "coredns", "--flavor", "kubeadm", "--address",
                             ADDRESS, "--from", "-")
    finally:
        sys.stdin = real
    assert code == 0, err
    (cm,) = docs(out)
    kube.apply(cm)
    results = await spread_results(kube)
    assert all(r.ok for r in results), results
    assert any("shuffles answers" in r.text for r in results)


async def test_check_reads_imported_server_keys_and_nodelocaldns(fake_kube: FakeKube) -> None:
    kube = demo(fake_kube)
    kube.apply(coredns_configmap("coredns-custom", "dnsside.server",
                                 "svc-global:53 {\n    forward . 10.96.0.53\n}\n"))
    kube.apply(coredns_configmap(
        "node-local-dns", "Corefile",
        "svc-global:53 {\n    bind 169.254.20.10\n    loadbalance\n    forward . 10.0.0.10 {\n"
        "        force_tcp\n    }\n}\n"))
    results = await spread_results(kube)
    bad = [r for r in results if not r.ok]
    assert [r.text.split(":")[0] for r in bad] == [
        "ConfigMap kube-system/coredns-custom key dnsside.server"]
    assert any(r.ok and "node-local-dns" in r.text for r in results)


async def test_check_without_any_cluster_dns_configmap_says_nothing(fake_kube: FakeKube
                                                                    ) -> None:
    results = await spread_results(demo(fake_kube))
    assert [r.text for r in results] == [
        "every dnsside.io/locality annotation is all or local-first"]


async def test_check_flags_an_unknown_locality_value(fake_kube: FakeKube) -> None:
    kube = demo(fake_kube)
    svc = next(o for o in kube.objects("Service") if o["metadata"]["name"] == "nginx-svc")
    svc["metadata"].setdefault("annotations", {})["dnsside.io/locality"] = "nearby"
    kube.apply(svc)
    (bad,) = [r for r in await spread_results(kube) if not r.ok]
    assert bad.warning
    assert "Service default/nginx-svc ('nearby')" in bad.hint


@pytest.mark.parametrize("locality", ["all", "local-first"])
def test_check_dns_expects_what_the_locality_answers(locality: str) -> None:
    """`check --dns` counts the addresses the name answers under the ConfigMap's
    DNSSIDE_LOCALITY, as the server it asks does."""
    from dnsside.model.linkerd import LinkRecord, ServiceRecord, SliceRecord, parse_object
    from dnsside.model.locality import Locality
    from dnsside.ops.dnscheck import DnsServer
    from tests.core.test_locality import ITEMS, addrs, demo_index

    records = [r for o in ITEMS if (r := parse_object(o)) is not None]
    server = DnsServer("127.0.0.1:53", "dnsside", "svc-global.", "east",
                       [r for r in records if isinstance(r, ServiceRecord)],
                       [r for r in records if isinstance(r, SliceRecord)],
                       [r for r in records if isinstance(r, LinkRecord)], 1.0, locality)
    assert server.pick is not None
    name, qtype, expected = server.pick
    assert qtype == "A"
    assert expected == len(addrs(demo_index(Locality(locality)), name))
