"""One Spark task's work: fetch a range, check CRCs, decode, bucket by hour, write staged files.

Runs on an executor (called by :mod:`ingest.loader.source`) or directly in tests.
Output goes only under ``_ingest/staging/<run_id>/`` with attempt-unique names, so
a failed or speculative attempt can never clobber or add to what the driver
commits: the driver commits exactly the file list this function *returns* for
the attempt Spark reports as successful.

Returned rows are plain dicts (see :data:`RESULT_FIELDS`): one per written file
(``kind`` ``data`` / ``quarantine``) and one ``task`` row with the counters.
"""
from __future__ import annotations

import base64
import gc
import json
import logging
import posixpath
import time
import uuid
from dataclasses import dataclass
from typing import Any

from typing import TYPE_CHECKING

from ingest.errors import EventDecodeError, IngestError
from ingest.loader import layout

if TYPE_CHECKING:
    from ingest.loader.plan import TaskRange
    from ingest.storage import Storage

# Why the imports of fetching, decoding and writing (pyarrow, fastavro, the client)
# live inside run_task: Spark unpickles the data source (ingest.loader.source, which
# imports this module for RESULT_SCHEMA and TaskSettings) in separate planner Python
# processes; every module-level import here was paid again there (~1 s of the
# first use of the data source; see docs/performance.md).

log = logging.getLogger(__name__)

RESULT_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"), ("task_id", "int"), ("attempt", "int"), ("path", "string"), ("staging", "string"),
    ("topic", "string"), ("broker_id", "int"), ("partition", "int"), ("start_offset", "long"),
    ("end_offset", "long"), ("rows", "long"), ("bytes", "long"), ("format", "string"), ("dt", "string"),
    ("hour", "int"), ("schema_id", "int"), ("min_time_ms", "long"), ("max_time_ms", "long"),
    ("messages", "long"), ("quarantined", "long"), ("duration_ms", "long"), ("last_time_ms", "long"), ("cpu_ms", "long"),
)
"""Columns of the Spark result (name, Spark SQL type), in order."""

RESULT_SCHEMA = ", ".join(f"{n} {t}" for n, t in RESULT_FIELDS)

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
    fail_first_attempt: bool = False
    slow_first_attempt_ms: int = 0


class _Bucket:
    __slots__ = ("staging", "writer", "schema_id", "min_t", "max_t", "dt", "hour")

    def __init__(self, staging, writer, schema_id, dt, hour):
        self.staging, self.writer, self.schema_id, self.dt, self.hour = staging, writer, schema_id, dt, hour
        self.min_t = None
        self.max_t = None


def run_task(task: TaskRange, settings: TaskSettings, attempt: int = 0, *, storage: Storage | None = None,
             deserializer=None, consumer=None) -> list[dict[str, Any]]:
    """Load ``task``'s range into staged files; returns the result rows (see module docstring)."""
    from ingest.client.simple_consumer import SimpleConsumer
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer
    from ingest.loader.decode import PayloadDecoder
    from ingest.loader.fetch import Corrupt, iter_range
    from ingest.loader.writers import open_writer
    from ingest.storage import open_storage

    began = time.monotonic()
    cpu_began = time.process_time()
    storage = storage or open_storage(settings.destination)
    own_consumer = consumer is None
    if consumer is None:
        consumer = SimpleConsumer(task.host, task.port, timeout_s=settings.socket_timeout_s,
                                  fetch_size=settings.fetch_size, max_fetch_size=settings.max_fetch_size)
    decoder = PayloadDecoder(deserializer or EventDeserializer(RegistryClient(settings.registry_url)))
    stage_dir = posixpath.join(layout.staging_dir(settings.run_id), f"t{task.task_id}-a{attempt}-{uuid.uuid4().hex[:8]}")
    buckets: dict[tuple[int, int], _Bucket] = {}   # (hour index since epoch, schema id)
    hours: dict[int, tuple[str, int]] = {}         # hour index -> (dt, hour)
    quarantine: list[dict] = []
    messages = 0
    last_time = None
    fast: dict[bytes, tuple[Any, int]] = {}  # payload[:5] (magic + schema id) -> (RowLayout, schema id)
    last_hour = last_sid = last_bucket = None
    fmt = settings.format
    raw = fmt == "avro"  # Avro output appends the already-encoded bodies
    # Decoded records hold no reference cycles; the cyclic collector would only rescan
    # the growing row-group buffer again and again (measured: ~40% of a Parquet task).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for item in iter_range(consumer, task.topic, task.partition, task.start, task.end,
                               fetch_size=settings.fetch_size, max_fetch_size=settings.max_fetch_size):
            if item.__class__ is Corrupt:
                quarantine.append(_quarantine_line(task, item.offset, item.next_offset, item.raw, item.reason))
                continue
            payload = item.payload
            # Fast path: framing + schema id seen before with a generated row decoder.
            # Anything it refuses goes through decode_row, which has the precise errors.
            hit = fast.get(payload[:5])
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
                        fast[payload[:5]] = (row_layout, schema_id)
                t = record[row_layout.time_index] if row_layout is not None else record["header"]["time"]
                hour_index = t // HOUR_MS
                if hour_index not in hours:
                    hours[hour_index] = layout.hour_bucket(hour_index * HOUR_MS)
            except EventDecodeError as exc:
                quarantine.append(_quarantine_line(task, item.offset, item.next_offset, payload, str(exc)))
                continue
            except (KeyError, TypeError, ValueError, OverflowError, OSError) as exc:
                quarantine.append(_quarantine_line(
                    task, item.offset, item.next_offset, payload,
                    f"topic {task.topic} offset {item.offset}: no usable header.time for hour bucketing: {exc!r}"))
                continue
            if hour_index == last_hour and schema_id == last_sid:
                bucket = last_bucket  # events arrive mostly in time order: same bucket as the last one
            else:
                bucket = buckets.get((hour_index, schema_id))
            if bucket is None:
                dt, hour = hours[hour_index]
                schema = decoder.writer_schema(schema_id, payload, topic=task.topic, offset=item.offset)
                rel = posixpath.join(stage_dir, f"{dt}-{hour:02d}-{schema_id}.{fmt}")
                writer = open_writer(fmt, storage.open_write(storage.join(rel)), schema,
                                     avro_codec=settings.avro_codec, parquet_compression=settings.parquet_compression,
                                     row_group_rows=settings.row_group_rows, layout=row_layout)
                bucket = buckets[(hour_index, schema_id)] = _Bucket(rel, writer, schema_id, dt, hour)
                bucket.min_t = bucket.max_t = t
            last_hour, last_sid, last_bucket = hour_index, schema_id, bucket
            if raw:
                bucket.writer.write_raw(payload[5:])
            else:
                bucket.writer.write(record)
            if t < bucket.min_t:
                bucket.min_t = t
            elif t > bucket.max_t:
                bucket.max_t = t
            last_time = t
            messages += 1
    finally:
        if gc_was_enabled:
            gc.enable()
        if own_consumer:
            consumer.close()
    rows: list[dict[str, Any]] = []
    per_hour: dict[tuple[str, int], int] = {}
    for b in buckets.values():
        per_hour[(b.dt, b.hour)] = per_hour.get((b.dt, b.hour), 0) + 1
    for (_h, sid), b in sorted(buckets.items()):
        dt, hour = b.dt, b.hour
        n_rows = b.writer.close()
        name = layout.data_file_name(task.topic, task.broker_id, task.partition, task.start, task.end, fmt,
                                     sid if per_hour[(dt, hour)] > 1 else None)
        st = storage.status(storage.join(b.staging))
        rows.append(_row("data", task, attempt, layout.data_file_path(task.topic, dt, hour, name), b.staging,
                         rows=n_rows, bytes=st.size if st else 0, format=fmt, dt=dt, hour=hour, schema_id=sid,
                         min_time_ms=b.min_t, max_time_ms=b.max_t))
    if quarantine:
        rel = posixpath.join(stage_dir, "quarantine.jsonl")
        data = "".join(json.dumps(q, sort_keys=True) + "\n" for q in quarantine).encode()
        storage.write_bytes(storage.join(rel), data)
        rows.append(_row("quarantine", task, attempt,
                         layout.quarantine_file_path(task.topic, task.broker_id, task.partition, task.start, task.end),
                         rel, rows=len(quarantine), bytes=len(data), format="jsonl"))
    if settings.slow_first_attempt_ms and attempt == 0 and task.task_id == 0:
        log.warning("fault injection: first attempt of task %s lingers %d ms after staging",
                    task.task_id, settings.slow_first_attempt_ms)
        time.sleep(settings.slow_first_attempt_ms / 1000.0)
    if settings.fail_first_attempt and attempt == 0:
        raise RuntimeError(f"fault injection ({'INGEST_FAIL_FIRST_ATTEMPT'}): first attempt of task {task.task_id} "
                           f"fails after staging {len(rows)} files")
    rows.append(_row("task", task, attempt, None, None, rows=messages, bytes=task.end - task.start,
                     messages=messages, quarantined=len(quarantine),
                     duration_ms=int((time.monotonic() - began) * 1000), last_time_ms=last_time,
                     cpu_ms=int((time.process_time() - cpu_began) * 1000)))
    log.info("task %d %s b%d p%d [%d, %d): %d messages, %d quarantined, %d files",
             task.task_id, task.topic, task.broker_id, task.partition, task.start, task.end, messages,
             len(quarantine), len(rows) - 1)
    return rows


def _quarantine_line(task: TaskRange, offset: int, next_offset: int, raw: bytes, reason: str) -> dict:
    return {"topic": task.topic, "broker_id": task.broker_id, "partition": task.partition, "offset": offset,
            "next_offset": next_offset, "reason": reason, "payload_b64": base64.b64encode(raw).decode()}


def _row(kind: str, task: TaskRange, attempt: int, path, staging, **values) -> dict[str, Any]:
    row = {name: None for name, _ in RESULT_FIELDS}
    row.update(kind=kind, task_id=task.task_id, attempt=attempt, path=path, staging=staging, topic=task.topic,
               broker_id=task.broker_id, partition=task.partition, start_offset=task.start, end_offset=task.end)
    row.update(values)
    return row
