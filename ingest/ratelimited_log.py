"""Rate-limited warnings: the first of each (client host, reason) is logged, repeats are counted.

A hostile or broken client can trigger the same refusal thousands of times a
second (150,000 fuzzed frames once wrote a 23.6 MB broker log). A
:class:`RateLimitedLog` logs the first occurrence of each ``(client host,
reason)`` pair at once, then counts repeats and writes at most one summary
line per ``interval_s`` for that pair::

    client 10.0.0.7:51234: request frame size -1 outside [2, 104857600] ...
    1742 more 'bad frame size' from 10.0.0.7 in the last 60 s (last: client 10.0.0.7:40022: ...)

Clients are grouped by host, not by ``host:port``: a fuzzer that reconnects
gets a new port each time. The number of distinct pairs tracked is bounded
(``max_keys``); beyond it, new pairs are counted under the host ``*``, so the
limiter's own memory is bounded too.

Thread-safety: every method may be called from any thread (one lock).
Summaries are written by the next call for the same pair after the interval
or by :meth:`flush`, which a periodic loop should call so that the count of a
burst that stopped still reaches the log; :func:`flush_all` flushes every live
limiter of the process (the broker's network threads call it, so the request
handlers' limiter needs no loop of its own). A process that stops calls
``flush_all(final=True)`` last: every count not yet written is written then,
whatever its interval, so no repeat goes uncounted.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable

_LIVE: "weakref.WeakSet[RateLimitedLog]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()

OTHER_CLIENTS = "*"
"""The host under which pairs are counted once ``max_keys`` pairs are tracked."""


def client_host(client: str) -> str:
    """``"10.0.0.7:51234"`` -> ``"10.0.0.7"``; ``"[::1]:5"`` -> ``"[::1]"``; no port -> unchanged."""
    host, sep, port = client.rpartition(":")
    return host if sep and port.isdigit() and host else client


@dataclass(slots=True)
class _Window:
    started: float          # when the current interval began (its first line was written)
    level: int
    suppressed: int = 0     # occurrences not written in this interval
    last: str = ""          # the last suppressed message, rendered


class RateLimitedLog:
    """Writes the first occurrence of each (client host, reason) and then counts.

    Args:
        logger: where lines go.
        interval_s: at most one line per (client host, reason) per interval.
        max_keys: bound on tracked pairs (memory bound against many source addresses).
        monotonic: a monotonic clock in seconds (a :class:`~ingest.clock.Clock`'s ``monotonic`` in tests).
    """

    def __init__(self, logger: logging.Logger, *, interval_s: float = 60.0, max_keys: int = 1024,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._now = monotonic
        self._windows: dict[tuple[str, str], _Window] = {}
        self._lock = threading.Lock()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def warning(self, client: str, reason: str, msg: str, *args: object, exc_info: bool = False) -> None:
        """``logger.warning(msg % args)`` unless ``(host of client, reason)`` was logged this interval."""
        self.log(logging.WARNING, client, reason, msg, *args, exc_info=exc_info)

    def log(self, level: int, client: str, reason: str, msg: str, *args: object, exc_info: bool = False) -> None:
        """Like :meth:`warning` at ``level``; ``reason`` is a short fixed label, not the message.
        ``exc_info``: the line that is written carries the current exception's traceback."""
        if not self.logger.isEnabledFor(level):
            return
        host = client_host(client)
        now = self._now()
        summary: tuple[int, str] | None = None
        with self._lock:
            key = (host, reason)
            window = self._windows.get(key)
            if window is None and len(self._windows) >= self.max_keys:
                key = (OTHER_CLIENTS, reason)
                window = self._windows.get(key)
            if window is not None and now - window.started < self.interval_s:
                window.suppressed += 1
                window.last = msg % args if args else msg
                return
            if window is not None and window.suppressed:
                summary = (window.suppressed, window.last)
            self._windows[key] = _Window(now, level)
        if summary is not None:
            self._summary(level, key, *summary)
        self.logger.log(level, msg, *args, exc_info=exc_info)

    def flush(self, final: bool = False) -> None:
        """Write the summary of every pair whose interval has ended, and forget quiet pairs;
        ``final``: of every pair that counted repeats, ended or not (the process stops)."""
        now = self._now()
        due: list[tuple[int, tuple[str, str], int, str, float]] = []
        with self._lock:
            for key, window in list(self._windows.items()):
                if now - window.started < self.interval_s and not (final and window.suppressed):
                    continue
                if window.suppressed:
                    due.append((window.level, key, window.suppressed, window.last,
                                min(self.interval_s, now - window.started)))
                    self._windows[key] = _Window(now, window.level)     # the next repeat stays counted, not logged
                else:
                    del self._windows[key]
        for level, key, count, last, span_s in due:
            self._summary(level, key, count, last, span_s)

    def _summary(self, level: int, key: tuple[str, str], count: int, last: str, span_s: float | None = None) -> None:
        host, reason = key
        who = "other clients" if host == OTHER_CLIENTS else host
        self.logger.log(level, "%d more '%s' from %s in the last %.0f s (last: %s)",
                        count, reason, who, self.interval_s if span_s is None else span_s, last)


def flush_all(final: bool = False) -> None:
    """:meth:`RateLimitedLog.flush` every limiter of this process that is still alive."""
    with _LIVE_LOCK:
        limiters = list(_LIVE)
    for limiter in limiters:
        limiter.flush(final)
