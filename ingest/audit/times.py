"""Window edges as text, the same way in the summary, the JSON verdict and the HTML report (UTC).

A grid of windows needs one label format for every column: whole minutes
(``2026-11-22 10:20``) when every edge is on a minute, else seconds for every
column (``2026-11-22 10:20:30``), never a mix.
"""
from __future__ import annotations

from datetime import datetime, timezone

MINUTE_MS = 60_000
MINUTES = "%Y-%m-%d %H:%M"
SECONDS = "%Y-%m-%d %H:%M:%S"


def iso(ms: int | None) -> str:
    """``2026-11-22 10:20`` (UTC) for a window edge, with seconds when the edge is not on a
    whole minute (sub-minute windows must not print identical labels); ``-`` for None."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime(MINUTES if ms % MINUTE_MS == 0 else SECONDS)


def grid_format(first_ms: int, window_ms: int) -> str:
    """The one strftime format for every column of a grid starting at ``first_ms`` every ``window_ms``."""
    return MINUTES if first_ms % MINUTE_MS == 0 and window_ms % MINUTE_MS == 0 else SECONDS


def label(ms: int, fmt: str) -> str:
    """A window edge in the grid's format (:func:`grid_format`)."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime(fmt)
