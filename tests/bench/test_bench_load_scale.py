"""bench/bench_load_scale.py runs end to end at a tiny size (planning only: the load itself is what
tests/loader/test_load_scale.py runs): a real ZooKeeper, brokers and registry, the reference tree's
planning beside this tree's. No timing is asserted; only that it prints its rows and ratios, that both
trees found the same partitions and offsets, and that it leaves no broker process behind."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.leftovers import alive

pytestmark = [pytest.mark.processes, pytest.mark.slow]  # runs bench/bench_load_scale.py

REPO = Path(__file__).resolve().parents[2]


def test_the_load_scale_bench_plans_beside_its_reference_and_cleans_up():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_load_scale.py"), "--topics", "2", "--events", "5",
                        "--plan-repeat", "1", "--no-load"], capture_output=True, text=True, timeout=600, cwd=str(REPO),
                       env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "load average at start" in out and "load average at end" in out
    assert "2 topics x 10 partitions = 20 partitions, 100 events produced" in out
    for title in ("discovery (offsets)", "plan (segments etc.)"):
        assert re.search(rf"^{re.escape(title)}\s+[\d.]+s\s+[\d.]+s\s+[\d.]+$", out, re.M), title
    assert "both found the same partitions, offsets and leaders" in out
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 2 and not any(alive(p) for p in pids)
