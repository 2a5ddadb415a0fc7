"""Real ``ingest mirror`` processes for tests (like tests/harness/brokers.py for brokers).

``MirrorProcess(workdir, props).start()`` writes ``mirror.properties``, runs
``python -m ingest.cli mirror --config ...`` in its own process group (PYTHONPATH = this
checkout) and returns once it printed its ``mirror ... running`` line. ``stop()`` = SIGTERM
and wait (returns the exit code), ``kill()`` = SIGKILL and reap. Output in ``output_path``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.harness import reaper

REPO_ROOT = Path(__file__).resolve().parents[2]


class MirrorProcess:
    def __init__(self, workdir: str | Path, props: dict[str, Any], name: str = "mirror") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.props = dict(props)
        self.config_path = self.workdir / f"{name}.properties"
        self.output_path = self.workdir / f"{name}.out"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, wait: bool = True, timeout: float = 30.0) -> "MirrorProcess":
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        before = len(self.output())
        with open(self.output_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ingest.cli", "mirror", "--config", str(self.config_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO_ROOT), env=env,
                start_new_session=True)
            reaper.watch(self.proc)  # stopped even if pytest itself is killed
        self.starts += 1
        if wait:
            deadline = time.monotonic() + timeout
            while " running in group " not in self.output()[before:]:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mirror exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"mirror not running after {timeout}s:\n{self.output()[-3000:]}")
                time.sleep(0.05)
        return self

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise RuntimeError(f"mirror ignored SIGTERM for {timeout}s:\n{self.output()[-3000:]}")
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
