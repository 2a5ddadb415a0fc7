"""`ingest demo --topology datacenters` end to end (short): latency, tiers, and nothing left running."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from tests.demo.test_demo import ROOT, _children_of, _describe, _kill_demo, _safe_sid, _sessions_alive
from tests.harness import reaper
from tests.harness.spark import spark_submit_env

pytestmark = pytest.mark.processes  # `ingest demo` as a subprocess

LATENCY = re.compile(r"end-to-end latency \(producer send -> visible in the offline cluster\): "
                     r"median (\d+\.\d+) s, p99 (\d+\.\d+) s, mean (\d+\.\d+) s, max (\d+\.\d+) s "
                     r"over (\d+) messages \(paper: ~10 s average\)")
TIER_ROW = re.compile(r"^(page-views|clicks)\s+\d\d:\d\d:\d\d\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)", re.M)


def test_topology_flag_is_refused_without_zookeeper(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "demo", "--topology", "datacenters",
                          "--no-zookeeper", "--workdir", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--topology datacenters with --no-zookeeper" in out.stderr
    assert not (tmp_path / "d").exists()  # refused before anything is created or started


@pytest.mark.slow
def test_datacenters_demo_prints_latency_and_tiers_and_stops_everything(tmp_path):
    work = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "ingest.cli", "demo", "--topology", "datacenters",
                             "--duration", "8", "--rate", "40", "--workdir", str(work)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True,
                            env=spark_submit_env())  # its spark-submits: C1 JIT (tests/harness/spark.py)
    reaper.watch(proc)  # stopped even if pytest itself is killed
    sessions: set[int] = set()
    deadline = time.monotonic() + 900  # a hang guard only: a loaded 2-core machine is slow
    while proc.poll() is None and time.monotonic() < deadline:
        sessions |= {os.getsid(p) for p in _children_of(proc.pid) if _safe_sid(p)}
        time.sleep(0.5)
    if proc.poll() is None:
        _kill_demo(proc, sessions)
        pytest.fail("the datacenters demo did not finish in 900 s")
    out = proc.stdout.read()
    assert proc.returncode == 0, out[-6000:]
    for line in ("dc1: datacenter cluster", "dc2: datacenter cluster", "offline: offline cluster", "mirrors: "):
        assert line in out, out[-6000:]
    latency = LATENCY.search(out)
    assert latency, out[-6000:]
    median, p99, _mean, top, count = (float(x) for x in latency.groups())
    # 8 s at 40 page views/s + 16 clicks/s, split between the two datacenters: every event is measured
    assert int(count) == 2 * (int(20 * 8) + int(8 * 8)), out[-3000:]
    assert 0 < median <= p99 <= top
    rows = TIER_ROW.findall(out)
    assert rows, out[-6000:]
    for _topic, producers, source, target, warehouse, status in rows:
        assert producers == source == target == warehouse and status == "COMPLETE", out[-6000:]
    assert sum(int(r[1]) for r in rows) == int(count)
    sessions.discard(os.getsid(0))
    deadline = time.monotonic() + 15
    while _sessions_alive(sessions) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _sessions_alive(sessions)
    assert not alive, f"demo left processes running: {_describe(alive)}"
    assert (ROOT / "jobs" / "load.py").exists()
