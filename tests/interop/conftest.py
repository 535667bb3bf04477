"""What several interop modules share: the Go client, built once per module."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent / "clients"


@pytest.fixture(scope="module")
def go_resolve(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/interop/clients/resolve.go built with Debian's golang-go, offline (standard library
    only, caches in tmp, GOPROXY=off)."""
    tmp = tmp_path_factory.mktemp("go")
    binary = tmp / "resolve"
    env = {**os.environ, "GOCACHE": str(tmp / "cache"), "GOPATH": str(tmp / "gopath"),
           "GOPROXY": "off", "GOFLAGS": "", "CGO_ENABLED": "0", "HOME": str(tmp)}
    go = shutil.which("go") or "/usr/lib/go/bin/go"
    built = subprocess.run([go, "build", "-o", str(binary), str(CLIENTS / "resolve.go")],
                           env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return binary
