"""The run record: one JSON document per run under ``_ingest/runs/<run_id>.json``, and the run id.

Written when the run starts (``status: running``) and rewritten at the end
(``committed``, ``nothing-to-do`` or ``failed``). A run killed hard keeps
``running``; its data is either committed (see ``commit_seq`` of the manifest
with its ``run_id``) or not at all. Shape::

    {"run_id", "status", "started_at_ms", "finished_at_ms", "duration_ms", "destination",
     "format", "commit_seq", "error",
     "totals": {"partitions", "tasks", "messages", "bytes", "files", "quarantined", "lost_ranges",
                "deferred_bytes", "messages_per_s", "mb_per_s"},
     "partitions": [{"topic", "broker_id", "partition", "committed_before", "start_offset", "end_offset",
                     "latest_offset", "earliest_offset", "deferred_bytes", "replay", "messages", "bytes",
                     "files": [path...], "quarantined", "lost_ranges": [LostRange...], "errors": [...],
                     "tasks", "duration_ms"}],
     "lost_ranges": [LostRange...]}
"""
from __future__ import annotations

import json
import logging
import secrets
from datetime import datetime, timezone
from typing import Any

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.loader import layout
from ingest.loader.results import TaskOutcome
from ingest.storage import Storage

log = logging.getLogger(__name__)


def new_run_id(clock: Clock = SYSTEM_CLOCK) -> str:
    """Sortable by start time: ``YYYYmmddTHHMMSSmmmZ-<6 hex>`` (millisecond resolution,
    so two runs started within one second still sort in start order)."""
    now_ms = clock.time_ms()
    ts = datetime.fromtimestamp(now_ms // 1000, tz=timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{ts}{now_ms % 1000:03d}Z-{secrets.token_hex(3)}"


def write_run_record(storage: Storage, record: dict[str, Any]) -> None:
    storage.write_atomic(storage.join(layout.run_record_path(record["run_id"])),
                         json.dumps(record, indent=1, sort_keys=True).encode())


def partition_entries(plan, outcomes: list[TaskOutcome] | None = None) -> list[dict[str, Any]]:
    """Per-partition entries of a run record from the plan and (optional) task outcomes."""
    by_key: dict[tuple, dict[str, Any]] = {}
    for p in plan.partitions:
        snap = p.snapshot
        by_key[p.key] = {
            "topic": snap.topic, "broker_id": snap.broker_id, "partition": snap.partition,
            "committed_before": p.committed, "start_offset": p.start, "end_offset": p.end,
            "earliest_offset": snap.earliest, "latest_offset": snap.latest, "deferred_bytes": p.deferred_bytes,
            "replay": p.replay, "messages": 0, "bytes": p.end - p.start, "files": [], "quarantined": 0,
            "lost_ranges": [p.lost.to_json()] if p.lost else [], "errors": [], "tasks": len(p.tasks),
            "duration_ms": 0,
        }
    for outcome in outcomes or ():
        s = outcome.summary
        entry = by_key.get(s.key)
        if entry is None:
            continue
        entry["messages"] += s.messages
        entry["quarantined"] += s.quarantined
        entry["duration_ms"] += s.duration_ms
        entry["cpu_ms"] = entry.get("cpu_ms", 0) + s.cpu_ms
        entry["files"].extend(f.path for f in outcome.files)
    return [by_key[k] for k in sorted(by_key)]
