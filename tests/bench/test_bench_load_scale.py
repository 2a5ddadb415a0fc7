"""bench/bench_load_scale.py runs end to end at a tiny size: a real ZooKeeper, brokers and registry, the
reference tree's planning beside this tree's, the load, the audit and the compaction of the loaded hour
through spark-submit on local-cluster. No timing is asserted; the counts are exact: every produced event
committed, the audit's verdict OK with every acknowledged event loaded and nothing missing over every
window of the hour, each topic's hour compacted from its ten files into one with the same rows; and no
broker process is left behind."""
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


def test_the_load_scale_bench_plans_loads_audits_and_compacts_one_hour_and_cleans_up():
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_load_scale.py"), "--topics", "2", "--events", "5",
                        "--plan-repeat", "1"], capture_output=True, text=True, timeout=1200, cwd=str(REPO), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "load average at start" in out and "load average at end" in out
    assert "2 topics x 10 partitions = 20 partitions, 100 events produced" in out
    for title in ("discovery (offsets)", "plan (segments etc.)"):
        assert re.search(rf"^{re.escape(title)}\s+[\d.]+s\s+[\d.]+s\s+[\d.]+$", out, re.M), title
    assert "both found the same partitions, offsets and leaders" in out

    assert re.search(r"^load: spark-submit .* jobs/load\.py, 100 events committed \(and \d+ monitoring events",
                     out, re.M)
    assert re.search(r"^  planning share of the run: [\d.]+%$", out, re.M)
    # 20 partitions of the topics and those of the audit topic the producer created
    assert re.search(r"^  tasks (\d+): median", out, re.M) and int(re.search(r"^  tasks (\d+):", out, re.M)[1]) > 20

    assert re.search(r"^audit: spark-submit .* jobs/audit\.py of the hour, exit 0,", out, re.M)
    assert re.search(r"^  audit bench-load-scale-audit read \d+ data files \(\d+ rows counted\)", out, re.M)
    # six 10-minute windows of the hour per topic, each judged (the producer's heartbeats cover its idle ones)
    assert "  2 topics, 12 windows (12 judged): COMPLETE 12" in out
    assert "  acknowledged 100, loaded distinct 100, missing 0" in out
    assert "  verdict: OK: every judged window is complete (12 judged)" in out

    assert re.search(r"^compaction: spark-submit .* jobs/compact\.py --audit-run bench-load-scale-audit", out, re.M)
    assert re.search(r"^  2 of \d+ topic-hours compacted: files 20 -> 2, rows 100 -> 100, ", out, re.M)
    assert re.search(r"^  compaction run \(plan, tasks, commit\)\s+[\d.]+\s+[\d,]+\s+[\d.]+$", out, re.M)
    assert re.search(r"^  plain rewrite, stream, 1 process\s+[\d.]+\s+[\d,]+\s+[\d.]+$", out, re.M)
    assert re.search(r"^  compaction/stream throughput: [\d.]+$", out, re.M)

    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 2 and not any(alive(p) for p in pids)
