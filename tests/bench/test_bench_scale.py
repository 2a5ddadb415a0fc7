"""bench/bench_scale.py runs end to end in its quick mode: real ZooKeeper, 3 real brokers per batch size,
every row and ratio printed, no process left behind.

No timing is asserted (the machine is shared): only that both clusters ran their kills, that the table and
the ratios are printed, and that every ZooKeeper and broker process the bench started is gone.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.leftovers import alive
from tests.harness.zookeeper import zookeeper_available

pytestmark = pytest.mark.processes  # runs bench/bench_scale.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_scale.py"


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO), env=env)


def test_bad_arguments_are_refused_naming_what_is_allowed():
    r = _run("--batch", "0,100", timeout=60)
    assert r.returncode == 2
    assert "--batch '0,100': allowed is a comma-separated list of integers from 1 to 1000" in r.stderr
    r = _run("--partitions", "5", "--topics", "10", timeout=60)
    assert r.returncode == 2
    assert "--partitions 5 --topics 10: allowed is 1 <= topics <= partitions" in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_quick_run_prints_every_row_and_ratio_and_leaves_no_process():
    r = _run("--quick")
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    assert "| | this checkout, controller.batch.partitions=1 | this checkout, controller.batch.partitions=100 |" in out
    for row in ("| threads per broker |", "| RSS per broker (MB) |", "| ZooKeeper znodes |", "| ZooKeeper watches |",
                "| ZooKeeper writes/s under steady load |",
                "| **session expired to every partition re-elected (s)**, median / max |",
                "| ZooKeeper transactions per kill, median / max |", "| restart to back in every ISR (s), median / max |",
                "| partitions offline after a kill (max) |", "| kills (of the controller) | 2 (",
                "ratio re-election after the session expired, batch 100 / batch 1 (median): ",
                "ratio ZooKeeper transactions per kill, batch 100 / batch 1 (median): ",
                "load average before:", "load average after:"):
        assert row in out, f"missing {row!r} in:\n{out[-4000:]}"
    assert len(re.findall(r"^kill \d/2: broker \d", out, re.M)) == 4, out[-4000:]   # 2 kills in each cluster
    pids = [int(x) for x in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 8, out[-4000:]   # ZooKeeper + 3 brokers, twice ...
    assert not [pid for pid in pids if alive(pid)]   # ... all gone
