"""A task's per-message loop: decode every message, bucket it by event hour and schema, write it.

:func:`stage_messages` takes what :func:`ingest.loader.fetch.iter_range` yields:
single messages, :class:`~ingest.records.message_batch.MessageBatch` es (the valid
messages of one fetch), :class:`~ingest.loader.fetch.Corrupt` messages and
:class:`~ingest.loader.fetch.Damaged` ranges. A batch takes the bulk path when it
can: every payload decoded by the schema's generated decoder in one call straight
into one list per leaf column (``RowLayout.decode_columns``: framing checked by the
decoder itself, no tuple per row), the event times are then one of those lists, and
when the whole chunk falls in one hour (events arrive mostly in time order) the
columns go to their bucket with one ``write_columns`` (Avro output: the bodies with
one ``write_raw_many``). Anything else (a
payload the generated decoder refuses, a schema without one, a batch across an
hour boundary, a time outside the calendar) goes through the per-message path,
which has the precise errors and quarantine reasons; both paths give the same
rows in the same order (tests/loader/test_staging_chunks.py).

A Kafka-format topic's batches (:class:`~ingest.loader.kafka_fetch.KafkaBatch`) take the bulk path to
Parquet (the values through the column decoder, the record columns as whole arrays); single records
(:class:`~ingest.loader.kafka_fetch.KafkaMessage`) take the per-message path. Each row gets the
record's key, headers, timestamp, partition and offset as the reserved columns of
:mod:`ingest.loader.record_columns`, and an event without the product's ``header`` is bucketed by
the record's timestamp.
"""
from __future__ import annotations

import gc
import logging
import posixpath
from dataclasses import dataclass, field
from itertools import islice, repeat
from operator import add, itemgetter
from typing import TYPE_CHECKING, Any, Iterable

from ingest.errors import EventDecodeError, SchemaError
from ingest.events.envelope import PREFIX_SIZE
from ingest.loader import layout, record_columns
from ingest.loader.fetch import Corrupt, Damaged
from ingest.loader.kafka_fetch import KafkaBatch
from ingest.loader.quarantine import QuarantinedMessage
from ingest.records.message_batch import MessageBatch

if TYPE_CHECKING:
    from ingest.loader.plan import TaskRange
    from ingest.storage import Storage

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000


class _Bucket:
    __slots__ = ("staging", "writer", "schema_id", "min_t", "max_t", "dt", "hour")

    def __init__(self, staging, writer, schema_id, dt, hour):
        self.staging, self.writer, self.schema_id, self.dt, self.hour = staging, writer, schema_id, dt, hour
        self.min_t = None
        self.max_t = None


@dataclass(slots=True)
class Staged:
    """What :func:`stage_messages` leaves: open data files per (hour index, schema id), the
    quarantined messages, the damaged ranges skipped (``[start, end, time before, time after,
    messages]``, messages -1 when the broker could not count them)
    and the counters. ``stage_dir`` is this attempt's own directory."""

    stage_dir: str
    buckets: dict[tuple[int, int], _Bucket] = field(default_factory=dict)
    quarantine: list[QuarantinedMessage] = field(default_factory=list)
    damaged: list[list] = field(default_factory=list)
    corrupt_offsets: list[int] = field(default_factory=list)  # messages that failed their CRC
    messages: int = 0
    last_time_ms: int | None = None


class _Stager:
    """The loop's state between items (one per :func:`stage_messages` call)."""

    def __init__(self, task, settings, storage, decoder, staged: Staged) -> None:
        self.task, self.settings, self.storage, self.decoder, self.staged = task, settings, storage, decoder, staged
        self.hours: dict[int, tuple[str, int]] = {}  # hour index -> (dt, hour)
        self.fast: dict[bytes, tuple[Any, int]] = {}  # envelope prefix (magic + schema id) -> (RowLayout, schema id)
        self.last_key: tuple[int, int] | None = None  # (hour index, schema id) of last_bucket
        self.last_bucket: _Bucket | None = None
        self.raw = settings.format == "avro"  # Avro output appends the already-encoded bodies
        self.waiting: list[list] = []  # damaged ranges waiting for the event time of the next loaded message
        self.first_t = self.last_t = 0  # event times of the first and last row of the rows being put
        self.kafka = task.kafka  # rows get the record columns (ingest.loader.record_columns)

    def bucket(self, hour_index: int, schema_id: int, payload, offset: int, row_layout) -> _Bucket:
        key = (hour_index, schema_id)
        if key == self.last_key:
            return self.last_bucket  # events arrive mostly in time order: same bucket as the last one
        staged = self.staged
        bucket = staged.buckets.get(key)
        if bucket is None:
            schema = self.decoder.writer_schema(schema_id, payload, topic=self.task.topic, offset=offset)
            refuse_path_columns(self.task.topic, schema_id, schema)
            if self.kafka:
                refuse_record_columns(self.task.topic, schema_id, schema)
                schema = record_columns.with_record_columns(schema)
            bucket = staged.buckets[key] = _open_bucket(staged.stage_dir, self.hours[hour_index], schema_id, schema,
                                                        row_layout, self.settings, self.storage)
        self.last_key, self.last_bucket = key, bucket
        return bucket

    def loaded(self, first_t: int, last_t: int, n: int) -> None:
        self.staged.last_time_ms = last_t
        self.staged.messages += n
        if self.waiting:
            for d in self.waiting:
                d[3] = first_t
            self.waiting.clear()

    def one(self, item) -> None:
        """One valid message (``MessageAndOffset``), the per-message path."""
        task, payload = self.task, item.payload
        # Fast path: framing + schema id seen before with a generated row decoder.
        # Anything it refuses goes through decode_row, which has the precise errors.
        hit = self.fast.get(payload[:PREFIX_SIZE])
        record = None
        if hit is not None:
            row_layout, schema_id = hit
            try:
                record = row_layout.decode(payload)
            except Exception:
                record = None
        try:
            if record is None:
                schema_id, record, row_layout = self.decoder.decode_row(payload, topic=task.topic, offset=item.offset)
                if row_layout is not None:
                    self.fast[payload[:PREFIX_SIZE]] = (row_layout, schema_id)
            if row_layout is not None:
                t = record[row_layout.time_index]
            elif self.kafka and "header" not in record:
                t = item.timestamp   # an event without the product's header: the record's time
            else:
                t = record["header"]["time"]
            hour_index = t // HOUR_MS
            if hour_index not in self.hours:
                self.hours[hour_index] = layout.hour_bucket(hour_index * HOUR_MS)
        except EventDecodeError as exc:
            self.staged.quarantine.append(_quarantined(task, item.offset, item.next_offset, payload, str(exc)))
            return
        except (KeyError, TypeError, ValueError, OverflowError, OSError) as exc:
            self.staged.quarantine.append(_quarantined(
                task, item.offset, item.next_offset, payload,
                f"topic {task.topic} offset {item.offset}: no usable header.time for hour bucketing: {exc!r}"))
            return
        bucket = self.bucket(hour_index, schema_id, payload, item.offset, row_layout)
        if self.kafka:
            self.put_record(bucket, payload, record, t, item)
        else:
            self.put(bucket, payload, record, t)

    def put_record(self, bucket: _Bucket, payload, record, t: int, item) -> None:
        """One Kafka record's row: the event plus its key, headers and timestamp."""
        key, headers, ts, partition, offset = item.key, item.headers, item.timestamp, self.task.partition, item.offset
        if self.raw:
            payload = bytes(payload[PREFIX_SIZE:]) + record_columns.encode(key, headers, ts, partition, offset)
        elif isinstance(record, tuple):
            record = record + record_columns.row_values(key, headers, ts, partition, offset)
        else:
            record = {**record, **record_columns.record_values(key, headers, ts),
                      **record_columns.position_values(partition, offset)}
        self.put(bucket, payload, record, t, raw_prefix=0)

    def put(self, bucket: _Bucket, payload, record, t: int, raw_prefix: int = PREFIX_SIZE) -> None:
        if self.raw:
            bucket.writer.write_raw(payload[raw_prefix:])
        else:
            bucket.writer.write(record)
        if bucket.min_t is None:
            bucket.min_t = bucket.max_t = t
        elif t < bucket.min_t:
            bucket.min_t = t
        elif t > bucket.max_t:
            bucket.max_t = t
        self.loaded(t, t, 1)

    def batch(self, c: MessageBatch) -> None:
        """The valid messages of one fetch (payload bounds in one buffer): the bulk path when it
        applies, else one by one."""
        fast, data, b, hs = self.fast, c.data, c.bounds, c.header_size
        n = len(b) - 1
        i = 0
        while i < n and fast.get(data[b[i] + hs:b[i] + hs + PREFIX_SIZE]) is None:
            self.one(c.message(i))  # first messages of a schema: the per-message path learns its decoder
            i += 1
        if i == n:
            return
        row_layout, schema_id = fast[data[b[i] + hs:b[i] + hs + PREFIX_SIZE]]
        # payloads cut out first: the decoder's positions then stay small ints (cached, no
        # allocation); 6% fewer instructions per row than decoding in place (cachegrind)
        starts = map(add, islice(b, i, n), repeat(hs)) if hs else islice(b, i, n)
        payloads = list(map(data.__getitem__, map(slice, starts, islice(b, i + 1, None))))
        try:
            # refuses other framing, so one schema id. Parquet: straight into one list per leaf
            # column (no tuple per row). Avro keeps the bodies and needs only the check and the
            # times: the row tuples cost fewer instructions than the columns' appends there.
            if self.raw:
                columns = None
                lo, hi, hour_index = self.hour_of(list(map(itemgetter(row_layout.time_index),
                                                           map(row_layout.decode, payloads))))
            else:
                from ingest.loader.writers import column_arrays  # deferred: pyarrow (tasks only)

                columns = row_layout.decode_columns(payloads)
                lo, hi, hour_index = self.hour_of(columns[row_layout.time_index])
                columns = column_arrays(row_layout, columns)  # checks the strings' UTF-8
        except Exception:  # noqa: BLE001 - the per-message path decides, with the precise errors
            for j in range(i, n):
                self.one(c.message(j))
            return
        bodies = [p[PREFIX_SIZE:] for p in payloads] if self.raw else None
        first = c.base_offset + b[i] if hs else c.offsets[i]
        self.put_many(hour_index, schema_id, row_layout, payloads[0], first, columns, len(payloads), bodies, lo, hi)

    def kafka_batch(self, kb: KafkaBatch) -> None:
        """The records of one Kafka-format batch: to Parquet, the values through the column decoder and
        the record columns as whole arrays (:mod:`ingest.loader.record_arrays`); records one by one for
        Avro, for the first records of a schema (the per-message path learns its decoder), and for any
        batch the bulk path refuses (the per-message path then decides, with the precise errors)."""
        fast, values = self.fast, kb.values
        n = len(values)
        i = 0
        if not self.raw:
            while i < n and fast.get(values[i][:PREFIX_SIZE]) is None:
                self.one(kb.message(i))
                i += 1
        if self.raw or i == n:
            for j in range(i, n):
                self.one(kb.message(j))
            return
        row_layout, schema_id = fast[values[i][:PREFIX_SIZE]]
        payloads = values if i == 0 else values[i:]
        try:
            from ingest.loader.record_arrays import record_arrays  # deferred: pyarrow (tasks only)
            from ingest.loader.writers import column_arrays

            columns = row_layout.decode_columns(payloads)   # refuses other framing, so one schema id
            lo, hi, hour_index = self.hour_of(columns[row_layout.time_index])
            arrays = column_arrays(row_layout, columns) + record_arrays(kb, i, self.task.partition)
        except Exception:  # noqa: BLE001 - the per-message path decides, with the precise errors
            for j in range(i, n):
                self.one(kb.message(j))
            return
        self.put_many(hour_index, schema_id, row_layout, payloads[0], kb.offsets[i], arrays, n - i, None, lo, hi)

    def hour_of(self, times: list) -> tuple[int, int, int]:
        """(min time, max time, hour index) of the event times of rows in one hour; raises otherwise."""
        lo, hi = min(times), max(times)
        hour_index = lo // HOUR_MS
        if hour_index != hi // HOUR_MS:
            raise ValueError("rows across an hour boundary")
        if hour_index not in self.hours:
            self.hours[hour_index] = layout.hour_bucket(hour_index * HOUR_MS)
        self.first_t, self.last_t = times[0], times[-1]
        return lo, hi, hour_index

    def put_many(self, hour_index, schema_id, row_layout, payload, offset, columns, n, bodies, lo, hi) -> None:
        bucket = self.bucket(hour_index, schema_id, payload, offset, row_layout)
        if bodies is not None:
            bucket.writer.write_raw_many(bodies)
        else:
            bucket.writer.write_columns(columns, n)
        if bucket.min_t is None:
            bucket.min_t, bucket.max_t = lo, hi
        else:
            if lo < bucket.min_t:
                bucket.min_t = lo
            if hi > bucket.max_t:
                bucket.max_t = hi
        self.loaded(self.first_t, self.last_t, n)


def stage_messages(items: Iterable, task: TaskRange, settings, storage: Storage, decoder,
                   staged: Staged) -> Staged:
    """Decode every message, bucket it by event hour and schema, and write it to its bucket's file.

    ``items`` are what :func:`ingest.loader.task.read_range` yields. A message that is
    corrupt or does not decode, or has no usable ``header.time``, goes to
    ``staged.quarantine``; a damaged range to ``staged.damaged`` (with the event
    times around it). The data files stay open
    (:func:`ingest.loader.task.close_data_files` finishes them). This is the
    per-message loop: nothing here may cost more per message than it must.
    """
    stager = _Stager(task, settings, storage, decoder, staged)
    # Decoded records hold no reference cycles; the cyclic collector would only rescan
    # the growing row-group buffer again and again (measured: ~40% of a Parquet task).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for item in items:
            cls = item.__class__
            if cls is MessageBatch:
                stager.batch(item)
            elif cls is KafkaBatch:
                stager.kafka_batch(item)
            elif cls is Corrupt:
                staged.corrupt_offsets.append(item.offset)
                staged.quarantine.append(_quarantined(task, item.offset, item.next_offset, item.raw, item.reason))
            elif cls is Damaged:
                stager.waiting.append([item.offset, item.next_offset, staged.last_time_ms, None, item.messages])
                staged.damaged.append(stager.waiting[-1])
            else:
                stager.one(item)
    finally:
        if gc_was_enabled:
            gc.enable()
    return staged


def refuse_path_columns(topic: str, schema_id: int, schema: dict) -> None:
    """Raise :class:`SchemaError` when a top-level field has the name of a column readers take from the path.

    Written, such a field's values would be replaced by the directory's in every reader, so the
    run fails instead (nothing committed; the events wait on the brokers), as for a schema the
    output format cannot hold.
    """
    taken = layout.path_columns_in(schema)
    if taken:
        raise SchemaError(
            f"topic {topic}, schema id {schema_id}: top-level field(s) {', '.join(taken)} have the name of a "
            f"column that readers take from the warehouse's paths ({', '.join(layout.PATH_COLUMNS)}) and would "
            f"replace without a word; nothing of this run is committed. Register a schema version without them "
            f"(rename the field), or leave the topic out with topics.blacklist until its producers do")


def refuse_record_columns(topic: str, schema_id: int, schema: dict) -> None:
    """Raise :class:`SchemaError` when a Kafka-format topic's event schema has a top-level field named like
    a record column (``_key``, ``_headers``, ``_timestamp``, ``_partition``, ``_offset``:
    :mod:`ingest.loader.record_columns`), which
    the loader writes beside the event's fields; the run fails as for a path column."""
    taken = record_columns.record_columns_in(schema)
    if taken:
        raise SchemaError(
            f"topic {topic}, schema id {schema_id}: top-level field(s) {', '.join(taken)} have the name of a "
            f"column the loader writes for every record of a Kafka-format topic "
            f"({', '.join(record_columns.RECORD_COLUMNS)}: the record's key, headers, timestamp, partition and "
            f"offset); nothing of "
            f"this run is committed. Register a schema version without them (rename the field), or leave the "
            f"topic out with topics.blacklist until its producers do")


def _open_bucket(stage_dir_: str, dt_hour: tuple[str, int], schema_id: int, schema: dict, row_layout,
                 settings, storage: Storage) -> _Bucket:
    from ingest.loader.writers import open_writer  # deferred: imports pyarrow and fastavro (tasks only)

    dt, hour = dt_hour
    rel = posixpath.join(stage_dir_, layout.staged_name(f"{dt}-{hour:02d}-{schema_id}.{settings.format}"))
    writer = open_writer(settings.format, storage.open_write(storage.join(rel)), schema,
                         avro_codec=settings.avro_codec, parquet_compression=settings.parquet_compression,
                         row_group_rows=settings.row_group_rows, layout=row_layout)
    return _Bucket(rel, writer, schema_id, dt, hour)


def _quarantined(task: TaskRange, offset: int, next_offset: int, raw, reason: str) -> QuarantinedMessage:
    return QuarantinedMessage(task.topic, task.broker_id, task.partition, offset, next_offset, reason, bytes(raw))
