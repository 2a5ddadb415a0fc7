"""The run record: one JSON document per run under ``_ingest/runs/<run_id>.json``, and the run id.

Written when the run starts (``status: running``) and rewritten at the end
(``committed``, ``nothing-to-do`` or ``failed``). A run killed hard keeps
``running``; its data is either committed (see ``commit_seq`` of the manifest
with its ``run_id``) or not at all. Shape::

    {"run_id", "status", "started_at_ms", "finished_at_ms", "duration_ms", "destination",
     "format", "commit_seq", "error",
     "stage_seconds": {"prepare", "plan", "execute", "commit"},   # wall seconds of the stages that ran
     "totals": {"partitions", "tasks", "messages", "bytes", "files", "quarantined", "lost_ranges",
                "deferred_bytes", "elapsed_s", "messages_per_s", "mb_per_s", "execute_messages_per_s"},
     "partitions": [{"topic", "broker_id", "partition", "committed_before", "start_offset", "end_offset",
                     "latest_offset", "earliest_offset", "deferred_bytes", "replay", "messages", "bytes",
                     "files": [path...], "quarantined", "lost_ranges": [LostRange...], "errors": [...],
                     "tasks", "duration_ms"}],
     "summary": {"topics": [{"topic", "partitions", "tasks", "messages", "bytes", "files", "quarantined",
                             "deferred_bytes", "lost_ranges", "task_ms_max"}...],       # by topic
                 "slowest": [{"topic", "broker_id", "partition", "duration_ms", "messages", "bytes"}...],
                 "largest": [...the same, by bytes]},                                  # SUMMARY_PARTITIONS each
     "lost_ranges": [LostRange...],
     "left_out": [{"reason", "broker_id", "broker", "topic", "partition", "partitions": [[topic, broker, p]...]}]}

The file is written for a person as much as for a program: keys sorted, ``partitions`` last; every list
of objects one object a line, so a run over 1,000 partitions opens on its totals, stages, per-topic lines
and slowest and largest partitions, then its partitions one a line, not 25,000 lines of detail.
(What later runs need of a partition, its committed offset and tally, is in the loader's state,
:mod:`ingest.loader.state`; the run record is the report of one run.)

``left_out``: what discovery could not reach (a broker that did not answer, with its committed
Kafka 0.7 partitions; a replicated partition without a reachable leader): not loaded by this run,
its committed offsets kept (:class:`~ingest.loader.plan.LeftOut`).
"""
from __future__ import annotations

import json
import logging
import secrets
import time
from datetime import datetime, timezone
from typing import Any

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.loader import layout
from ingest.loader.plan import LeftOut
from ingest.loader.results import TaskOutcome
from ingest.storage import Storage

log = logging.getLogger(__name__)


def new_run_id(clock: Clock = SYSTEM_CLOCK) -> str:
    """Sortable by start time: ``YYYYmmddTHHMMSSmmmZ-<6 hex>`` (millisecond resolution,
    so two runs started within one second still sort in start order)."""
    now_ms = clock.time_ms()
    ts = datetime.fromtimestamp(now_ms // 1000, tz=timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{ts}{now_ms % 1000:03d}Z-{secrets.token_hex(3)}"


STAGES = ("prepare", "plan", "execute", "commit")
"""The stages of a load run, in order: roll forward and read the state; discover and plan; run the
tasks on Spark; bound lost ranges and commit."""


class StageTimes:
    """Wall seconds of each stage of a run, kept in ``record["stage_seconds"]``.

    ``end(stage)`` closes ``stage``: it took the time since the previous ``end`` (or
    since this object was made, at the start of the run). A run that fails keeps the
    stages it finished.
    """

    def __init__(self, record: dict[str, Any], monotonic=time.monotonic) -> None:
        self._now = monotonic
        self._last = monotonic()
        self.seconds: dict[str, float] = record.setdefault("stage_seconds", {})

    def end(self, stage: str) -> None:
        now = self._now()
        self.seconds[stage] = round(now - self._last, 3)
        self._last = now


def stages_text(record: dict[str, Any]) -> str:
    """``prepare 0.12 s, plan 0.50 s, execute 31.02 s, commit 0.21 s`` (the stages that ran)."""
    seconds = record.get("stage_seconds") or {}
    return ", ".join(f"{s} {seconds[s]:.2f} s" for s in STAGES if s in seconds) or "none"


SUMMARY_PARTITIONS = 5
"""Partitions the run record's summary names as the slowest, and as the largest."""

SUMMARY_TOPICS = 20
"""Topic lines the printed summary shows (the busiest by messages); the record's summary has them all."""


def run_record_text(record: dict[str, Any]) -> str:
    """The record as JSON for a person: keys sorted, ``partitions`` last; objects open one key a line,
    and every list of objects (partitions, topics, lost ranges...) one object a line (module docstring)."""
    keys = sorted(k for k in record if k != "partitions") + (["partitions"] if "partitions" in record else [])
    return _render({k: record[k] for k in keys}, "", sort=False)


def _render(value: Any, indent: str, *, sort: bool = True) -> str:
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = sorted(value.items()) if sort else value.items()
        return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {_render(v, inner)}" for k, v in items) + f"\n{indent}}}"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "[\n" + ",\n".join(inner + json.dumps(v, sort_keys=True) for v in value) + f"\n{indent}]"
    return json.dumps(value, sort_keys=True)


def write_run_record(storage: Storage, record: dict[str, Any]) -> None:
    storage.write_atomic(storage.join(layout.run_record_path(record["run_id"])), run_record_text(record).encode())


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The run's per-topic lines and its slowest and largest partitions (``summary`` of the record)."""
    topics: dict[str, dict[str, Any]] = {}
    for p in record.get("partitions", []):
        t = topics.setdefault(p["topic"], {"topic": p["topic"], "partitions": 0, "tasks": 0, "messages": 0,
                                           "bytes": 0, "files": 0, "quarantined": 0, "deferred_bytes": 0,
                                           "lost_ranges": 0, "task_ms_max": 0})
        t["partitions"] += 1
        for key in ("tasks", "messages", "bytes", "quarantined", "deferred_bytes"):
            t[key] += p[key]
        t["files"] += len(p["files"])
        t["lost_ranges"] += len(p["lost_ranges"])
        t["task_ms_max"] = max(t["task_ms_max"], p["duration_ms"])

    def brief(p: dict[str, Any]) -> dict[str, Any]:
        return {k: p[k] for k in ("topic", "broker_id", "partition", "duration_ms", "messages", "bytes")}

    parts = [p for p in record.get("partitions", []) if p["tasks"]]
    return {"topics": [topics[t] for t in sorted(topics)],
            "slowest": [brief(p) for p in sorted(parts, key=lambda p: -p["duration_ms"])[:SUMMARY_PARTITIONS]],
            "largest": [brief(p) for p in sorted(parts, key=lambda p: -p["bytes"])[:SUMMARY_PARTITIONS]]}


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
            "lost_ranges": [r.to_json() for r in p.lost], "errors": [], "tasks": len(p.tasks),
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
        if s.decoder is not None:  # which column decoder the partition's tasks ran (compiled, python)
            entry["decoders"] = sorted({*entry.get("decoders", ()), s.decoder})
        entry["files"].extend(f.path for f in outcome.files)
    return [by_key[k] for k in sorted(by_key)]


def totals(record: dict[str, Any], elapsed_s: float) -> dict[str, Any]:
    parts = record.get("partitions", [])
    messages = sum(p["messages"] for p in parts)
    loaded_bytes = sum(p["bytes"] for p in parts) if record.get("status") != "failed" else 0
    return {
        "partitions": len(parts), "tasks": sum(p["tasks"] for p in parts), "messages": messages,
        "bytes": loaded_bytes, "files": sum(len(p["files"]) for p in parts),
        "quarantined": sum(p["quarantined"] for p in parts), "lost_ranges": len(record.get("lost_ranges", [])),
        "deferred_bytes": sum(p["deferred_bytes"] for p in parts),
        "elapsed_s": round(elapsed_s, 3),
        "messages_per_s": round(messages / elapsed_s, 1) if elapsed_s > 0 else None,
        "mb_per_s": round(loaded_bytes / elapsed_s / 1e6, 3) if elapsed_s > 0 else None,
        "execute_messages_per_s": round(messages / execute_s, 1) if (execute_s := record.get(
            "stage_seconds", {}).get("execute")) else None,
    }


def summary_text(record: dict[str, Any]) -> str:
    """The human summary printed at the end of a run."""
    t = record.get("totals", {})
    lines = [
        f"load run {record['run_id']}: {record['status'].upper()}"
        + (f" (commit {record['commit_seq']})" if record.get("commit_seq") else ""),
        f"  partitions {t.get('partitions', 0)}, tasks {t.get('tasks', 0)}, messages {t.get('messages', 0)}, "
        f"bytes {t.get('bytes', 0)}, files {t.get('files', 0)}, quarantined {t.get('quarantined', 0)}",
        f"  {t.get('elapsed_s', 0)} s, {t.get('messages_per_s')} msg/s, {t.get('mb_per_s')} MB/s"
        + (f", {t['deferred_bytes']} bytes deferred to the next run (max.bytes.per.run)" if t.get("deferred_bytes") else ""),
        f"  stages: {stages_text(record)}"
        + (f"; {t['execute_messages_per_s']} msg/s while executing" if t.get("execute_messages_per_s") else ""),
    ]
    lines += _topic_lines(record.get("summary") or {})
    for r in record.get("lost_ranges", []):
        lines.append(f"  LOST ({r.get('cause', 'retention')}): {r['topic']} b{r['broker_id']} p{r['partition']} "
                     f"[{r['start_offset']}, {r['end_offset']}) {r['bytes']} bytes "
                     f"{'' if r.get('messages_exact') else '~'}{r['estimated_messages']} messages")
    for lo in record.get("left_out", []):
        lines.append(f"  LEFT OUT: {LeftOut.from_json(lo).describe()} (offsets kept: a later run loads it)")
    if record.get("error"):
        lines.append(f"  error: {record['error']}")
    return "\n".join(lines)


def _topic_lines(summ: dict[str, Any]) -> list[str]:
    """The summary's topics (the busiest :data:`SUMMARY_TOPICS`) and its slowest and largest partitions,
    when the run had more than one topic or partition."""
    topics = summ.get("topics", [])
    if len(topics) < 2 and sum(t["partitions"] for t in topics) < 2:
        return []
    shown = sorted(topics, key=lambda t: (-t["messages"], t["topic"]))[:SUMMARY_TOPICS]
    lines = [f"  topic {t['topic']}: partitions {t['partitions']}, tasks {t['tasks']}, messages {t['messages']}, "
             f"bytes {t['bytes']}, files {t['files']}, slowest task {t['task_ms_max']} ms"
             + (f", quarantined {t['quarantined']}" if t["quarantined"] else "")
             + (f", {t['deferred_bytes']} bytes deferred" if t["deferred_bytes"] else "")
             + (f", {t['lost_ranges']} lost ranges" if t["lost_ranges"] else "") for t in sorted(shown, key=lambda t: t["topic"])]
    if len(topics) > len(shown):
        lines.append(f"  ... {len(topics) - len(shown)} more topics (the run record's summary lists them all)")

    def named(ps: list[dict[str, Any]], what: str) -> str:
        return ", ".join(f"{p['topic']} b{p['broker_id']} p{p['partition']} {p[what]}" for p in ps)

    if summ.get("slowest"):
        lines.append(f"  slowest partitions (ms): {named(summ['slowest'][:3], 'duration_ms')}")
    if summ.get("largest"):
        lines.append(f"  largest partitions (bytes): {named(summ['largest'][:3], 'bytes')}")
    return lines
