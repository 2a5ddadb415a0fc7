"""bench/bench_audit_startup.py runs end to end on a tiny hour: one real spark-submit of jobs/audit.py.

No timing is asserted (the machine is shared); only that the bench completes, that the audit it
times judged the built hour (the one lossy window: exit code 3), and that every phase row is printed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs spark-submit

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_audit_startup.py"


@pytest.mark.slow
def test_the_audit_startup_bench_times_one_small_audit():
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, str(BENCH), "--count", "300", "--variants", "after", "--repeat", "1"],
                       capture_output=True, text=True, timeout=600, cwd=str(REPO), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert re.search(r"machine: nproc \d+", out) and "load average at start" in out and "load average at end" in out
    assert "every run: exit code 3, the same 19 report rows (295 loaded rows counted)" in out
    for title in ("JVM start", "driver Python imports", "SparkContext start", "monitoring", "distinct counts",
                  "attribution + reconcile + samples", "report (revision, JSON lines, HTML)", "SparkContext stop",
                  "JVM exit", "total wall", "CPU of the process tree"):
        assert re.search(rf"^{re.escape(title)}.*\d", out, re.M), title
