"""Injectable time: logic takes a :class:`Clock`, tests pass a :class:`FakeClock`.

No module outside this one calls ``time.time()`` for decisions (retention,
flush intervals, monitoring windows, audit grace); they ask the clock they
were given.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock milliseconds, a monotonic reading, and sleep."""

    def time_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to. Thread-safe.

    ``sleep`` advances the clock instead of blocking, so code that waits on a
    clock runs instantly under test. It advances by whole milliseconds, rounded up
    as a real sleep never ends early: a wait loop whose remainder is a fraction of a
    millisecond (float seconds from millisecond readings) must still reach its deadline.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = start_ms
        self._lock = threading.Lock()

    def time_ms(self) -> int:
        with self._lock:
            return self._ms

    def monotonic(self) -> float:
        with self._lock:
            return self._ms / 1000.0

    def sleep(self, seconds: float) -> None:
        self.advance(math.ceil(round(seconds * 1000, 6)))   # round(): 1.1 s is 1100 ms, not 1101

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds; returns the new time."""
        if ms < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance by {ms} ms)")
        with self._lock:
            self._ms += ms
            return self._ms

    def set(self, ms: int) -> None:
        with self._lock:
            self._ms = ms


SYSTEM_CLOCK = SystemClock()
