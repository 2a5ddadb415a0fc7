"""bench/bench_compaction.py runs end to end with a tiny hour (no timing asserted): each format prints
compaction beside both plain rewrites, with throughput ratios and peak RSS."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # the bench measures each rewrite in a child process

REPO = Path(__file__).resolve().parents[2]


def test_bench_compaction_prints_ratios_and_peak_rss_for_each_format():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "bench/bench_compaction.py", "--files", "3", "--rows", "300",
                           "--repeat", "1"], capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["format", "what", "rows/s", "MB/s", "in", "vs", "whole", "vs", "stream", "peak",
                                "RSS", "MB", "growth", "MB"]
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in lines[2:] if line.startswith(("parquet", "avro"))}
    assert set(rows) == {(f, w) for f in ("parquet", "avro") for w in ("whole", "stream", "compaction")}
    for values in rows.values():
        assert len(values) == 6 and all(float(v.replace(",", "")) >= 0 for v in values)
        assert float(values[4]) > 0  # the peak RSS
