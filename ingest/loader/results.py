"""What a load task reports to the driver: the files it staged and its counters, as typed records.

:func:`ingest.loader.task.run_task` returns one :class:`TaskOutcome`; only the Spark
boundary (:mod:`ingest.loader.source`) turns it into rows and back, so the driver
(:mod:`ingest.loader.job`) and the run record work with these classes. All are small,
frozen and picklable.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.loader.records import FileRecord, PartitionKey

DATA = "data"
QUARANTINE = "quarantine"
FILE_KINDS = (DATA, QUARANTINE)
"""The ``kind`` of a staged file, as :class:`~ingest.loader.records.FileRecord` names it in manifests."""


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One file a task attempt wrote under staging, and where the commit publishes it.

    ``kind`` is :data:`DATA` (one hour bucket of one schema) or :data:`QUARANTINE`
    (JSON lines of the messages that failed their CRC or did not decode; no hour,
    schema or event times).
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

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)

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

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """Everything one successful task attempt reports: its counters and the files it staged."""

    summary: TaskSummary
    files: tuple[StagedFile, ...] = ()

    @property
    def task_id(self) -> int:
        return self.summary.task_id
