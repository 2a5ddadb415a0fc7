"""Polling with a deadline: tests wait for a condition, never for a fixed time."""
from __future__ import annotations

import time
from typing import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.05):
    """Poll until ``predicate()`` is truthy; return its value, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
