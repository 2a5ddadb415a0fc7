"""bench/bench_replication.py runs end to end in its quick mode: real ZooKeeper, 3 real brokers, every row printed.

No timing is asserted (the machine is shared); only that the bench completes, prints its
throughput and failover tables, and leaves no broker or ZooKeeper process behind.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.zookeeper import zookeeper_available
from tests.harness.leftovers import alive

pytestmark = pytest.mark.processes  # runs bench/bench_replication.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_replication.py"


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO), env=env)


def _pids(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\(pid (\d+)\)", text)]


@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_cluster_starts_and_stops_cleanly():
    r = _run("--phases", "none", timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    pids = _pids(r.stdout)
    assert len(pids) == 4, r.stdout          # ZooKeeper + 3 brokers were started ...
    assert not [pid for pid in pids if alive(pid)]   # ... and are all gone
    assert "brokers and ZooKeeper stopped" in r.stdout


def test_bad_arguments_are_refused_naming_what_is_allowed():
    r = _run("--phases", "throughput,bogus", timeout=60)
    assert r.returncode == 2
    assert "unknown phase(s) ['bogus']: allowed are throughput, failover, none" in r.stderr
    r = _run("--inflight", "0,2", timeout=60)
    assert r.returncode == 2
    assert "--inflight '0,2': allowed is a comma-separated list of integers >= 1" in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_quick_run_prints_every_row():
    r = _run("--quick", timeout=600)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    for row in ("| acks=1, RF=1 (reference), 2 in flight |", "| acks=0, RF=3, 2 in flight |",
                "| acks=1, RF=3, 2 in flight |", "| acks=-1, RF=3, 2 in flight |",
                "| Producer sync, acks=1, RF=3, 1 partition |", "| Producer sync, acks=-1, RF=3, 1 partition |",
                "| **acks=-1 / acks=1** (aim >= 0.5) | **acks=1 RF=3 / RF=1** (cost of replication) |",
                "failover over 2 SIGKILLs of the leader (zk.sessiontimeout.ms=3000",
                "**first acks=1 write acknowledged**", "**first acks=-1 write acknowledged**",
                "load average before:", "load average after:"):
        assert row in out, f"missing {row!r} in:\n{out[-4000:]}"
    # every throughput row moved messages (its error cell is not checked: a time-out under load is timing)
    for name in ("acks=1, RF=1 (reference)", "acks=0, RF=3", "acks=1, RF=3", "acks=-1, RF=3"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"| {name}, 2 in flight |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert int(cells[1].replace(",", "")) > 0, line
    ratio_row = next(ln for ln in out.splitlines() if ln.startswith("| 2 | "))
    assert len([c for c in ratio_row.strip("|").split("|") if c.strip()]) == 7, ratio_row
    assert not [pid for pid in _pids(out) if alive(pid)]
