"""Fault injection for the crash tests: named points where the driver kills itself.

Set ``INGEST_CRASH_AT`` to a comma-separated list of point names; when the driver
reaches one it sends itself SIGKILL (no cleanup, no ``finally``, no atexit: exactly
what an OOM kill or a lost node does). Points, in commit order:

``before-manifest``  every task succeeded, files are in staging, no manifest yet
``after-manifest``   the manifest is committed (the commit point), nothing published
``mid-publish``      the first file of a manifest is published, the rest are not
``after-publish``    every file is in place, the ``.published`` marker is not written
``before-gc``        marker written; staging not yet removed, run record not yet final

``INGEST_FAIL_FIRST_ATTEMPT=1`` makes every Spark task fail on its first attempt
after writing part of its output to staging (so retries must not duplicate).
``INGEST_SLOW_FIRST_ATTEMPT_MS=N`` makes the first attempt of task 0 sleep N ms
after staging its files: an outlier against the other tasks' median runtime, so
Spark's speculation launches a second attempt that finishes first (proves
speculative copies never duplicate or add files).
Never set these in production; they exist to prove the commit protocol.
"""
from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

CRASH_ENV = "INGEST_CRASH_AT"
FAIL_FIRST_ATTEMPT_ENV = "INGEST_FAIL_FIRST_ATTEMPT"
SLOW_FIRST_ATTEMPT_ENV = "INGEST_SLOW_FIRST_ATTEMPT_MS"
CRASH_POINTS = ("before-manifest", "after-manifest", "mid-publish", "after-publish", "before-gc")


def crash_point(name: str) -> None:
    """SIGKILL this process if ``name`` is listed in ``INGEST_CRASH_AT``."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}; known: {', '.join(CRASH_POINTS)}")
    wanted = os.environ.get(CRASH_ENV, "")
    if wanted and name in {p.strip() for p in wanted.split(",")}:
        log.warning("fault injection: SIGKILL at %s (%s=%s)", name, CRASH_ENV, wanted)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def fail_first_attempt() -> bool:
    return os.environ.get(FAIL_FIRST_ATTEMPT_ENV, "") in ("1", "true", "yes")


def slow_first_attempt_ms() -> int:
    """Milliseconds a first attempt lingers after staging (0 = off)."""
    raw = os.environ.get(SLOW_FIRST_ATTEMPT_ENV, "").strip()
    return int(raw) if raw.isdigit() else 0
