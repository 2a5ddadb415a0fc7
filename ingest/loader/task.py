"""One Spark task's work: fetch a range, check CRCs, decode, bucket by hour, write staged files.

Runs on an executor (called by :mod:`ingest.loader.source`) or directly in tests.
Output goes only under ``_ingest/staging/<run_id>/`` with attempt-unique names, so
a failed or speculative attempt can never clobber or add to what the driver
commits: the driver commits exactly the files this function *returns* for the
attempt Spark reports as successful.

Phases, each a function tests call directly: :func:`open_consumer` and
:func:`read_range` (read), :func:`stage_messages` (decode, bucket and write rows:
the per-message loop), :func:`close_data_files` and :func:`stage_quarantine`
(finish the staged files), :func:`damaged_ranges` (the damaged ranges of the
broker's log the task skipped). :func:`run_task` chains them, calls the
:class:`~ingest.loader.faults.Faults` hook once the files are staged, and returns a
:class:`~ingest.loader.results.TaskOutcome`.
"""
from __future__ import annotations

import gc
import logging
import math
import posixpath
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ingest.errors import EventDecodeError
from ingest.events.envelope import PREFIX_SIZE
from ingest.loader import layout
from ingest.loader.faults import Faults
from ingest.loader.quarantine import QUARANTINE_FORMAT, QuarantinedMessage, quarantine_file_bytes
from ingest.loader.results import DATA, QUARANTINE, StagedFile, TaskOutcome, TaskSummary
from ingest.loader.tally import counted_before, task_tally

if TYPE_CHECKING:
    from ingest.loader.plan import TaskRange
    from ingest.storage import Storage

# Why the imports of fetching, decoding and writing (pyarrow, fastavro, the client)
# live inside the phase functions: Spark unpickles the data source (ingest.loader.source,
# which imports this module for TaskSettings) in separate planner Python processes;
# every module-level import here was paid again there (~1 s of the first use of the
# data source; see docs/performance.md).

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """Everything a task needs besides its range; small and picklable."""

    destination: str
    run_id: str
    format: str
    registry_url: str
    avro_codec: str = "snappy"
    parquet_compression: str = "snappy"
    row_group_rows: int = 131_072
    fetch_size: int = 1024 * 1024
    max_fetch_size: int = 64 * 1024 * 1024
    socket_timeout_s: float = 30.0
    faults: str = ""   # the driver's INGEST_FAULTS (ingest.loader.faults); empty in production


class _Bucket:
    __slots__ = ("staging", "writer", "schema_id", "min_t", "max_t", "dt", "hour")

    def __init__(self, staging, writer, schema_id, dt, hour):
        self.staging, self.writer, self.schema_id, self.dt, self.hour = staging, writer, schema_id, dt, hour
        self.min_t = None
        self.max_t = None


@dataclass(slots=True)
class Staged:
    """What :func:`stage_messages` leaves: open data files per (hour index, schema id), the
    quarantined messages, the damaged ranges skipped (``[start, end, time before, time after]``)
    and the counters. ``stage_dir`` is this attempt's own directory."""

    stage_dir: str
    buckets: dict[tuple[int, int], _Bucket] = field(default_factory=dict)
    quarantine: list[QuarantinedMessage] = field(default_factory=list)
    damaged: list[list] = field(default_factory=list)
    corrupt_offsets: list[int] = field(default_factory=list)  # messages that failed their CRC
    messages: int = 0
    last_time_ms: int | None = None


def run_task(task: TaskRange, settings: TaskSettings, attempt: int = 0, *, storage: Storage | None = None,
             deserializer=None, consumer=None) -> TaskOutcome:
    """Load ``task``'s range into staged files; returns what was staged (see module docstring)."""
    from ingest.storage import open_storage

    began = time.monotonic()
    cpu_began = time.process_time()
    faults = Faults.parse(settings.faults)
    storage = storage or open_storage(settings.destination)
    decoder = new_decoder(settings, deserializer)
    staged = Staged(stage_dir(settings.run_id, task, attempt))
    own_consumer = consumer is None
    if own_consumer:
        consumer = open_consumer(task, settings)
    before = [0]  # messages consumed before task.segment_start (the tally counts the rest)
    try:
        items = read_range(consumer, task, settings)
        if task.segment_start is not None and task.segment_start > task.start:
            items = counted_before(items, task.segment_start, before)
        stage_messages(items, task, settings, storage, decoder, staged)
    finally:
        if own_consumer:
            consumer.close()
    files = close_data_files(staged, task, attempt, settings.format, storage)
    quarantine_file = stage_quarantine(staged, task, attempt, storage)
    if quarantine_file is not None:
        files.append(quarantine_file)
    damaged = damaged_ranges(staged, task, attempt)
    faults.task_staged(task.task_id, attempt, len(files))
    summary = TaskSummary(
        task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id, partition=task.partition,
        start_offset=task.start, end_offset=task.end, messages=staged.messages, quarantined=len(staged.quarantine),
        duration_ms=int((time.monotonic() - began) * 1000), cpu_ms=int((time.process_time() - cpu_began) * 1000),
        last_time_ms=staged.last_time_ms, tally_start=task.segment_start,
        tally_messages=task_tally(task.segment_start, task.start, staged.messages + len(staged.quarantine), before[0],
                                  staged.corrupt_offsets, staged.damaged))
    log.info("task %d %s b%d p%d [%d, %d): %d messages, %d quarantined, %d files, %d damaged ranges skipped",
             task.task_id, task.topic, task.broker_id, task.partition, task.start, task.end, summary.messages,
             summary.quarantined, len(files), len(damaged))
    return TaskOutcome(summary, tuple(files + damaged))


def stage_dir(run_id: str, task: TaskRange, attempt: int) -> str:
    """This attempt's own staging directory (attempt-unique: retries and speculative copies never share one)."""
    return posixpath.join(layout.staging_dir(run_id), f"t{task.task_id}-a{attempt}-{uuid.uuid4().hex[:8]}")


def new_decoder(settings: TaskSettings, deserializer=None):
    """The task's :class:`~ingest.loader.decode.PayloadDecoder` (over the registry unless ``deserializer``)."""
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer
    from ingest.loader.decode import PayloadDecoder

    return PayloadDecoder(deserializer or EventDeserializer(RegistryClient(settings.registry_url)))


def open_consumer(task: TaskRange, settings: TaskSettings):
    """A consumer of ``task``'s partition (the caller closes it): a SimpleConsumer connected to its
    broker, or for a replicated partition a LeaderConsumer that finds the current leader through
    the task's own ``metadata_brokers`` (executors have no driver state) and follows failovers,
    waiting up to ``socket_timeout_s`` for a new leader."""
    if task.replicated:
        from ingest.client.leader_consumer import LeaderConsumer, static_metadata

        return LeaderConsumer(static_metadata(task.metadata_brokers, timeout_s=settings.socket_timeout_s),
                              timeout_s=settings.socket_timeout_s, fetch_size=settings.fetch_size,
                              max_fetch_size=settings.max_fetch_size, leader_wait_s=settings.socket_timeout_s)
    from ingest.client.simple_consumer import SimpleConsumer

    return SimpleConsumer(task.host, task.port, timeout_s=settings.socket_timeout_s,
                          fetch_size=settings.fetch_size, max_fetch_size=settings.max_fetch_size)


def read_range(consumer, task: TaskRange, settings: TaskSettings) -> Iterator:
    """Every message of the task's range in order; corrupt ones as :class:`~ingest.loader.fetch.Corrupt`.

    A replicated partition's range end may lie above a new leader's high watermark for a
    moment after a failover: the fetch loop waits up to ``socket_timeout_s`` for it, then the
    task fails (the run commits nothing; the next run plans again). Nothing above the high
    watermark is ever read.
    """
    from ingest.loader.fetch import iter_range

    return iter_range(consumer, task.topic, task.partition, task.start, task.end,
                      fetch_size=settings.fetch_size, max_fetch_size=settings.max_fetch_size,
                      wait_s=settings.socket_timeout_s if task.replicated else 0.0)


def stage_messages(items: Iterable, task: TaskRange, settings: TaskSettings, storage: Storage, decoder,
                   staged: Staged) -> Staged:
    """Decode every message, bucket it by event hour and schema, and write it to its bucket's file.

    ``items`` are what :func:`read_range` yields. A message that is corrupt or does
    not decode, or has no usable ``header.time``, goes to ``staged.quarantine``; a
    damaged range to ``staged.damaged`` (with the event times around it). The
    data files stay open (:func:`close_data_files` finishes them). This is the
    per-message loop: nothing here may cost more per message than it must.
    """
    from ingest.loader.fetch import Corrupt, Damaged

    buckets = staged.buckets                       # (hour index since epoch, schema id) -> _Bucket
    quarantine = staged.quarantine
    hours: dict[int, tuple[str, int]] = {}         # hour index -> (dt, hour)
    messages = staged.messages
    last_time = staged.last_time_ms
    fast: dict[bytes, tuple[Any, int]] = {}  # envelope prefix (magic + schema id) -> (RowLayout, schema id)
    prefix = PREFIX_SIZE
    last_hour = last_sid = last_bucket = None
    raw = settings.format == "avro"  # Avro output appends the already-encoded bodies
    waiting: list[list] = []  # damaged ranges waiting for the event time of the next loaded message
    # Decoded records hold no reference cycles; the cyclic collector would only rescan
    # the growing row-group buffer again and again (measured: ~40% of a Parquet task).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for item in items:
            if item.__class__ is Corrupt:
                staged.corrupt_offsets.append(item.offset)
                quarantine.append(_quarantined(task, item.offset, item.next_offset, item.raw, item.reason))
                continue
            if item.__class__ is Damaged:
                waiting.append([item.offset, item.next_offset, last_time, None])
                staged.damaged.append(waiting[-1])
                continue
            payload = item.payload
            # Fast path: framing + schema id seen before with a generated row decoder.
            # Anything it refuses goes through decode_row, which has the precise errors.
            hit = fast.get(payload[:prefix])
            record = None
            if hit is not None:
                row_layout, schema_id = hit
                try:
                    record = row_layout.decode(payload)
                except Exception:
                    record = None
            try:
                if record is None:
                    schema_id, record, row_layout = decoder.decode_row(payload, topic=task.topic, offset=item.offset)
                    if row_layout is not None:
                        fast[payload[:prefix]] = (row_layout, schema_id)
                t = record[row_layout.time_index] if row_layout is not None else record["header"]["time"]
                hour_index = t // HOUR_MS
                if hour_index not in hours:
                    hours[hour_index] = layout.hour_bucket(hour_index * HOUR_MS)
            except EventDecodeError as exc:
                quarantine.append(_quarantined(task, item.offset, item.next_offset, payload, str(exc)))
                continue
            except (KeyError, TypeError, ValueError, OverflowError, OSError) as exc:
                quarantine.append(_quarantined(
                    task, item.offset, item.next_offset, payload,
                    f"topic {task.topic} offset {item.offset}: no usable header.time for hour bucketing: {exc!r}"))
                continue
            if hour_index == last_hour and schema_id == last_sid:
                bucket = last_bucket  # events arrive mostly in time order: same bucket as the last one
            else:
                bucket = buckets.get((hour_index, schema_id))
            if bucket is None:
                schema = decoder.writer_schema(schema_id, payload, topic=task.topic, offset=item.offset)
                bucket = buckets[(hour_index, schema_id)] = _open_bucket(
                    staged.stage_dir, hours[hour_index], schema_id, schema, row_layout, settings, storage)
                bucket.min_t = bucket.max_t = t
            last_hour, last_sid, last_bucket = hour_index, schema_id, bucket
            if raw:
                bucket.writer.write_raw(payload[prefix:])
            else:
                bucket.writer.write(record)
            if t < bucket.min_t:
                bucket.min_t = t
            elif t > bucket.max_t:
                bucket.max_t = t
            last_time = t
            messages += 1
            if waiting:
                for d in waiting:
                    d[3] = t
                waiting.clear()
    finally:
        if gc_was_enabled:
            gc.enable()
        staged.messages = messages
        staged.last_time_ms = last_time
    return staged


def damaged_ranges(staged: Staged, task: TaskRange, attempt: int) -> list[StagedFile]:
    """The damaged ranges the task skipped, as CORRUPTION entries (see :mod:`ingest.loader.results`).

    The messages a range held are estimated from the task's average message
    size (its other bytes over its other messages); at least one.
    """
    if not staged.damaged:
        return []
    lost_bytes = sum(end - start for start, end, _, _ in staged.damaged)
    seen = staged.messages + len(staged.quarantine)
    avg = (task.end - task.start - lost_bytes) / seen if seen else 0
    out = []
    for start, end, before, after in staged.damaged:
        estimate = max(1, math.ceil((end - start) / avg)) if avg > 0 else 1
        out.append(StagedFile.damaged_range(
            task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id,
            partition=task.partition, start=start, end=end, estimated_messages=estimate, after_time_ms=before,
            before_time_ms=after))
    return out


def _open_bucket(stage_dir_: str, dt_hour: tuple[str, int], schema_id: int, schema: dict, row_layout,
                 settings: TaskSettings, storage: Storage) -> _Bucket:
    from ingest.loader.writers import open_writer

    dt, hour = dt_hour
    rel = posixpath.join(stage_dir_, layout.staged_name(f"{dt}-{hour:02d}-{schema_id}.{settings.format}"))
    writer = open_writer(settings.format, storage.open_write(storage.join(rel)), schema,
                         avro_codec=settings.avro_codec, parquet_compression=settings.parquet_compression,
                         row_group_rows=settings.row_group_rows, layout=row_layout)
    return _Bucket(rel, writer, schema_id, dt, hour)


def _quarantined(task: TaskRange, offset: int, next_offset: int, raw, reason: str) -> QuarantinedMessage:
    return QuarantinedMessage(task.topic, task.broker_id, task.partition, offset, next_offset, reason, bytes(raw))


def close_data_files(staged: Staged, task: TaskRange, attempt: int, fmt: str, storage: Storage) -> list[StagedFile]:
    """Close every open data file; one :class:`StagedFile` each, in (hour, schema id) order.

    A file's final name carries its schema id only when its hour has several schemas.
    """
    per_hour: dict[tuple[str, int], int] = {}
    for b in staged.buckets.values():
        per_hour[(b.dt, b.hour)] = per_hour.get((b.dt, b.hour), 0) + 1
    out = []
    for (_h, sid), b in sorted(staged.buckets.items()):
        n_rows = b.writer.close()
        name = layout.data_file_name(task.topic, task.broker_id, task.partition, task.start, task.end, fmt,
                                     sid if per_hour[(b.dt, b.hour)] > 1 else None)
        st = storage.status(storage.join(b.staging))
        out.append(StagedFile(
            task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id,
            partition=task.partition, start_offset=task.start, end_offset=task.end, kind=DATA,
            path=layout.data_file_path(task.topic, b.dt, b.hour, name), staging=b.staging, rows=n_rows,
            bytes=st.size if st else 0, format=fmt, dt=b.dt, hour=b.hour, schema_id=sid,
            min_time_ms=b.min_t, max_time_ms=b.max_t))
    return out


def stage_quarantine(staged: Staged, task: TaskRange, attempt: int, storage: Storage) -> StagedFile | None:
    """Write the quarantined messages to this attempt's quarantine file (None when there are none)."""
    if not staged.quarantine:
        return None
    rel = posixpath.join(staged.stage_dir, layout.staged_name(f"quarantine.{QUARANTINE_FORMAT}"))
    data = quarantine_file_bytes(staged.quarantine)
    storage.write_bytes(storage.join(rel), data)
    return StagedFile(
        task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id, partition=task.partition,
        start_offset=task.start, end_offset=task.end, kind=QUARANTINE,
        path=layout.quarantine_file_path(task.topic, task.broker_id, task.partition, task.start, task.end),
        staging=rel, rows=len(staged.quarantine), bytes=len(data), format=QUARANTINE_FORMAT)
