"""bench/bench_rebalance.py runs end to end with one kill and one leave per session timeout: real ZooKeeper, 3 brokers, confluent-kafka member processes.

No time is asserted (the machine is shared): only that the bench completes, prints every event and every
row of its table, and leaves no broker, ZooKeeper or member process behind.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.zookeeper import zookeeper_available
from tests.harness.leftovers import alive, running_from

pytestmark = pytest.mark.processes  # runs bench/bench_rebalance.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_rebalance.py"


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.slow
@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_a_kill_per_session_timeout_prints_every_row_and_leaves_no_process():
    r = _run("--kills", "1", "--members", "3", "--partitions", "12", "--session-timeouts", "6000,7000",
             "--rate", "200", timeout=900)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    for session in (6000, 7000):
        for how in ("sigkill", "close"):
            for k in (1,):
                assert re.search(rf"^  {how} +{k} of 1 \(s{session}-m\d, after [\d.]+ s\): first survivor told "
                                 rf"+[\d.]+ s, every partition assigned +[\d.]+ s, consumption resumed on every "
                                 rf"partition +[\d.]+ s",
                                 out, re.M), (how, k, out[-3000:])
        heartbeat = 2000 if session == 6000 else 2333
        for label in ("member SIGKILLed", "member leaves, close()"):
            assert re.search(rf"^\| {re.escape(label)} \| {session} \| {heartbeat} \| 1 \| [\d.]+ / [\d.]+ "
                             rf"\| [\d.]+ / [\d.]+ \| [\d.]+ / [\d.]+ \|$", out, re.M), (label, session, out[-3000:])
        for how in ("sigkill", "close"):
            assert f"- {how}, session.timeout.ms {session}: until the survivors are told" in out
    assert "load average at start" in out and "load average at end" in out
    pids = [int(x) for x in re.search(r"stopped every process: PIDs \[([\d, ]+)\]", out).group(1).split(",")]
    assert len(pids) == 4 + 2 * (3 + 2 * 1)  # ZooKeeper, 3 brokers; per session 3 members, restarted twice
    assert "left running: none" in out
    assert not [p for p in pids if alive(p)]
    assert not running_from("bench-rebalance-")


@pytest.mark.parametrize("args, message", [
    (["--session-timeouts", "45000,5000"], "--session-timeouts '45000,5000': allowed is a comma-separated list of "
                                           "integers from 6000 to 1800000"),
    (["--members", "1"], "--members 1: allowed is an integer >= 2"),
    (["--kills", "0"], "--kills 0: allowed is an integer >= 1"),
])
def test_bad_arguments_are_refused_naming_what_is_allowed(args, message):
    r = _run(*args, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
