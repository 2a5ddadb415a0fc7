"""bench/bench_producer.py runs end to end with a tiny count: a real broker per worker, exact byte counts.

No timing is asserted (the machine is shared); only that every experiment ran, that the
broker's log held exactly the bytes sent, and that the table and the aim line are printed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs bench/bench_producer.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_producer.py"


def test_bench_producer_runs_and_counts_exactly():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(BENCH), "--count", "1000", "--rounds", "1", "--reference", "none",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=str(REPO), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "load average at start" in out and "load average at end" in out and "machine: nproc" in out
    assert "aim: producer batch 50 >= 1,000,000 msg/s" in out
    result = json.loads(out.strip().splitlines()[-1])
    names = [r["name"] for r in result["results"]]
    assert names == ["batch 50, no ack, 200 B", "batch 50, acked (acks=1), 200 B", "batch 50, no ack, 100-300 B"]
    for r in result["results"]:
        row = r["current"]
        assert row["count"] == 1000
        assert row["log_bytes"] == row["expected_bytes"]   # every message reached the log, once
        assert r["reference"] is None
        assert f"| {r['name']} | current |" in out
