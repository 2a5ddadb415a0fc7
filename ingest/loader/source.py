"""The Spark side: a Python Data Source whose partitions are the plan's task ranges.

``spark.read.format("ingest_load").option("tasks", ...).load()`` yields, per
input partition (= one :class:`~ingest.loader.plan.TaskRange`), the
:class:`~ingest.loader.results.TaskOutcome` of :func:`ingest.loader.task.run_task`
as rows: one per staged file plus one with the task's counters (column ``kind``
tells them apart; this module is the only one that knows the row shape).
Collecting that DataFrame is how the driver learns which files the *successful*
attempts wrote: Spark returns the output of exactly one successful attempt per
partition, whatever retries or speculative copies ran.

Options (strings, as the Data Source API requires): ``tasks`` (JSON list of task
ranges) and ``settings`` (JSON of :class:`~ingest.loader.task.TaskSettings`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, fields
from typing import Any, Iterable, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ingest.errors import CommitError
from ingest.loader.plan import TaskRange
from ingest.loader.results import FILE_KINDS, StagedFile, TaskOutcome, TaskSummary
from ingest.loader.task import TaskSettings

log = logging.getLogger(__name__)

RESULT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"), ("task_id", "int"), ("attempt", "int"), ("path", "string"), ("staging", "string"),
    ("topic", "string"), ("broker_id", "int"), ("partition", "int"), ("start_offset", "long"),
    ("end_offset", "long"), ("rows", "long"), ("bytes", "long"), ("format", "string"), ("dt", "string"),
    ("hour", "int"), ("schema_id", "int"), ("min_time_ms", "long"), ("max_time_ms", "long"),
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

FORMAT_NAME = "ingest_load"
_registered: set[str] = set()  # application ids this data source is registered with


class TaskPartition(InputPartition):
    """One input partition = one task range (picklable: a frozen dataclass inside)."""

    def __init__(self, task: TaskRange) -> None:
        super().__init__(task.task_id)
        self.task = task


class LoadReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.tasks = [TaskRange(**t) for t in json.loads(options["tasks"])]
        self.settings = TaskSettings(**json.loads(options["settings"]))

    def partitions(self) -> Sequence[InputPartition]:
        return [TaskPartition(t) for t in self.tasks]

    def read(self, partition: TaskPartition) -> Iterator[tuple]:
        from pyspark import TaskContext

        from ingest.loader.task import run_task

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        yield from outcome_rows(run_task(partition.task, self.settings, attempt))


class LoadDataSource(DataSource):
    """``ingest_load``: runs the load tasks and returns what they staged."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return RESULT_SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return LoadReader(dict(self.options))


def execute_tasks(spark, tasks: Sequence[TaskRange], settings: TaskSettings) -> list[TaskOutcome]:
    """Run every task on Spark; the outcomes of the successful attempts, by task id."""
    if not tasks:
        return []
    app = spark.sparkContext.applicationId
    if app not in _registered:
        spark.dataSource.register(LoadDataSource)
        _registered.add(app)
    df = (
        spark.read.format(FORMAT_NAME)
        .option("tasks", json.dumps([asdict(t) for t in tasks]))
        .option("settings", json.dumps(asdict(settings)))
        .load()
    )
    return outcomes_from_rows(row.asDict() for row in df.collect())
