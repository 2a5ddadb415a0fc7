"""Pieces of `ingest demo` that need no cluster: work directory, ZooKeeper fallback, process groups."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ingest.demo import pipeline
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
