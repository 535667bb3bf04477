"""Shared pytest fixtures. Each block names its owner; append, don't clobber."""

from __future__ import annotations

# --------------------------------------------------------------------------- fake API server
# (tests/fakekube.py) `fake_kube`: a running FakeKube with `.kubeconfig`, `.url` and the
# control methods (load/apply/delete/drop_streams/fail_next/compact/set_unreachable).
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakekube import FakeKube, running_fake_kube

DEMO_EAST = Path(__file__).resolve().parent.parent / "examples" / "demo-east.yaml"


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
