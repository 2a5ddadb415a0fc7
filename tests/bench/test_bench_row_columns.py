"""bench/bench_row_columns.py runs end to end with a tiny count (no timing asserted): the rows and
columns paths (Python and compiled decoders) write equal tables (the script checks) and one table row per
schema is printed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs the bench script as a subprocess

REPO = Path(__file__).resolve().parents[2]


def test_bench_row_columns_quick_prints_a_ratio_per_schema():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "bench/bench_row_columns.py", "--quick"], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split("|")[1].strip() for r in rows] == ["bench event", "page_view", "click"]
    assert all(float(r.split("|")[6]) > 0 for r in rows)
