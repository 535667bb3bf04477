"""The CI form of bench/soak.py: two minutes of churn, API faults, flaky gateways and
queries against a real dnsside, every name compared with the soak's model.

The soak is a script (it is also run for 30 minutes by hand), so it is run as one: its exit
status and its JSON summary are the result. The assertions on the summary are there so a
soak that silently stopped doing its job (no faults, no churn, no comparisons) cannot pass.
"""

from __future__ import annotations

import json
import subprocess
import sys

from testkit.serve import ROOT

MINUTES = 2.0


def test_soak_ci_form() -> None:
    # Kept in bench/out/ (git-ignored), not tmp_path: a failure is analysed from these.
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    out, report = out_dir / "soak-ci.json", out_dir / "SOAK_RESULTS-ci.md"
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--minutes", str(MINUTES),
         "--seed", "17", "--out", str(out), "--report", str(report),
         "--dnsside-log", str(out_dir / "soak-ci-dnsside.log")],
        capture_output=True, text=True, timeout=MINUTES * 60 + 180, cwd=ROOT,
    )
    tail = "\n".join(proc.stderr.splitlines()[-60:])
    assert out.exists(), f"no summary; soak exited {proc.returncode}:\n{tail}"
    s = json.loads(out.read_text())
    # What it did: enough to mean something.
    assert s["comparisons"] >= 6, tail
    assert s["comparisons_mid_fault"] >= 2, tail  # the 410+500s burst and the 20 s pause
    assert {f["kind"] for f in s["faults"]} >= {"410+500s", "pause-20s", "drop-watches"}, tail
    assert s["changes_per_s"] >= 30, tail
    assert s["queries_total"] >= 100 * MINUTES * 60, tail
    assert s["queries"].get("tcp", 0) > 0 and s["queries"].get("udp", 0) > 0
    assert s["rss_mb"]["start"] and s["rss_mb"]["peak"] >= s["rss_mb"]["start"]
    # What it found: nothing.
    assert s["mismatches"] == 0, json.dumps(s["mismatch_details"], indent=1)[:6000]
    assert s["servfail"] == 0 and s["timeouts"] == 0 and s["other_query_errors"] == 0, (
        s["query_error_samples"])
    assert s["tracebacks"] == 0, s["traceback_text"]
    assert s["lameduck"]["ok"], s["lameduck"]
    assert s["ok"] and proc.returncode == 0, tail
    assert "mismatches at the settle deadline | 0 |" in report.read_text()
