"""`ingest demo` end to end (short), and that it leaves no process behind."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.harness import reaper
from tests.harness.spark import spark_submit_env

pytestmark = pytest.mark.processes  # `ingest demo` as a subprocess

ROOT = Path(__file__).resolve().parents[2]


def _children_of(pid: int) -> set[int]:
    """Every live descendant pid of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - out
        out |= frontier
    return out


def _sessions_alive(sids: set[int]) -> set[int]:
    alive = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) in sids:
                    alive.add(int(entry))
            except OSError:
                continue
    return alive


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "jobs" / "audit.py").exists(), reason="jobs/audit.py not there yet")
def test_short_demo_runs_the_whole_pipeline_and_stops_everything(tmp_path):
    work = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "ingest.cli", "demo", "--duration", "8", "--rate", "60",
                             "--workdir", str(work)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=spark_submit_env())  # its spark-submits: C1 JIT (tests/harness/spark.py)
    reaper.watch(proc)  # stopped even if pytest itself is killed
    sessions: set[int] = set()
    deadline = time.monotonic() + 900  # a hang guard only: a loaded 2-core machine is slow
    while proc.poll() is None and time.monotonic() < deadline:
        sessions |= {os.getsid(p) for p in _children_of(proc.pid) if _safe_sid(p)}
        time.sleep(0.5)
    if proc.poll() is None:
        _kill_demo(proc, sessions)
        pytest.fail("demo did not finish in 900 s")
    out = proc.stdout.read()
    assert proc.returncode == 0, out[-5000:]
    assert "demo finished" in out and str(work / "warehouse") in out
    for topic in ("page-views", "clicks", "service-metrics"):
        assert topic in out
    assert (work / "reports" / "audit.jsonl").exists()
    # the foreign service (confluent-kafka, AvroSerializer, idempotent): every acknowledged order loaded once
    orders = re.search(r"^orders\s+(\d+)\s+(\d+)\s", out, re.M)
    assert orders and int(orders[1]) == int(orders[2]) > 0, out[-3000:]
    import json

    hours = json.loads((work / "reports" / "compaction.json").read_text())["hours"]
    # Which hour holds two files depends on when the loads ran against the producers (a loaded machine may
    # load a quiet topic once); what must hold: every hour of two or more files is compacted into one,
    # every other hour is left alone saying why, and the busiest topic is compacted.
    for h in hours:
        if h["files_in"] >= 2:
            assert (h["action"], h["files_out"], h["rows_out"]) == ("compacted", 1, h["rows_in"] - h["duplicates"]), hours
        else:
            assert h["action"] == "noop" and "compaction.min.files" in h["reason"], hours
    assert "page-views" in {h["hour"].split("/")[0] for h in hours if h["action"] == "compacted"}, hours
    assert list((work / "warehouse" / "page-views").rglob("*.parquet"))
    sessions.discard(os.getsid(0))
    # processes SIGKILLed by the demo's last step may take a moment to be reaped on a loaded machine
    deadline = time.monotonic() + 15
    while _sessions_alive(sessions) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _sessions_alive(sessions)
    assert not alive, f"demo left processes running: {_describe(alive)}"


def _describe(pids: set[int]) -> list[str]:
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append(f"{pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            out.append(f"{pid}: gone")
    return out


def _kill_demo(proc, sessions: set[int]) -> None:
    """SIGKILL a demo that overran its hang guard, and every session its children lead: they run in
    sessions of their own, so killing the demo's group alone left its brokers and registry running."""
    for sid in {proc.pid} | (sessions - {os.getsid(0)}):
        try:
            os.killpg(sid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def _safe_sid(pid: int) -> bool:
    try:
        os.getsid(pid)
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_demo_ctrl_c_stops_what_it_started(tmp_path):
    """Ctrl-C while the producers publish stops every process the demo started.

    Deterministic under load: the signal is sent only once the demo printed its
    "producers:" line (all three producers are started) and every child's session is
    seen; from then on the demo sleeps before its first load and starts nothing, so
    the snapshot of sessions is complete when the signal lands. (The race of a
    signal landing while a child starts is pinned by tests/demo/test_units.py.)
    """
    work = tmp_path / "demo"
    out_path = tmp_path / "demo.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ingest.cli", "demo", "--duration", "120",
                                 "--workdir", str(work)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        reaper.watch(proc)  # stopped even if pytest itself is killed
    sessions: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while "producers: " not in out_path.read_text():
            assert proc.poll() is None, out_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the demo's producers did not start within 240 s"
            time.sleep(0.2)
        text = out_path.read_text()
        expected = 6 + ("ZooKeeper: 127.0.0.1:" in text)  # 2 brokers, registry, 3 producers (+ ZooKeeper)
        while len(sessions - {os.getsid(0)}) < expected:  # every child is a session leader
            assert time.monotonic() < deadline, f"saw {sessions} of {expected} children"
            sessions |= {os.getsid(p) for p in _children_of(proc.pid) if _safe_sid(p)}
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            _kill_demo(proc, sessions)
    out = out_path.read_text()
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted" in out
    sessions.discard(os.getsid(0))
    deadline = time.monotonic() + 30  # SIGKILLed groups vanish a moment after the demo returns
    while _sessions_alive(sessions) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _sessions_alive(sessions), "Ctrl-C left processes running"
