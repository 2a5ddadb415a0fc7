"""The harness's processes die with pytest: a SIGKILLed pytest leaves no ZooKeeper, broker or registry behind.

A child pytest runs a test that starts a real ZooKeeper and a real broker (tests/harness) and then
waits; this test SIGKILLs that pytest (no finalizer can run) and checks that the watchdog of
tests/harness/reaper.py stopped both processes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.harness.wait import wait_until

REPO = Path(__file__).resolve().parents[2]

CHILD_TEST = textwrap.dedent('''
    import os, time
    from tests.harness.brokers import BrokerProcess
    from tests.harness.zookeeper import ZooKeeperServer

    def test_start_and_wait(tmp_path):
        zk = ZooKeeperServer().start()
        broker = BrokerProcess(0, tmp_path / "b0", zk_connect=zk.connect).start()
        (tmp_path.parent.parent / "pids").write_text(f"{zk.proc.pid} {broker.proc.pid}")
        time.sleep(600)
''')


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_sigkilled_pytest_leaves_no_process_behind(tmp_path, zookeeper):
    (tmp_path / "test_child.py").write_text(CHILD_TEST)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"),
         str(tmp_path / "test_child.py")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pids_file = tmp_path / "pids"
    try:
        wait_until(lambda: pids_file.exists() and pids_file.read_text().strip(), timeout=120,
                   what="the child pytest to start its ZooKeeper and broker")
        zk_pid, broker_pid = (int(x) for x in pids_file.read_text().split())
        assert _alive(zk_pid) and _alive(broker_pid)
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (_alive(zk_pid) or _alive(broker_pid)):
            time.sleep(0.2)
        left = [name for name, pid in (("ZooKeeper", zk_pid), ("broker", broker_pid)) if _alive(pid)]
        assert not left, f"left behind after pytest was SIGKILLed: {left}"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pid in (int(x) for x in (pids_file.read_text().split() if pids_file.exists() else ())):
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
