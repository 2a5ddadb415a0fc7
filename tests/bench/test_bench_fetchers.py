"""bench/bench_fetchers.py runs end to end in its quick mode: two real clusters one after the other, ratios printed.

No timing is asserted (the machine is shared); only that the bench completes, prints every measure for
both clusters and the ratios, and leaves no broker or ZooKeeper process behind.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.zookeeper import zookeeper_available

pytestmark = pytest.mark.processes  # runs bench/bench_fetchers.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_fetchers.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_quick_run_prints_both_clusters_and_the_ratios():
    r = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=600,
                       cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    for row in ("reference 18c4b17 (a thread per partition): catch-up", "this checkout (1 fetcher thread(s) per "
                "leader): catch-up", "ratio this checkout / reference:", "threads per broker (max):",
                "acks=all throughput:", "load average before:", "load average after:"):
        assert row in out, f"missing {row!r} in:\n{out[-4000:]}"
    assert "fetcher threads {0: 2, 1: 2, 2: 2}" in out, out[-4000:]   # 1 per leader, 2 leaders to copy from
    pids = [int(x) for x in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 8, out                       # ZooKeeper + 3 brokers, twice ...
    assert not [pid for pid in pids if _alive(pid)]  # ... all gone
