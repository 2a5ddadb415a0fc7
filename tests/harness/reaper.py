"""Stop the test suite's processes even when pytest itself is killed.

Fixture finalizers stop every process a test starts, and Ctrl-C runs them too. A pytest that
is SIGKILLed (or SIGTERMed: Python's default action runs no finalizer) cannot, and its ZooKeeper,
brokers, registry and mirrors used to live on as orphans. So every process the harness starts is
also registered here: ``watch(proc)`` appends ``pid starttime`` to a file named after the pytest
process, and a small watchdog process (started on the first registration, in its own session so a
Ctrl-C of the terminal does not reach it) polls that pytest is alive. When pytest is gone, the
watchdog sends SIGTERM, then SIGKILL after 5 s, to every registered process still running (its
process group when it leads one) and exits. ``forget(proc)`` after a normal stop keeps the file
short. The start time (``/proc/<pid>/stat`` field 22) guards against a reused pid.

Run as ``python -m tests.harness.reaper PYTEST_PID FILE`` (the watchdog); tests import
:func:`watch` and :func:`forget`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

_lock = threading.Lock()
_file: str | None = None
_POLL_S = 0.5
_GRACE_S = 5.0


def _starttime(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 (fields after the command name start at 3)


def _registry() -> str:
    global _file
    with _lock:
        if _file is None:
            _file = os.path.join(tempfile.gettempdir(), f"ingest-test-reaper-{os.getpid()}.pids")
            open(_file, "a").close()
            subprocess.Popen([sys.executable, "-m", "tests.harness.reaper", str(os.getpid()), _file],
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        return _file


def watch(proc) -> None:
    """Register a started ``subprocess.Popen`` (or a pid) to be stopped if pytest dies."""
    pid = proc if isinstance(proc, int) else proc.pid
    start = _starttime(pid)
    if start is None:
        return
    path = _registry()
    with _lock, open(path, "a") as f:
        f.write(f"+ {pid} {start}\n")


def forget(proc) -> None:
    """The process was stopped normally: the watchdog need not look at it again."""
    if _file is None:
        return
    pid = proc if isinstance(proc, int) else proc.pid
    with _lock, open(_file, "a") as f:
        f.write(f"- {pid}\n")


def _alive_registered(path: str) -> dict[int, str]:
    live: dict[int, str] = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "+":
                    live[int(parts[1])] = parts[2]
                elif len(parts) == 2 and parts[0] == "-":
                    live.pop(int(parts[1]), None)
    except OSError:
        pass
    return {pid: st for pid, st in live.items() if _starttime(pid) == st}


def _signal_all(procs: dict[int, str], sig: int) -> None:
    for pid, start in procs.items():
        if _starttime(pid) != start:
            continue
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except OSError:
            pass


def _watchdog(pytest_pid: int, path: str) -> None:
    pytest_start = _starttime(pytest_pid)
    while _starttime(pytest_pid) == pytest_start and pytest_start is not None:
        time.sleep(_POLL_S)
    procs = _alive_registered(path)
    if procs:
        _signal_all(procs, signal.SIGTERM)
        deadline = time.monotonic() + _GRACE_S
        while time.monotonic() < deadline and _alive_registered(path):
            time.sleep(0.1)
        _signal_all(_alive_registered(path), signal.SIGKILL)
    try:
        os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    _watchdog(int(sys.argv[1]), sys.argv[2])
