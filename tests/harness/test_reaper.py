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


# Each test starts its own ZooKeeper and broker in whichever worker runs it, then waits: two tests,
# two workers, so both workers have processes to stop.
CHILD_TESTS_XDIST = textwrap.dedent('''
    import os, time
    import pytest
    from tests.harness.brokers import BrokerProcess
    from tests.harness.zookeeper import ZooKeeperServer

    @pytest.mark.parametrize("n", [0, 1])
    def test_start_and_wait(tmp_path, n):
        zk = ZooKeeperServer().start()
        broker = BrokerProcess(0, tmp_path / "b0", zk_connect=zk.connect).start()
        out = tmp_path.parent.parent.parent / f"pids-{n}"
        out.write_text(f"{os.getpid()} {zk.proc.pid} {broker.proc.pid}")
        time.sleep(600)
''')


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=lambda s: s.name)
def test_a_stopped_xdist_controller_leaves_no_worker_or_process_behind(tmp_path, zookeeper, sig):
    """pytest -n 2, each worker in a test with its own ZooKeeper and broker (started in the test's body,
    so no finalizer stops them); the signal goes to the controller only (the pytest that was started).
    SIGINT: pytest-xdist tells its workers to exit. SIGTERM and SIGKILL end the controller at once; each
    worker reads the end of its channel, and execnet SIGINTs it after 5 s and ``os._exit``s it 10 s later.
    Either way each worker ends, and its own watchdog (tests/harness/reaper.py, one per worker process)
    stops what it registered."""
    pytest.importorskip("xdist")
    (tmp_path / "test_child.py").write_text(CHILD_TESTS_XDIST)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "load",
         "--basetemp", str(tmp_path / "base"), str(tmp_path / "test_child.py")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    files = [tmp_path / "pids-0", tmp_path / "pids-1"]
    pids: list[int] = []
    try:
        wait_until(lambda: all(f.exists() and len(f.read_text().split()) == 3 for f in files), timeout=180,
                   what="both workers of the child pytest to start a ZooKeeper and a broker")
        pids = [int(x) for f in files for x in f.read_text().split()]
        workers = {pids[0], pids[3]}
        assert len(workers) == 2, f"both tests ran in one worker: {pids}"  # --dist load, a test each
        assert all(_alive(p) for p in pids)
        child.send_signal(sig)
        child.wait(timeout=120)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        names = ["worker", "ZooKeeper", "broker"] * 2
        left = [f"{name} {pid}" for name, pid in zip(names, pids) if _alive(pid)]
        assert not left, f"left behind after the controller got {sig.name}: {left}"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pid in pids:
            if _alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    os.kill(pid, signal.SIGKILL)
