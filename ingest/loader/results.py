"""What a load task reports to the driver: the files it staged and its counters, as typed records, and their rows.

:func:`ingest.loader.task.run_task` returns one :class:`TaskOutcome`; only the Spark
boundary turns it into rows and back (:func:`outcome_rows`, :func:`outcomes_from_rows`),
so the driver (:mod:`ingest.loader.job`) and the run record work with these classes. All
are small, frozen and picklable.

Both ways of running the tasks on Spark (:mod:`ingest.loader.rdd_tasks`, the job's
default, and the ``ingest_load`` Data Source in :mod:`ingest.loader.source`) yield, per
task, its outcome as rows: one per staged file plus one with the task's counters (column
``kind`` tells them apart). Spark returns the rows of exactly one successful attempt per
partition, whatever retries or speculative copies ran; :func:`outcomes_from_rows` checks
every task reported once. No pyspark import: the Python workers that run the tasks import
this module.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterable, Iterator

from ingest.errors import CommitError
from ingest.loader.records import FileRecord, PartitionKey
from ingest.lost_ranges import CORRUPTION as CORRUPTION_CAUSE, LostRange

DATA = "data"
QUARANTINE = "quarantine"
CORRUPTION = "corruption"
FILE_KINDS = (DATA, QUARANTINE, CORRUPTION)
"""The ``kind`` of a :class:`StagedFile`: DATA and QUARANTINE as
:class:`~ingest.loader.records.FileRecord` names them in manifests; CORRUPTION is
no file but a damaged range the task skipped (see :meth:`StagedFile.damaged_range`),
so that it reaches the driver through the same rows as the files."""


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One file a task attempt wrote under staging, and where the commit publishes it.

    ``kind`` is :data:`DATA` (one hour bucket of one schema) or :data:`QUARANTINE`
    (JSON lines of the messages that failed their CRC or did not decode; no hour,
    schema or event times), or :data:`CORRUPTION`: not a file, a damaged range
    of the broker's log the task skipped (the broker answered CORRUPT_RANGE):
    ``start_offset``/``end_offset`` the range, ``bytes`` its size, ``rows`` the
    messages in it (``messages_exact``: the broker's exact count, else an
    estimate), ``min_time_ms``/``max_time_ms`` the event times of
    the loaded messages just before and after it; no path. The driver commits it
    as a :class:`~ingest.lost_ranges.LostRange` with cause ``corruption``
    (:meth:`to_lost_range`), never as a file.
    """

    task_id: int
    attempt: int
    topic: str
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    kind: str
    path: str            # final path, relative to the destination root
    staging: str         # staged path, relative to the destination root
    rows: int
    bytes: int
    format: str
    dt: str | None = None
    hour: int | None = None
    schema_id: int | None = None
    min_time_ms: int | None = None
    max_time_ms: int | None = None
    messages_exact: bool | None = None   # CORRUPTION entries only

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)

    @classmethod
    def damaged_range(cls, *, task_id: int, attempt: int, topic: str, broker_id: int, partition: int, start: int,
                      end: int, estimated_messages: int, after_time_ms: int | None,
                      before_time_ms: int | None, messages_exact: bool = False) -> "StagedFile":
        """The :data:`CORRUPTION` entry of a damaged range ``[start, end)`` a task skipped."""
        return cls(task_id=task_id, attempt=attempt, topic=topic, broker_id=broker_id, partition=partition,
                   start_offset=start, end_offset=end, kind=CORRUPTION, path="", staging="",
                   rows=estimated_messages, bytes=end - start, format="", min_time_ms=after_time_ms,
                   max_time_ms=before_time_ms, messages_exact=messages_exact)

    def to_lost_range(self, run_id: str, detected_at_ms: int) -> LostRange:
        """The lost range a :data:`CORRUPTION` entry commits."""
        return LostRange(
            topic=self.topic, broker_id=self.broker_id, partition=self.partition, start_offset=self.start_offset,
            end_offset=self.end_offset, bytes=self.bytes, estimated_messages=self.rows,
            after_time_ms=self.min_time_ms, before_time_ms=self.max_time_ms, run_id=run_id,
            detected_at_ms=detected_at_ms, cause=CORRUPTION_CAUSE, messages_exact=bool(self.messages_exact))

    def to_file_record(self, run_id: str) -> FileRecord:
        """The manifest entry committing this file for run ``run_id``."""
        return FileRecord(
            path=self.path, topic=self.topic, broker_id=self.broker_id, partition=self.partition,
            start_offset=self.start_offset, end_offset=self.end_offset, rows=self.rows, format=self.format,
            dt=self.dt, hour=self.hour, bytes=self.bytes, schema_id=self.schema_id, min_time_ms=self.min_time_ms,
            max_time_ms=self.max_time_ms, kind=self.kind, staging=self.staging, run_id=run_id,
        )


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """The counters of one task attempt over ``[start_offset, end_offset)`` of one partition."""

    task_id: int
    attempt: int
    topic: str
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    messages: int                 # loaded into data files
    quarantined: int
    duration_ms: int
    cpu_ms: int
    last_time_ms: int | None      # event time of the last loaded message (None: nothing loaded)
    tally_start: int | None = None     # the task's TaskRange.segment_start (ingest.loader.tally)
    tally_messages: int | None = None  # messages consumed at/after tally_start (all when None); None: unknown
    decoder: str | None = None    # who decoded Parquet chunks into columns: compiled or python (the loader's `decoder`)

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """Everything one successful task attempt reports: its counters, the files it staged and the
    damaged ranges it skipped (``files`` holds both: they cross the Spark boundary as the same rows)."""

    summary: TaskSummary
    files: tuple[StagedFile, ...] = ()

    @property
    def task_id(self) -> int:
        return self.summary.task_id

    @property
    def staged_files(self) -> tuple[StagedFile, ...]:
        """The files to commit (DATA and QUARANTINE)."""
        return tuple(f for f in self.files if f.kind != CORRUPTION)

    @property
    def damaged(self) -> tuple[StagedFile, ...]:
        """The damaged ranges the task skipped (:data:`CORRUPTION` entries)."""
        return tuple(f for f in self.files if f.kind == CORRUPTION)

    def without_damage(self) -> "TaskOutcome":
        """This outcome with only its files (for what lists files, such as the run record)."""
        return TaskOutcome(self.summary, self.staged_files)


# --- the rows an outcome travels in through Spark ------------------------------------------------

RESULT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"), ("task_id", "int"), ("attempt", "int"), ("path", "string"), ("staging", "string"),
    ("topic", "string"), ("broker_id", "int"), ("partition", "int"), ("start_offset", "long"),
    ("end_offset", "long"), ("rows", "long"), ("bytes", "long"), ("format", "string"), ("dt", "string"),
    ("hour", "int"), ("schema_id", "int"), ("min_time_ms", "long"), ("max_time_ms", "long"), ("messages_exact", "boolean"),
    ("messages", "long"), ("quarantined", "long"), ("duration_ms", "long"), ("last_time_ms", "long"), ("cpu_ms", "long"),
    ("tally_start", "long"), ("tally_messages", "long"), ("decoder", "string"),
)
"""Columns of the Spark result (name, Spark SQL type), in order: the union of
:class:`StagedFile`'s and :class:`TaskSummary`'s
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
