"""One compaction run: recover, pick hours, compact each (locally or as Spark tasks), summarise.

Shared by ``ingest compaction run`` (in-process) and ``jobs/compact.py``
(one Spark task per hour). Hours are independent, so a task failure leaves
other hours compacted and the failed hour untouched or rolled forward by the
next run.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.compaction.audit_gate import complete_hours
from ingest.compaction.compact import HourRef, Outcome, Settings, compact_hour, discover_hours, select_hours
from ingest.compaction.replace import Replacer
from ingest.errors import ConfigError

log = logging.getLogger(__name__)

MapFn = Callable[[Callable[[HourRef], dict], Sequence[HourRef]], list[dict]]


def parse_time_ms(text: str) -> int:
    """``2026-11-22T03:00``, ``2026-11-22T03:00:00+00:00``, a date, or epoch ms; UTC when no zone."""
    text = str(text).strip()
    if text.isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"invalid time {text!r}: allowed is ISO-8601 (2026-11-22T03:00[:00][+00:00]) or epoch ms") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def local_map(fn: Callable[[HourRef], dict], hours: Sequence[HourRef]) -> list[dict]:
    out = []
    for i, hour in enumerate(hours, 1):
        log.info("compacting hour %d/%d: %s", i, len(hours), hour)
        out.append(fn(hour))
    return out


def run(config: Any, *, start_ms: int | None = None, end_ms: int | None = None,
        topics: Iterable[str] = (), audit_reports: Sequence[str] = (),
        clock: Clock = SYSTEM_CLOCK, map_fn: MapFn = local_map) -> list[dict]:
    """Compact the qualifying hours of ``config["destination"]``; returns one outcome dict per hour seen."""
    from ingest.storage import open_storage

    settings = Settings.from_config(config)
    storage = open_storage(settings.destination)
    fixed = Replacer(storage, clock).recover()
    if fixed:
        log.info("recovered %d interrupted compaction(s)", fixed)
    wanted = tuple(topics) or tuple(config["compaction.topics"])
    hours = discover_hours(storage, wanted, start_ms, end_ms)
    complete = None
    if config["compaction.require.audit"]:
        if not audit_reports:
            raise ConfigError("compaction.require.audit=true but no --audit-report given: pass the audit "
                              "report(s) of these hours, or --set compaction.require.audit=false")
        complete = complete_hours(audit_reports)
    todo, skipped = select_hours(hours, complete)
    uri = settings.destination

    def task(hour: HourRef) -> dict:
        from ingest.storage import open_storage as _open

        return compact_hour(_open(uri), settings, hour, clock).as_dict()

    results = (map_fn(task, todo) if todo else []) + [s.as_dict() for s in skipped]
    return sorted(results, key=lambda r: r["hour"])


def summary_table(results: Sequence[dict]) -> str:
    """A fixed-width table of outcomes for logs and the demo."""
    head = f"{'hour':<40} {'action':<10} {'files':>11} {'rows':>15} {'dups':>6}  note"
    lines = [head, "-" * len(head)]
    for r in results:
        files = f"{r['files_in']}->{r['files_out']}" if r["action"] == "compacted" else str(r["files_in"])
        rows = f"{r['rows_in']}->{r['rows_out']}" if r["action"] == "compacted" else ""
        lines.append(f"{r['hour']:<40} {r['action']:<10} {files:>11} {rows:>15} {r['duplicates']:>6}  {r['reason']}")
    return "\n".join(lines)


def write_summary(path: str, results: Sequence[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"hours": list(results)}, f, indent=1)
