"""bench/bench_controller_zk.py runs end to end in its quick mode: a real ZooKeeper, every row printed, the
server gone afterwards. No timing is asserted (the machine is shared)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.leftovers import alive
from tests.harness.zookeeper import zookeeper_available

pytestmark = pytest.mark.processes  # runs bench/bench_controller_zk.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_controller_zk.py"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO), env=env)


def test_bad_batches_are_refused_naming_what_is_allowed():
    r = _run("--batches", "100,x", timeout=60)
    assert r.returncode == 2
    assert "--batches '100,x': allowed is a comma-separated list of integers from 1 to 1000" in r.stderr


@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_quick_run_prints_every_row_and_stops_zookeeper():
    r = _run("--quick")
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    for row in ("| state writes, one fenced transaction each (batch 1) |", "| state writes, 100 per fenced transaction |",
                "| state writes, 1000 per fenced transaction |", "| state reads, pipelined (1,000 in flight) |",
                "| 1 | ", "load average before:", "load average after:"):
        assert row in out, f"missing {row!r} in:\n{out[-4000:]}"
    ratios = re.findall(r"\| ([\d.]+)x \|", out)
    assert len(ratios) == 5, out[-4000:]       # a ratio on every write and read row
    pids = [int(x) for x in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 1 and not alive(pids[0]), out[-4000:]
