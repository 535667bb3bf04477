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
# The full suite runs in parallel with pytest-xdist (`scripts/test.sh`: `-n 4 --dist
# loadgroup`). Each file is one group, so its module-scoped servers start once, on one
# worker; a file that must share a worker names its group with
# `pytest.mark.xdist_group(name)`. Nothing here needs a private port: every test binds port 0
# or a fresh loopback address, and network namespaces are named by pid.
# The longest files are handed out first, so that no worker starts one at the end.
LONGEST_FIRST = ("tests/soak/", "tests/interop/", "tests/security/", "tests/ops/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.path.relative_to(root).as_posix()))

    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(root).as_posix()
        return next((i for i, p in enumerate(LONGEST_FIRST) if path.startswith(p)),
                    len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the order within a file is kept
