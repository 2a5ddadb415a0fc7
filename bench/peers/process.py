"""Server processes of the peer benchmark: start, find by PID, CPU time from /proc, stop by PID.

Every server the benchmark starts (RabbitMQ's ``beam.smp`` and its own ``epmd``, ActiveMQ's
``java``) is launched with ``subprocess.Popen`` in its own session, registered with
``tests.harness.reaper`` (stopped even if the benchmark process is killed), and stopped by PID:
SIGTERM to the PIDs it owns, SIGKILL to whatever of them still runs after a grace period. No
process is ever looked up or signalled by name. ``ServerGroup.stop_all`` runs on normal exit, on
exceptions (``try/finally``) and on SIGINT/SIGTERM (the benchmark turns them into an exception).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.harness import reaper

log = logging.getLogger(__name__)

CLK_TCK = os.sysconf("SC_CLK_TCK")


class PeerStartError(RuntimeError):
    """A peer server exited or did not listen in time; the message carries the tail of its output."""


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one live process (0.0 once it is gone)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (children, grandchildren, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def wait_listening(port: int, proc: subprocess.Popen, timeout: float, output: Path) -> None:
    """Return once 127.0.0.1:``port`` accepts a TCP connection; raise if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerStartError(f"exited with {proc.returncode} before listening on {port}: "
                                 f"{tail(output)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise PeerStartError(f"not listening on 127.0.0.1:{port} after {timeout:.0f} s: {tail(output)}")


def tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no output)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerGroup:
    """The processes one server consists of, stopped by PID in the order they were added."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.procs: list[subprocess.Popen] = []
        self.pids: list[int] = []  # every PID this server owns, main process first

    def popen(self, argv: list[str], output: Path, env: dict | None = None, cwd: str | None = None
              ) -> subprocess.Popen:
        out = open(output, "ab")
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd, start_new_session=True)
        finally:
            out.close()
        reaper.watch(proc)
        self.procs.append(proc)
        return proc

    def adopt(self, pid: int) -> None:
        """Own ``pid`` (a descendant found after start): it is signalled and waited for at stop."""
        if pid not in self.pids:
            reaper.watch(pid)
            self.pids.append(pid)

    def cpu_seconds(self) -> float:
        """CPU seconds of the server's main processes (the ones that do the work)."""
        return sum(cpu_seconds(pid) for pid in self.pids)

    def stop(self, grace: float = 20.0) -> list[int]:
        """Stop the owned PIDs one by one, in order: SIGTERM, then SIGKILL after ``grace`` s.

        The main process comes first, so that its own helpers end with it; whatever is still
        alive by its turn is signalled too. Returns the PIDs that needed SIGKILL.
        """
        targets = list(dict.fromkeys(self.pids + [p.pid for p in self.procs]))
        killed = []
        for pid in targets:
            if not alive(pid):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + grace
            while alive(pid) and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.1)
            if alive(pid):
                log.warning("%s: pid %d still alive %.0f s after SIGTERM; SIGKILL", self.name, pid, grace)
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return killed

    def _reap(self) -> None:
        for proc in self.procs:
            proc.poll()

    def leftovers(self) -> list[int]:
        """Owned PIDs still alive (should be empty after ``stop``)."""
        return [p for p in self.pids + [p.pid for p in self.procs] if alive(p)]
