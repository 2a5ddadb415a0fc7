"""The rows a load task's outcome travels in from a Spark task to the driver, and back.

Both ways of running the tasks on Spark (:mod:`ingest.loader.rdd_tasks`, the job's
default, and the ``ingest_load`` Data Source in :mod:`ingest.loader.source`) yield,
per task, the :class:`~ingest.loader.results.TaskOutcome` of
:func:`ingest.loader.task.run_task` as rows: one per staged file plus one with the
task's counters (column ``kind`` tells them apart; this module is the only one that
knows the row shape). Spark returns the rows of exactly one successful attempt per
partition, whatever retries or speculative copies ran; :func:`outcomes_from_rows`
checks every task reported once. No pyspark import: the Python workers that run the
tasks import this module.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Iterable, Iterator

from ingest.errors import CommitError
from ingest.loader.results import FILE_KINDS, StagedFile, TaskOutcome, TaskSummary

RESULT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"), ("task_id", "int"), ("attempt", "int"), ("path", "string"), ("staging", "string"),
    ("topic", "string"), ("broker_id", "int"), ("partition", "int"), ("start_offset", "long"),
    ("end_offset", "long"), ("rows", "long"), ("bytes", "long"), ("format", "string"), ("dt", "string"),
    ("hour", "int"), ("schema_id", "int"), ("min_time_ms", "long"), ("max_time_ms", "long"), ("messages_exact", "boolean"),
    ("messages", "long"), ("quarantined", "long"), ("duration_ms", "long"), ("last_time_ms", "long"), ("cpu_ms", "long"),
    ("tally_start", "long"), ("tally_messages", "long"),
)
"""Columns of the Spark result (name, Spark SQL type), in order: the union of
:class:`~ingest.loader.results.StagedFile`'s and :class:`~ingest.loader.results.TaskSummary`'s
fields, plus ``kind`` (a file's kind, or :data:`SUMMARY_KIND`)."""

RESULT_SCHEMA = ", ".join(f"{n} {t}" for n, t in RESULT_FIELDS)
SUMMARY_KIND = "task"
_COLUMNS = tuple(name for name, _ in RESULT_FIELDS)
_SUMMARY_FIELDS = tuple(f.name for f in fields(TaskSummary))
_FILE_FIELDS = tuple(f.name for f in fields(StagedFile))


def outcome_rows(outcome: TaskOutcome) -> Iterator[tuple]:
    """``outcome`` as Spark rows (tuples in :data:`RESULT_FIELDS` order): its files, then its summary."""
    for f in outcome.files:
        values = {name: getattr(f, name) for name in _FILE_FIELDS}
        yield tuple(values.get(c) for c in _COLUMNS)
    values = {name: getattr(outcome.summary, name) for name in _SUMMARY_FIELDS}
    values["kind"] = SUMMARY_KIND
    yield tuple(values.get(c) for c in _COLUMNS)


def outcomes_from_rows(rows: Iterable[dict[str, Any]]) -> list[TaskOutcome]:
    """The task outcomes in collected rows (dicts by column name), ordered by task id.

    Raises:
        CommitError: a task reported files without its summary, or two summaries.
    """
    summaries: dict[int, TaskSummary] = {}
    files: dict[int, list[StagedFile]] = {}
    for r in rows:
        if r["kind"] == SUMMARY_KIND:
            if r["task_id"] in summaries:
                raise CommitError(f"task {r['task_id']} reported twice; nothing committed")
            summaries[r["task_id"]] = TaskSummary(**{name: r[name] for name in _SUMMARY_FIELDS})
        elif r["kind"] in FILE_KINDS:
            files.setdefault(r["task_id"], []).append(StagedFile(**{name: r[name] for name in _FILE_FIELDS}))
        else:
            raise CommitError(f"task {r['task_id']} reported a row of unknown kind {r['kind']!r}; "
                              f"known: {SUMMARY_KIND}, {', '.join(FILE_KINDS)}")
    orphans = sorted(set(files) - set(summaries))
    if orphans:
        raise CommitError(f"tasks {orphans} reported staged files but no summary; nothing committed")
    return [TaskOutcome(summaries[t], tuple(files.get(t, ()))) for t in sorted(summaries)]
