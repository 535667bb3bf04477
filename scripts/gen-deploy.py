#!/usr/bin/env python3
"""Write the generated files under deploy/ from `dnsside install` (dnsside/ops/).

tests/ops/test_install.py fails when deploy/ drifts from what this writes; run it after
changing dnsside/ops/:  .venv/bin/python scripts/gen-deploy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dnsside.ops.deploy import deploy_files  # noqa: E402


def main() -> int:
    for rel, text in deploy_files().items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
