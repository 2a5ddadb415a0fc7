"""Processes a benchmark or tool left behind: the check its tests make after it exits or is interrupted.

A process counts as alive until it is reaped or a zombie (a zombie holds no port, memory or file).

The check looks at the test's own processes only: the test runs the tool with ``TMPDIR`` set to a
directory of its own (:func:`own_tmpdir_env`), so every working directory the tool makes lies under it,
and :func:`running_from` looks for that directory in command lines. A marker shared by every run of the
tool (its ``mkdtemp`` prefix) would also find the processes of another pytest worker or another session
running the same tool at the same time, and blame this test for them.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest


def alive(pid: int) -> bool:
    """True while ``pid`` runs (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def own_tmp():
    """A temporary directory of the test's own, for :func:`own_tmpdir_env`: in the system's temporary
    directory rather than under ``tmp_path``, whose ``pytest-of-<user>`` parent (mode 0700) the peers'
    servers that run as another user (RabbitMQ as ``rabbitmq``) cannot reach. Removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="ingest-own-tmp-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def own_tmpdir_env(tmp: Path, env: dict | None = None) -> dict:
    """``env`` (default: this process's environment) with ``TMPDIR`` set to ``tmp``, the test's own
    directory: the temporary directories of the tool run with it are made under ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    return {**(os.environ if env is None else env), "TMPDIR": str(tmp)}


def running_from(marker: str | Path) -> list[str]:
    """``pid: command line`` of each live process whose command line contains ``marker``: the test's own
    ``TMPDIR`` (:func:`own_tmpdir_env`), never a name other runs share."""
    marker = str(marker)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # the reaper's watchdog of a finished tool (its pid file is in the same TMPDIR) exits on its next poll
        if marker in cmd and "tests.harness.reaper" not in cmd and alive(int(entry)):
            found.append(f"{entry}: {cmd[:200]}")
    return found
