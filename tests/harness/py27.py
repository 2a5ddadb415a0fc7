"""Real Kafka 0.7 client libraries run under Python 2.7, as subprocesses of the tests.

``.venv-py27`` (built by ``scripts/py27_env.sh``, which ``scripts/bootstrap.sh`` runs) holds
samsa and brod at the versions pinned in ``tests/kafka07/requirements-py27*.txt``.
:func:`interpreter` returns its python, building the venv first when it is missing or stale;
it raises :class:`Py27Unavailable` only when this machine has no Python 2.7 interpreter at all
(the script's exit code 3), and the kafka07 tests then skip with that reason.

The drivers under ``tests/kafka07/drivers/`` take a JSON list of operations on stdin and print
a JSON list of results: :func:`run_ops`. The balanced consumer is a long-lived process spoken
to line by line: :class:`Py27Process`. Every process is registered with the reaper and
stopped at the end of the test (or when pytest dies).
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.harness import reaper

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV = REPO_ROOT / ".venv-py27"
ENV_SCRIPT = REPO_ROOT / "scripts" / "py27_env.sh"
DRIVERS = REPO_ROOT / "tests" / "kafka07" / "drivers"
NO_INTERPRETER = 3          # py27_env.sh's exit code when no 2.7 interpreter exists

_lock = threading.Lock()


class Py27Unavailable(RuntimeError):
    """No Python 2.7 interpreter on this machine, so the 0.7 client venv cannot be installed."""


def interpreter(env: dict[str, str] | None = None) -> Path:
    """The venv's python (built or refreshed by scripts/py27_env.sh when needed; ``env`` for that script)."""
    with _lock:
        proc = subprocess.run(["bash", str(ENV_SCRIPT)], capture_output=True, text=True, timeout=600,
                              env=env)
        if proc.returncode == NO_INTERPRETER:
            raise Py27Unavailable("no Python 2.7 interpreter on this machine, so the Kafka 0.7 clients "
                                  f"(.venv-py27) cannot be installed: {proc.stderr.strip()}")
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/py27_env.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return VENV / "bin" / "python"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_ops(python: Path, driver: str, ops: list[dict[str, Any]], timeout: float = 60.0) -> list[Any]:
    """Run ``ops`` through ``drivers/<driver>``; the list of per-operation results."""
    proc = subprocess.Popen([str(python), str(DRIVERS / driver)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=str(DRIVERS))
    reaper.watch(proc)
    try:
        out, err = proc.communicate(json.dumps(ops).encode(), timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reaper.forget(proc)
    if proc.returncode != 0:
        raise AssertionError(f"{driver} exited {proc.returncode}:\n{err.decode(errors='replace')[-3000:]}")
    return json.loads(out)


class Py27Process:
    """A long-lived driver: JSON lines in (``send``), JSON lines out (``read``)."""

    def __init__(self, python: Path, driver: str, *args: str) -> None:
        self.proc = subprocess.Popen([str(python), str(DRIVERS / driver), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
                                     cwd=str(DRIVERS), bufsize=0)
        reaper.watch(self.proc)
        self._lines: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._stderr: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr), daemon=True).start()

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            with self._cond:
                self._lines.append(json.loads(raw))
                self._cond.notify_all()
        with self._cond:
            self._lines.append({"eof": self.proc.wait()})
            self._cond.notify_all()

    def send(self, obj: dict[str, Any]) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())

    def read(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next line the driver printed (AssertionError with its stderr if none comes)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._lines, timeout):
                raise AssertionError(f"no output from the 0.7 driver within {timeout}s:\n{self.stderr()}")
            line = self._lines.pop(0)
        if "eof" in line:
            raise AssertionError(f"the 0.7 driver exited ({line['eof']}):\n{self.stderr()}")
        return line

    def drain(self) -> list[dict[str, Any]]:
        """Every line printed and not yet read, without waiting."""
        with self._cond:
            lines, self._lines = self._lines, []
        return lines

    def stderr(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        reaper.forget(self.proc)
