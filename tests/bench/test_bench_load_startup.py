"""bench/bench_load_startup.py runs end to end with a tiny load: a real broker, registry and spark-submit.

No timing is asserted (the machine is shared); only that the bench completes, that the load it
times committed exactly the events produced, that every phase row is printed, and that it
leaves no broker or registry process behind.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.leftovers import alive

pytestmark = pytest.mark.processes  # runs bench/bench_load_startup.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_load_startup.py"


@pytest.mark.slow
def test_the_startup_bench_times_one_small_load_and_cleans_up():
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, str(BENCH), "--count", "300", "--variants", "after", "--repeat", "1"],
                       capture_output=True, text=True, timeout=600, cwd=str(REPO), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert re.search(r"machine: nproc \d+", out) and "load average at start" in out and "load average at end" in out
    assert "300 events" in out  # the bench refuses a run that loaded any other count
    for title in ("JVM start", "driver Python imports + plan", "SparkContext start", "job: tasks incl. Python workers",
                  "commit", "SparkContext stop", "JVM exit", "total wall", "CPU of the process tree"):
        assert re.search(rf"^{re.escape(title)}.*\d", out, re.M), title
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 2 and not any(alive(p) for p in pids)
