"""What every side-by-side benchmark run shares: the machine, the payloads, and stopping on a signal.

SIGINT, SIGTERM and SIGHUP become a :class:`Stop` exception, so that a run unwinds through the
``finally`` blocks that stop its servers whichever way it is interrupted (a shell starts background
jobs with SIGINT ignored, and Python then raises no KeyboardInterrupt). While servers are being
stopped, :func:`stopping_servers` holds the signals back: a second Ctrl-C must not cut a stop short;
what arrived meanwhile is in :data:`deferred`, for the caller to raise once the stop is done.
"""
from __future__ import annotations

import os
import platform
import signal
import struct
from pathlib import Path

PAYLOAD_SIZE = 200
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: signals received while :func:`stopping_servers` ran, oldest first
deferred: list[int] = []


class Stop(Exception):
    """SIGINT, SIGTERM or SIGHUP received: unwind through the finally blocks that stop the servers."""


def _on_signal(signum, frame):
    raise Stop(f"signal {signum}")


def _defer_signal(signum, frame):
    deferred.append(signum)


def stop_on_signals() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP raise :class:`Stop` in the main thread."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)


def stopping_servers(stop):
    """Run ``stop()`` with the stop signals held back (a second Ctrl-C must not cut a stop short)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _defer_signal)
    try:
        return stop()
    finally:
        stop_on_signals()


def raise_deferred(what: str) -> None:
    """Raise :class:`Stop` for a signal that arrived while ``what`` was being stopped."""
    if deferred:
        raise Stop(f"signal {deferred[0]} (while stopping {what})")


def machine() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                          if ln.startswith("MemTotal")))
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {"nproc": os.cpu_count(), "cpu": model, "ram_gb": round(mem_kb / 1024 ** 2, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def payloads(count: int) -> list[bytes]:
    """``count`` distinct 200-byte payloads: an 8-byte sequence number and 192 random bytes."""
    base = os.urandom(PAYLOAD_SIZE * 64)
    rest = PAYLOAD_SIZE - 8
    pack = struct.Struct(">Q").pack
    return [pack(i) + base[(i % 64) * PAYLOAD_SIZE:(i % 64) * PAYLOAD_SIZE + rest] for i in range(count)]
