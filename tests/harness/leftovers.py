"""Processes a benchmark or tool left behind: the check its tests make after it exits or is interrupted.

A process counts as alive until it is reaped or a zombie (a zombie holds no port, memory or file).
"""
from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` runs (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def running_from(marker: str) -> list[str]:
    """``pid: command line`` of each live process whose command line contains ``marker`` (a temporary
    directory's prefix, say)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and alive(int(entry)):
            found.append(f"{entry}: {cmd[:200]}")
    return found
