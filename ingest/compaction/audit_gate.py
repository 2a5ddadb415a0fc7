"""Which hours an audit verdict judged complete (compaction touches only those).

An hour of a topic qualifies when the verdict's window rows of that topic
cover the whole hour (a report whose range starts mid-hour proves nothing about
the hour's first minutes) and every one of them is in
:data:`~ingest.audit.status.COMPACTABLE_STATUSES`. Rows of other types (per
producer, out of range) do not count.

A verdict source is either a report file (parsed by
:mod:`ingest.audit.report_reader`) or an audit revision under
``<destination>/_audit/revisions/`` (a ``.revision`` storage path, or ``.parquet`` for
revisions written before the rename, read by
:mod:`ingest.audit.history`; ``jobs/compact.py --audit-run`` resolves a run id
to one). The revision is how the Airflow DAG passes the verdict: it lives in
the destination's storage, so it reaches compaction whether or not the audit's
Spark driver ran on the Airflow worker.
"""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Iterable, Iterator

from ingest.audit.history import is_revision_path, read_revision
from ingest.audit.report_reader import read_report
from ingest.audit.status import COMPACTABLE_STATUSES
from ingest.errors import ConfigError

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
DEFAULT_WINDOW_MS = 600_000


def _windows(source: str) -> Iterator[tuple[dict, int, int]]:
    """(row, start_ms, end_ms) of the window rows of one verdict source."""
    rows = read_revision(source) if is_revision_path(source) else read_report(source)
    for w in rows:
        if w.get("row_type", "window") != "window":
            continue
        start = w.get("window_start_ms")
        if start is None:
            raise ConfigError(f"audit report {source}: a window row has no window_start_ms: {str(w)[:200]}")
        start = int(start)
        yield w, start, int(w.get("window_end_ms") or start + DEFAULT_WINDOW_MS)


def _covers_hour(spans: set[tuple[int, int]]) -> bool:
    """True when the windows tile their hour with no gap."""
    ordered = sorted(spans)
    first = ordered[0][0] - ordered[0][0] % HOUR_MS
    edge = first
    for start, end in ordered:
        if start > edge:
            return False
        edge = max(edge, end)
    return edge >= first + HOUR_MS


def complete_hours(paths: Iterable[str]) -> set[tuple[str, str, int]]:
    """``{(topic, 'YYYY-MM-DD', hour)}`` of hours whose windows all are in the report and complete."""
    verdict: dict[tuple[str, str, int], bool] = {}
    covered: dict[tuple[str, str, int], set[tuple[int, int]]] = {}
    for path in paths:
        for w, start, end in _windows(path):
            t = datetime.fromtimestamp(start / 1000, tz=timezone.utc)
            key = (w["topic"], t.strftime("%Y-%m-%d"), t.hour)
            ok = str(w.get("status", "")).upper() in COMPACTABLE_STATUSES
            verdict[key] = verdict.get(key, True) and ok
            covered.setdefault(key, set()).add((start, end))
    good = {k for k, ok in verdict.items() if ok and _covers_hour(covered[k])}
    log.info("audit report(s) judge %d of %d hour(s) complete", len(good), len(verdict))
    return good


def report_range(paths: Iterable[str]) -> tuple[int, int] | None:
    """[first window start, last window end) over the reports' window rows, or None when empty."""
    lo = hi = None
    for path in paths:
        for _, start, end in _windows(path):
            lo = start if lo is None else min(lo, start)
            hi = end if hi is None else max(hi, end)
    return None if lo is None else (lo, hi)
