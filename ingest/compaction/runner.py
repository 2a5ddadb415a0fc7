"""One compaction run: roll forward, plan, merge each hour (in process or as Spark tasks), commit once.

Shared by ``ingest compaction run`` (in process) and ``jobs/compact.py`` (one
Spark task per hour). Every hour of a run is swapped in by ONE loader manifest,
so a run is all-or-nothing; a failed or killed run changes nothing visible and
the next run settles its record and removes its staged files.
"""
from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.compaction.audit_gate import complete_hours, report_range
from ingest.compaction.compact import HourResult, commit, merge_hour
from ingest.compaction.plan import HourPlan, Settings, plan_hours
from ingest.compaction.records import reconcile, write_record
from ingest.config import non_ascii_note
from ingest.errors import ConfigError
from ingest.loader.commit import roll_forward
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

log = logging.getLogger(__name__)

MapFn = Callable[[Callable[[HourPlan], HourResult], Sequence[HourPlan]], list[HourResult]]


def parse_time_ms(text: str) -> int:
    """``2026-11-22T03:00``, ``2026-11-22T03:00:00+00:00``, a date, or epoch ms; UTC when no zone."""
    text = str(text).strip()
    if text.isascii() and text.isdigit():   # epoch ms; other scripts' digits are no number here
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"invalid time {text!r}: allowed is ISO-8601 (2026-11-22T03:00[:00][+00:00]) or epoch ms"
                          f"{non_ascii_note(text)}") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def local_map(fn: Callable[[HourPlan], HourResult], plans: Sequence[HourPlan]) -> list[HourResult]:
    out = []
    for i, plan in enumerate(plans, 1):
        log.info("merging hour %d/%d: %s (%d files)", i, len(plans), plan.hour, len(plan.files))
        out.append(fn(plan))
    return out


def run(config: Any, *, start_ms: int | None = None, end_ms: int | None = None,
        topics: Iterable[str] = (), audit_reports: Sequence[str] = (),
        clock: Clock = SYSTEM_CLOCK, map_fn: MapFn = local_map) -> list[dict]:
    """Compact the qualifying hours of ``config["destination"]``; one outcome dict per hour in range."""
    settings = Settings.from_config(config)
    complete = None
    if config["compaction.require.audit"]:
        if not audit_reports:
            raise ConfigError("compaction.require.audit=true but no --audit-report given: pass the audit "
                              "report(s) of these hours, or --set compaction.require.audit=false")
        complete = complete_hours(audit_reports)
        if start_ms is None and end_ms is None:
            # only the hours the reports speak about; the rest of history is not this run's business
            start_ms, end_ms = report_range(audit_reports) or (0, 0)
    storage = open_storage(settings.destination)
    roll_forward(storage)  # a writer: finish a crashed commit (the loader's or ours) before planning on it
    state = LoaderState.load(storage)
    reconcile(storage, state, clock)
    now = clock.time_ms()
    plans, others = plan_hours(state, settings, now, topics=tuple(topics) or tuple(config["compaction.topics"]),
                               start_ms=start_ms, end_ms=end_ms, complete=complete)
    outcomes = [o.as_dict() for o in others]
    if plans:
        cid = f"c{now:013d}-{uuid.uuid4().hex[:8]}"
        record = {"id": cid, "state": "started", "started_ms": now, "finished_ms": None, "manifest_seq": None,
                  "hours": [str(p.hour) for p in plans], "old": [], "new": []}
        write_record(storage, record)
        uri = settings.destination

        def task(plan: HourPlan) -> HourResult:
            return merge_hour(open_storage(uri), settings, plan, cid)

        results = map_fn(task, plans)
        manifest = commit(storage, results, cid, clock, config["state.checkpoint.interval"])
        record.update(state="committed", manifest_seq=manifest.seq, finished_ms=clock.time_ms(),
                      hours=[r.outcome.as_dict() for r in results],
                      old=[p for r in results for p in r.old], new=[n.path for r in results for n in r.new])
        write_record(storage, record)
        outcomes += [r.outcome.as_dict() for r in results]
    return sorted(outcomes, key=lambda r: r["hour"])


def summary_table(results: Sequence[dict]) -> str:
    """A fixed-width table of outcomes for logs and the demo."""
    head = f"{'hour':<40} {'action':<10} {'files':>9} {'rows':>13} {'dups':>6}  note"
    lines = [head, "-" * len(head)]
    for r in results:
        compacted = r["action"] == "compacted"
        files = f"{r['files_in']}->{r['files_out']}" if compacted else str(r["files_in"])
        rows = f"{r['rows_in']}->{r['rows_out']}" if compacted else ""
        lines.append(f"{r['hour']:<40} {r['action']:<10} {files:>9} {rows:>13} {r['duplicates']:>6}  {r['reason']}")
    if not results:
        lines.append("(no committed hours in range)")
    return "\n".join(lines)


def write_summary(path: str, results: Sequence[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"hours": list(results)}, f, indent=1)
