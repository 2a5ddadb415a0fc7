"""The one parser of audit report files: JSON lines or one JSON document, back to report rows.

Read by ``ingest audit show --report``, compaction's gate and the Airflow DAG
support. Accepted forms (what ``jobs/audit.py --report`` writes, and what
hand-written or older reports hold):

* JSON lines, one row object per line (``report_json.write_json_lines``);
* one JSON document: ``{"windows": [...]}``, ``{"rows": [...]}``, a list of
  rows, or a single row object;
* a directory holding ``report.json``, ``windows.jsonl`` or ``report.jsonl``.

Every row must be an object with a ``status``. ``window_start_ms`` is filled
from the older names ``start_ms`` / ``window_start`` (epoch ms or ISO 8601,
UTC when no zone) when absent, so callers read one name. Revisions under
``<destination>/_audit/`` are Parquet and are read by ``history``.

Only the standard library and ``ingest.errors`` are imported: the Airflow
DAG support loads this module from the project checkout in the Airflow venv.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from ingest.errors import ConfigError

REPORT_NAMES = ("report.json", "windows.jsonl", "report.jsonl")
"""Files looked for, in this order, when a report path is a directory."""

START_ALIASES = ("start_ms", "window_start")


def read_report(path: str | Path) -> list[dict]:
    """The rows of the report at ``path`` (a file, or a directory holding one of :data:`REPORT_NAMES`).

    Raises:
        ConfigError: the file cannot be read, or is not an audit report (naming the file and line).
    """
    p = Path(path)
    if p.is_dir():
        p = next((c for c in (p / n for n in REPORT_NAMES) if c.exists()), p)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read audit report {path}: {exc.strerror or exc}") from exc
    return parse_report(text, source=str(p))


def parse_report(text: str, *, source: str = "report") -> list[dict]:
    """Rows of a report's text (see the module docstring for the forms).

    Raises:
        ConfigError: a line or document is not a row object with a ``status``.
    """
    try:
        doc = json.loads(text)
    except ValueError:  # JSON lines
        rows = [_line_row(line, n, source) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    else:
        if isinstance(doc, dict) and ("windows" in doc or "rows" in doc):
            rows = doc.get("windows", doc.get("rows"))
        elif isinstance(doc, dict):
            rows = [doc]  # a one-line JSON-lines report
        else:
            rows = doc
        if not isinstance(rows, list):
            raise ConfigError(f"{source} is not an audit report: expected JSON lines written by "
                              f"jobs/audit.py --report or a JSON list of rows, got {type(rows).__name__}")
        for n, row in enumerate(rows, start=1):
            _check(row, f"{source} row {n}", str(row)[:60])
    return [_normalised(r, source) for r in rows]


def _line_row(line: str, n: int, source: str) -> dict:
    try:
        row = json.loads(line)
    except ValueError:
        row = None
    _check(row, f"{source} line {n}", line[:60])
    return row


def _check(row, where: str, shown: str) -> None:
    if not isinstance(row, dict) or "status" not in row:
        raise ConfigError(f"{where} is not an audit report row (JSON objects with a status, as written by "
                          f"jobs/audit.py --report, are expected): {shown!r}")


def _normalised(row: dict, source: str) -> dict:
    if row.get("window_start_ms") is not None:
        return row
    for key in START_ALIASES:
        value = row.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            try:
                t = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError as exc:
                raise ConfigError(f"{source}: {key}={value!r} is not a time: allowed are epoch ms or "
                                  f"ISO 8601 such as 2026-11-22T10:00:00Z") from exc
            value = int(t.replace(tzinfo=t.tzinfo or timezone.utc).timestamp() * 1000)
        return {**row, "window_start_ms": int(value)}
    return row
