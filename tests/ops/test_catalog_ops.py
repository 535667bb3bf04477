"""`--catalog-zone` in `dnsside install` and `dnsside check`: install bakes it into the
ConfigMap and refuses one serve would refuse (a catalog inside a zone); check names a
catalog nobody may transfer, with the fix."""

from __future__ import annotations

import pytest

from testkit.fakekube import FakeKube
from tests.ops.test_check import check, config_map, demo, failed, line, only_failure
from tests.ops.test_install_refuses import run


@pytest.mark.quick
def test_install_bakes_the_catalog_and_refuses_one_inside_a_zone() -> None:
    code, out, err = run("install", "--cluster-name", "east", "--allow-transfer",
                         "10.0.0.0/8", "--catalog-zone", "catalog.invalid")
    assert code == 0, err
    assert "DNSSIDE_CATALOG_ZONE: catalog.invalid" in out
    code, out, err = run("install", "--cluster-name", "east", "--mcs-zone", "clusterset.local",
                         "--catalog-zone", "cat.clusterset.local")
    assert code == 2 and out == ""
    assert ("--catalog-zone cat.clusterset.local. overlaps --mcs-zone clusterset.local." in err
            ), err


async def test_a_catalog_nobody_may_transfer_fails_catalog_setup(fake_kube: FakeKube) -> None:
    demo(fake_kube)
    data = {"DNSSIDE_CLUSTER_NAME": "east", "DNSSIDE_CATALOG_ZONE": "catalog.invalid."}
    fake_kube.apply({**config_map("east"), "data": data})
    results = await check(fake_kube)
    only_failure(results, "may transfer the catalog zone catalog.invalid.",
                 "DNSSIDE_ALLOW_TRANSFER", "DNSSIDE_TSIG_KEY_FILE", "DNSSIDE_CATALOG_ZONE")
    for allowed in ({"DNSSIDE_ALLOW_TRANSFER": "10.0.0.0/24"},
                    {"DNSSIDE_TSIG_KEY_FILE": "/etc/dnsside/tsig/key"}):
        fake_kube.apply({**config_map("east"), "data": {**data, **allowed}})
        results = await check(fake_kube)
        assert not failed(results)
        assert line(results, "may transfer the catalog zone").ok


async def test_without_a_catalog_there_is_nothing_to_check(fake_kube: FakeKube) -> None:
    results = await check(demo(fake_kube))
    assert not failed(results)
    assert not [r for r in results if "catalog" in r.text]
