"""bench/bench_idempotence.py runs end to end with a few messages: real ZooKeeper, 4 real brokers, every row printed.

No timing is asserted (the machine is shared); only that the bench completes, prints every row (each row
checks its own count), and leaves no broker or ZooKeeper process behind.
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

pytestmark = pytest.mark.processes  # runs bench/bench_idempotence.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_idempotence.py"


@pytest.mark.skipif(not zookeeper_available(), reason="Debian package zookeeper (java) is not installed")
def test_a_quick_run_prints_every_row_and_stops_every_server():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, str(BENCH), "--count", "3000", "--own-count", "1000", "--rounds", "1",
                        "--rebuild-batches", "3000"], capture_output=True, text=True, timeout=600, cwd=str(REPO),
                       env=env)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    for row in ("confluent-kafka  one broker", "confluent-kafka  RF 3, 3 brokers", "KafkaProducer    one broker",
                "KafkaProducer    RF 3, 3 brokers", "idempotent / plain", "leader appends of 3,000 batches",
                "producer state rebuilt on open", "without any snapshot"):
        assert row in out, f"missing {row!r} in:\n{out[-4000:]}"
    pids = [int(p) for p in re.findall(r"\d+", out.splitlines()[-1])]
    assert len(pids) >= 5 and not [p for p in pids if alive(p)], out.splitlines()[-1]
