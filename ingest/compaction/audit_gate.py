"""Which hours an audit report judged complete (compaction touches only those).

An hour of a topic qualifies when the report's window rows of that topic
cover the whole hour (a report whose range starts mid-hour proves nothing about
the hour's first minutes) and every one of them is in :data:`OK_STATUSES`.
Rows of other types (per producer, out of range) do not count. Reports are read as the audit writes them: a JSON
document with a ``windows`` list, or JSON lines with one window per line.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

from ingest.errors import ConfigError

log = logging.getLogger(__name__)

OK_STATUSES = frozenset({"COMPLETE"})
HOUR_MS = 3_600_000
DEFAULT_WINDOW_MS = 600_000
_START_KEYS = ("window_start_ms", "start_ms", "window_start")


def _windows(path: str) -> Iterator[dict]:
    p = Path(path)
    if p.is_dir():
        p = next((c for c in (p / "report.json", p / "windows.jsonl", p / "report.jsonl") if c.exists()), p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read audit report {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text)
    except ValueError:  # JSON lines, what jobs/audit.py writes
        for line in text.splitlines():
            if line.strip():
                yield json.loads(line)
        return
    if isinstance(doc, dict) and ("windows" in doc or "rows" in doc):
        yield from doc.get("windows", doc.get("rows", []))
    elif isinstance(doc, dict):
        yield doc  # a one-line JSON-lines report
    else:
        yield from doc


def _start_ms(w: dict) -> int:
    for key in _START_KEYS:
        if key in w and w[key] is not None:
            value = w[key]
            if isinstance(value, str):
                t = datetime.fromisoformat(value.replace("Z", "+00:00"))
                return int(t.replace(tzinfo=t.tzinfo or timezone.utc).timestamp() * 1000)
            return int(value)
    raise ConfigError(f"audit report window has none of {_START_KEYS}: {str(w)[:200]}")


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
        for w in _windows(path):
            if w.get("row_type", "window") != "window":
                continue
            start = _start_ms(w)
            end = int(w.get("window_end_ms") or start + DEFAULT_WINDOW_MS)
            t = datetime.fromtimestamp(start / 1000, tz=timezone.utc)
            key = (w["topic"], t.strftime("%Y-%m-%d"), t.hour)
            ok = str(w.get("status", "")).upper() in OK_STATUSES
            verdict[key] = verdict.get(key, True) and ok
            covered.setdefault(key, set()).add((start, end))
    good = {k for k, ok in verdict.items() if ok and _covers_hour(covered[k])}
    log.info("audit report(s) judge %d of %d hour(s) complete", len(good), len(verdict))
    return good


def report_range(paths: Iterable[str]) -> tuple[int, int] | None:
    """[first window start, last window end) over the reports' window rows, or None when empty."""
    lo = hi = None
    for path in paths:
        for w in _windows(path):
            if w.get("row_type", "window") != "window":
                continue
            start = _start_ms(w)
            end = int(w.get("window_end_ms") or start + DEFAULT_WINDOW_MS)
            lo = start if lo is None else min(lo, start)
            hi = end if hi is None else max(hi, end)
    return None if lo is None else (lo, hi)
