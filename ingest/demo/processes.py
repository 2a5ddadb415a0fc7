"""Child processes of the demo: started in their own process groups, all stopped on exit.

Every child runs in a new session (``start_new_session``), so stopping it
with ``killpg`` also stops what it started (spark-submit's JVM and its Python
workers, the ZooKeeper JVM). :class:`Supervisor` stops everything in reverse
start order on ``close()``, which the demo calls from ``finally`` and from its
SIGINT/SIGTERM handler, so Ctrl-C leaves nothing running.

Concurrency: one thread (the demo's) starts and stops; ``close`` is idempotent.
A Ctrl-C or SIGTERM arriving while a child is being started is held back until
the child is recorded (:func:`signals_deferred`), so ``close`` always knows every
child that exists: interrupted in that window, the demo used to leave the child
running.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from ingest.errors import DemoError

log = logging.getLogger(__name__)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Supervisor:
    """Starts children with logs under ``log_dir``; stops them all on :meth:`close`."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = dict(os.environ if env is None else env)
        self.children: list[Child] = []
        self.closed = False

    def start(self, name: str, argv: Sequence[str], *, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as out, signals_deferred():
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=str(cwd) if cwd else None, env={**self.env, **(env or {})},
                                    start_new_session=True)
            child = Child(name, proc, log_path)
            self.children.append(child)
        log.debug("started %s (pid %d): %s", name, proc.pid, " ".join(argv))
        return child

    def run(self, name: str, argv: Sequence[str], *, timeout_s: float, cwd: Path | None = None,
            env: dict[str, str] | None = None, ok_codes: Sequence[int] = (0,)) -> Child:
        """Start and wait; DemoError naming the step and its log when the exit code is not ok."""
        child = self.start(name, argv, cwd=cwd, env=env)
        self.wait(child, timeout_s, ok_codes)
        return child

    def wait(self, child: Child, timeout_s: float, ok_codes: Sequence[int] = (0,)) -> int:
        try:
            code = child.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop(child)
            raise DemoError(f"{child.name} did not finish within {timeout_s:.0f}s; log: {child.log_path}") from None
        if code not in ok_codes:
            raise DemoError(f"{child.name} exited with {code}; log: {child.log_path}\n{child.tail(1500)}")
        return code

    def wait_port(self, child: Child, port: int, timeout_s: float = 60.0) -> None:
        """Until ``child`` accepts TCP on 127.0.0.1:port; DemoError if it dies or times out."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not child.alive():
                raise DemoError(f"{child.name} exited with {child.proc.returncode} while starting; "
                                f"log: {child.log_path}\n{child.tail(1500)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise DemoError(f"{child.name} not listening on port {port} after {timeout_s:.0f}s; "
                                    f"log: {child.log_path}") from None
                time.sleep(0.1)

    def stop(self, child: Child, grace_s: float = 15.0) -> None:
        """SIGTERM the child's process group, SIGKILL it after ``grace_s``."""
        if child.alive():
            _signal_group(child.proc.pid, signal.SIGTERM)
            try:
                child.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs: SIGKILL", child.name, grace_s)
                _signal_group(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        # the leader may be gone while the group lives on (e.g. a JVM left by spark-submit)
        _signal_group(child.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop every child, newest first. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for child in reversed(self.children):
            try:
                self.stop(child)
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                log.warning("stopping %s: %s", child.name, exc)


DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back for the block; re-raise the first one after it.

    A Python-level handler that only notes the signal, rather than blocking it
    with ``pthread_sigmask``: a blocked mask is inherited across ``fork``/``exec``,
    so children started inside the block would ignore the SIGTERM that stops them.
    Python runs signal handlers in the main thread only, so elsewhere nothing can
    interrupt the block and nothing needs deferring.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous: dict[int, object] = {}
    try:
        for sig in DEFERRED_SIGNALS:  # one by one: an interrupt midway still restores those swapped
            previous[sig] = signal.signal(sig, lambda signum, _frame: pending.append(signum))
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if pending:
            log.debug("delivering signal %d held back while a child started", pending[0])
            signal.raise_signal(pending[0])


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
