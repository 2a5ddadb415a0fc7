"""Real resource limits for fault tests: a descriptor limit, and a small tmpfs that runs full.

Both undo themselves: the limit is restored, the tmpfs unmounted (lazily, so a
process that still holds a file there cannot keep it mounted).
"""
from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def nofile(n: int) -> Iterator[None]:
    """Lower this process's soft RLIMIT_NOFILE to ``n`` (children started inside inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. ``"4m"``) mounted at ``mountpoint``; skips the test without root or mount."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mountpoint.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
