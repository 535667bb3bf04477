"""scripts/test.sh (what a developer runs) and .ci/run (what CI runs on a clean machine)
install the same Debian packages, and both run the suite the same way: a package added
to one list and not the other passes on one side and fails on the other."""

from __future__ import annotations

import re

import pytest

from testkit.serve import ROOT

pytestmark = pytest.mark.quick


def script_packages() -> set[str]:
    text = (ROOT / "scripts" / "test.sh").read_text()
    (body,) = re.findall(r"^packages=\(([^)]*)\)", text, flags=re.M)
    return set(body.split())


def ci_packages() -> set[str]:
    text = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    words: set[str] = set()
    for line in re.findall(r"apt-get install -y -qq ([^#\n|]*)", text):
        words |= {w for w in line.split() if not w.startswith("-")}
    return words


def test_ci_installs_every_package_the_test_script_installs_and_no_other() -> None:
    # CI also needs the venv module (a developer's Python has it) and kubectl, which the
    # test script installs only when no kubectl is on the path.
    assert ci_packages() - {"python3-venv", "kubernetes-client"} == script_packages()


def test_ci_runs_the_test_script() -> None:
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("exec ./scripts/test.sh")
