"""Pieces of `ingest demo` that need no cluster: work directory, ZooKeeper fallback, process groups."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ingest.demo import pipeline, processes
from ingest.demo.pipeline import DemoOptions, fresh_workdir
from ingest.demo.processes import Supervisor
from ingest.errors import DemoError, IngestError


def test_refuses_to_clear_a_directory_it_did_not_create(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(DemoError, match="not a previous demo's directory") as err:
        fresh_workdir(str(tmp_path))
    assert isinstance(err.value, IngestError) and str(tmp_path) in str(err.value)
    assert (tmp_path / "precious.txt").exists()


def test_replaces_a_previous_demo_directory(tmp_path):
    work = fresh_workdir(str(tmp_path / "d"))
    (work / "old-data").write_text("x")
    again = fresh_workdir(str(tmp_path / "d"))
    assert again == work and not (work / "old-data").exists() and (work / pipeline.MARKER).exists()


def test_without_zookeeper_says_so_and_uses_a_static_broker_list(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "ZK_JAR", Path("/nonexistent/zookeeper.jar"))
    demo = pipeline.Demo(DemoOptions(workdir=str(tmp_path / "d")))
    try:
        demo.start_zookeeper()
        demo.brokers = ["127.0.0.1:1", "127.0.0.1:2"]
        assert demo.zk_connect is None
        assert demo.discovery_args() == ["--brokers", "0:127.0.0.1:1,1:127.0.0.1:2"]
    finally:
        demo.sup.close()
    out = capsys.readouterr().out
    assert "NOT INSTALLED" in out and "static broker list" in out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.processes
def test_close_stops_the_whole_process_group(tmp_path):
    sup = Supervisor(tmp_path)
    child = sup.start("sleeper", ["sh", "-c", "sleep 300 & echo $! > grandchild.pid; wait"], cwd=tmp_path)
    deadline = time.monotonic() + 10
    while not (tmp_path / "grandchild.pid").exists() or not (tmp_path / "grandchild.pid").read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    sup.close()
    assert child.proc.poll() is not None
    deadline = time.monotonic() + 10
    while _alive(grandchild):  # reaped by init shortly after the kill
        assert time.monotonic() < deadline, "grandchild survived"
        time.sleep(0.05)


@pytest.mark.processes
def test_ctrl_c_right_after_a_child_is_forked_still_stops_that_child(tmp_path, monkeypatch):
    """The race of Supervisor.start, made deterministic: a real SIGINT is raised the instant the
    real Popen returns, before the supervisor can record the child (where a Ctrl-C under load lands
    now and then). The child must still be recorded, and close() must stop it."""
    real_popen = subprocess.Popen
    forked: list[subprocess.Popen] = []

    def popen_then_ctrl_c(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        forked.append(proc)
        signal.raise_signal(signal.SIGINT)
        return proc

    monkeypatch.setattr(processes.subprocess, "Popen", popen_then_ctrl_c)
    # Python's own Ctrl-C (KeyboardInterrupt), whatever an earlier test in this process installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sup = Supervisor(tmp_path)
    try:
        with pytest.raises(KeyboardInterrupt):  # the Ctrl-C is not lost, only held back
            sup.start("sleeper", ["sleep", "300"])
        monkeypatch.undo()
        sup.close()
        (proc,) = forked
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C while starting a child left that child running")
        assert [c.proc for c in sup.children] == [proc]
    finally:
        signal.signal(signal.SIGINT, previous)
        for proc in forked:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_demo_summary_reads_window_rows_through_the_one_report_reader(tmp_path):
    from ingest.demo.summary import audit_rows

    report = tmp_path / "audit.jsonl"
    report.write_text('{"topic": "t", "row_type": "window", "status": "COMPLETE", "window_start_ms": 0}\n'
                      '{"topic": "t", "row_type": "producer", "status": "COMPLETE", "window_start_ms": 0}\n')
    assert [r["row_type"] for r in audit_rows(report)] == ["window"]
    assert audit_rows(tmp_path / "missing.jsonl") == []
    (tmp_path / "junk.jsonl").write_text("not a report\n")
    assert audit_rows(tmp_path / "junk.jsonl") == []


def test_latency_percentiles_are_nearest_rank():
    from ingest.demo.latency import percentile, summarize

    assert summarize([]) is None
    s = summarize([1000 * i for i in range(1, 101)])  # 1 s .. 100 s
    assert (s.count, s.median_s, s.p99_s, s.max_s, s.mean_s) == (100, 50.0, 99.0, 100.0, 50.5)
    assert percentile([3.0], 99) == 3.0
    assert "median 50.00 s, p99 99.00 s" in s.line() and "(paper: ~10 s average)" in s.line()


def test_tier_lines_show_every_tier_or_say_they_are_missing():
    from ingest.demo.summary import tier_lines

    rows = [{"topic": "page-views", "window_start_ms": 10_000, "status": "DATA_LOSS", "loss_tier": "source",
             "tiers": {"producers": 7, "broker": None, "source": 5, "target": 5, "warehouse": 5}},
            {"topic": "clicks", "window_start_ms": 0, "status": "COMPLETE",
             "tiers": {"producers": 2, "broker": None, "source": None, "target": None, "warehouse": 2}}]
    out = tier_lines(rows)
    assert out[3].split() == ["clicks", "00:00:00", "2", "-", "-", "2", "COMPLETE", "-"]
    assert out[4].split() == ["page-views", "00:00:10", "7", "5", "5", "5", "DATA_LOSS", "source"]
    assert tier_lines([{"topic": "t", "status": "COMPLETE"}])[0].startswith("tiers per window: NOT REPORTED")
