"""Shared pytest fixtures. Each block names its owner; append, don't clobber."""

from __future__ import annotations

# --------------------------------------------------------------------------- fake API server
# (testkit/fakekube.py) `fake_kube`: a running FakeKube with `.kubeconfig`, `.url` and the
# control methods (load/apply/delete/drop_streams/fail_next/compact/set_unreachable).
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from testkit.fakekube import FakeKube, running_fake_kube
from testkit.threadedkube import ThreadedKube

DEMO_EAST = Path(__file__).resolve().parents[1] / "examples" / "demo-east.yaml"


@pytest.fixture
async def fake_kube(tmp_path: Path) -> AsyncIterator[FakeKube]:
    """An empty fake API server on 127.0.0.1:<free port>; short bookmark interval."""
    async with running_fake_kube(tmp_path, bookmark_interval=0.2) as kube:
        yield kube


@pytest.fixture
async def fake_kube_demo(fake_kube: FakeKube) -> FakeKube:
    """The fake API server loaded with examples/demo-east.yaml."""
    fake_kube.load(DEMO_EAST)
    return fake_kube


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[ThreadedKube]:
    """The fake API server on a thread of its own (for tests that start `dnsside serve`
    against it from synchronous code), loaded with examples/demo-east.yaml."""
    k = ThreadedKube(tmp_path)
    k.call(k.kube.load, DEMO_EAST)
    yield k
    k.close()

# --------------------------------------------------------------------------- UDP I/O modes
# `udp_io`: "batch" (recvmmsg/sendmmsg) then "plain" (recvfrom/sendto). Module-scoped, so a
# module's shared server starts once per mode and the tests that use it run under both.
# Every `dnsside serve` started while it is active gets DNSSIDE_UDP_IO (= --udp-io);
# server fixtures check with support.expect_udp_io that the mode really is in effect.
@pytest.fixture(scope="module", params=["batch", "plain"])
def udp_io(request: pytest.FixtureRequest) -> Iterator[str]:
    mp = pytest.MonkeyPatch()
    mp.setenv("DNSSIDE_UDP_IO", request.param)
    yield request.param
    mp.undo()

# --------------------------------------------------------------------------- parallel runs
# The full suite runs in parallel with pytest-xdist (`scripts/test.sh`: `-n 4`; pyproject's
# addopts: `--dist loadgroup --no-loadscope-reorder`). Each file is one group, so its
# module-scoped servers start once, on one worker; a file that must share a worker names its
# group with `pytest.mark.xdist_group(name)`. Nothing here needs a private port: every test
# binds port 0 or a fresh loopback address, and network namespaces are named by pid.
# Groups are handed out in the order below (xdist's own reorder, by number of tests, would
# start the one-test files of a minute or two, the soak and the port-53 glue, last): the
# longest files first, as measured (`--durations` and the per-file sums of a `--junitxml`
# run of the whole suite, -n 4, 2026-11-28, after bulk loads stopped collecting the whole
# worker's heap), then the directories whose files start programs, then the rest.
LONGEST_FIRST = (
    "tests/soak/test_soak.py",  # 1 test, 130 s
    "tests/interop/test_zone_transfer.py",  # 22 tests, 80 s
    "tests/soak/test_rss_churn.py",  # 1 test, 67 s
    "tests/interop/test_resolver_outages.py",  # 1 test, 46 s
    "tests/test_docs_examples.py",  # 38 s
    "tests/dns/test_ring_storage.py",  # 32 s
    "tests/serving/test_transfer_caps.py",  # 28 s
    "tests/interop/test_zone_notify.py",  # 28 s
    "tests/soak/test_memory_churn.py",  # 26 s
    "tests/interop/test_catalog_zone.py",  # 25 s
    "tests/soak/", "tests/interop/", "tests/security/", "tests/ops/",
)
# Long files whose tests share no module-scoped fixture or state: handed out test by test,
# last, so that they fill the workers' last minutes instead of holding one for minutes.
SPLIT = (
    "tests/security/test_hostile_api.py",  # 22 tests, 140 s
    "tests/ops/test_install.py",  # 57 tests, 29 s
    "tests/sources/test_flat_serve.py",  # 19 tests, 26 s
    "tests/serving/test_operator_messages.py",  # 17 tests, 12 s
    # 73 in-process tests, 3 s (690 s while each bulk load ran a full collection of the
    # worker's whole heap: dnsside/core/gcpause.py)
    "tests/core/test_index_incremental.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            path = item.path.relative_to(root).as_posix()
            group = item.nodeid if path in SPLIT else path
            item.add_marker(pytest.mark.xdist_group(group))

    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(root).as_posix()
        if path in SPLIT:
            return len(LONGEST_FIRST) + 1
        return next((i for i, p in enumerate(LONGEST_FIRST) if path.startswith(p)),
                    len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the order within a file is kept
