"""Thread names the OS shows (``/proc/PID/task/TID/comm``, ``top -H``, ``ps -L``), not only Python's.

Python names a thread for its own logs; the OS keeps the process's name for every thread unless the
thread names itself. Linux allows 15 bytes; a longer name is cut.
"""
from __future__ import annotations

import ctypes

_PR_SET_NAME = 15
_COMM_LEN = 15
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:   # no C library to ask: the OS keeps the process's name for the thread
    _libc = None


def set_native_name(name: str) -> None:
    """Name the calling thread for the OS: its first 15 bytes."""
    if _libc is not None:
        _libc.prctl(_PR_SET_NAME, name.encode()[:_COMM_LEN], 0, 0, 0)
