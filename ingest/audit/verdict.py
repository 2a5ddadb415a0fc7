"""The verdict of one audit run: its exit code and its one line, "nothing judged" included.

An audit whose range holds no judged window has checked nothing; it must not
say OK. Exit codes, first match wins (docs/operations.md, "The command line"):

* 3 (``EXIT_DATA_LOSS``): some row is DATA_LOSS, RETENTION_LOSS or CORRUPTION_LOSS;
* 4 (``EXIT_PROBLEMS``): some row is another problem status;
* 5 (``EXIT_NOTHING_JUDGED``): no window row of the range is judged (every window
  is PENDING, or the range holds no window with monitoring events or data);
* 0: every judged window is COMPLETE (later windows may still be PENDING).

:func:`nothing_judged_reason` names the cause in plain words: no window of the
range has closed yet; every window pending until a time; no monitoring events
nor data in the range; and, with any of these, a window size that differs from
the producers' (both sizes). Out-of-range and per-producer rows never count as a
judged window: they describe no window of the range.
"""
from __future__ import annotations

import logging
from typing import Iterable, Sequence

from ingest.audit.reconcile import EXIT_DATA_LOSS, EXIT_OK, EXIT_PROBLEMS, ROW_WINDOW
from ingest.audit.reconcile import exit_code as statuses_exit_code
from ingest.audit.status import LOSS_STATUSES
from ingest.audit.times import iso
from ingest.jobs_support import EXIT_NOTHING_JUDGED

log = logging.getLogger(__name__)

VERDICT_OK = "OK"
VERDICT_DATA_LOSS = "DATA_LOSS"
VERDICT_PROBLEMS = "PROBLEMS"
VERDICT_NOTHING_JUDGED = "NOTHING_JUDGED"
"""The ``status`` of the report's ``verdict`` row, per exit code."""

VERDICT_OF_EXIT = {EXIT_OK: VERDICT_OK, EXIT_DATA_LOSS: VERDICT_DATA_LOSS, EXIT_PROBLEMS: VERDICT_PROBLEMS,
                   EXIT_NOTHING_JUDGED: VERDICT_NOTHING_JUDGED}


def duration(ms: int) -> str:
    """``10 min``, ``1 h``, ``30 s``, ``90 s``: a window or grace length for a person."""
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _size_note(window_ms: int, producer_window_ms: Iterable[int]) -> str:
    sizes = sorted(set(producer_window_ms))
    if not sizes or sizes == [window_ms]:
        return ""
    named = ", ".join(f"{s} ms ({duration(s)})" for s in sizes)
    return (f"; the audit's window.ms is {window_ms} ms ({duration(window_ms)}) but the producers' monitoring "
            f"windows are {named}: set window.ms to {sizes[0]} to judge each producer window once it closes")


def nothing_judged_reason(
    rows: Sequence[dict], *, range_start_ms: int, range_end_ms: int, window_ms: int, grace_ms: int, now_ms: int,
    producer_window_ms: Iterable[int] = (),
) -> str | None:
    """Why no window of ``[range_start_ms, range_end_ms)`` was judged, or None when one was."""
    windows = [r for r in rows if r["row_type"] == ROW_WINDOW]
    if any(r["judged"] for r in windows):
        return None
    span = f"{iso(range_start_ms)} .. {iso(range_end_ms)} UTC"
    if windows:
        first = min(windows, key=lambda r: r["window_end_ms"])
        count = f"{len(windows)} topic window{'s' if len(windows) != 1 else ''}"
        why = (f"every window is still pending until {iso(first['window_end_ms'] + grace_ms)} UTC "
               f"({count} in {span}; a window is judged grace.ms={grace_ms} ({duration(grace_ms)}) after it ends)")
    elif range_start_ms + window_ms + grace_ms > now_ms:
        why = (f"no closed window in {span}: the first window is judged from "
               f"{iso(range_start_ms + window_ms + grace_ms)} UTC (its end + grace.ms={grace_ms})")
    else:
        why = f"no monitoring events and no loaded data in {span}"
    return why + _size_note(window_ms, producer_window_ms)


def exit_code(rows: Iterable[dict], nothing_judged: str | None) -> int:
    """3 > 4 > 5 > 0: loss, other problems, nothing judged, OK."""
    code = statuses_exit_code(rows)
    return EXIT_NOTHING_JUDGED if code == EXIT_OK and nothing_judged else code


def verdict_line(run) -> str:
    """``OK: ...``, ``DATA LOSS: ...``, ``PROBLEMS ...`` or ``NOTHING JUDGED: <why>``, with the exit code."""
    windows = [r for r in run.rows if r["row_type"] != "producer"]
    if run.exit_code == EXIT_NOTHING_JUDGED:
        return f"NOTHING JUDGED: {run.nothing_judged or 'no window of the range was judged'} (exit {run.exit_code})"
    if run.exit_code == EXIT_OK:
        judged = sum(1 for r in windows if r["row_type"] == ROW_WINDOW and r["judged"])
        return f"OK: every judged window is complete ({judged} judged)"
    lossy = [r for r in windows if r["status"] in LOSS_STATUSES]
    if lossy or any(r["status"] in LOSS_STATUSES for r in run.rows):
        loss = sum(r["missing"] for r in lossy)
        failed = sum(r["causes"].get("producer_failed", 0) for r in lossy)
        extra = f", {failed} failed sends never delivered" if failed else ""
        return f"DATA LOSS: {loss} acknowledged messages missing{extra} (exit {run.exit_code})"
    return f"PROBLEMS without loss (exit {run.exit_code})"
