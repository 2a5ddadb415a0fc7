"""Read, deduplicate and re-write one hour's data files (Avro or Parquet), streaming.

Functions over open files: the caller says how to open each input and each
output (storage paths in :mod:`ingest.compaction.compact`). A message is identified by ``(header.session,
header.seq)``, or, for a Kafka-format topic's event without that header, by its
record's ``(_partition, _offset)`` (:mod:`ingest.loader.row_ids`); the first
occurrence in input order (files sorted by name, rows in file order) wins, so the
result is deterministic and re-running a merge over its own output changes nothing.
Every column is kept as it is (a Kafka-format topic's record columns included).

The caller groups files by format and writer-schema id, so a schema change
inside an hour never forces records into a schema they were not written with;
each group yields its own output files.

Memory is bounded by the batch, not by the hour: Avro is read and written one
record (and one Avro block) at a time; Parquet in batches of about
``compaction.batch.bytes`` decoded (rows per batch from each input's row-group
metadata), and the merged file gets one row group per flushed batch. What
grows with the hour is :class:`SeenIds`, one bit per message id (plus the
bitmaps' overhead), so an hour far larger than the task's memory compacts.

The output is split into files of at most ``rows per file`` rows, estimated
from the input (bytes per committed row against ``compaction.target.bytes``),
in even slices of the committed row count: the rows are written as they come,
so the split cannot wait for the count of distinct rows; with duplicates, the
last file is that much shorter.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

from ingest.errors import CompactionError
from ingest.loader.row_ids import AVRO, PARQUET, RowId, id_columns, message_id

log = logging.getLogger(__name__)

FORMATS = (AVRO, PARQUET)


def format_of(name: str) -> str:
    """``avro`` or ``parquet`` from a file name; CompactionError otherwise."""
    ext = name.rsplit(".", 1)[-1].lower()
    if ext not in FORMATS:
        raise CompactionError(f"cannot compact {name!r}: extension .{ext} is not one of .avro, .parquet")
    return ext


DEFAULT_BATCH_BYTES = 32 * 1024 * 1024
READ_BUFFER_BYTES = 1024 * 1024
"""Parquet inputs are read through a buffer of this size, page by page, not a column chunk at once."""


@dataclass(frozen=True)
class Source:
    """One input file: how to open it (seekable, binary), its size, and the rows the loader committed in it."""

    open: Callable[[], BinaryIO]
    bytes: int
    rows: int


OpenOutput = Callable[[int], BinaryIO]
"""Opens output file number ``i`` (0, 1, ...) for writing; :func:`merge` closes it."""


@dataclass
class MergeResult:
    """What merging one schema group produced."""

    rows: list[int] = field(default_factory=list)      # rows per output file, in order
    rows_in: int = 0
    duplicates: int = 0


class SeenIds:
    """The message ids met so far, about one bit each.

    The second half of an id is a number that is dense within an hour: a producer
    session's sequence numbers, a partition's offsets. So the ids of one first half
    (a session, a partition) are bitmaps of :data:`CHUNK` consecutive numbers. A number
    that is no int (a null in Parquet) is kept in a plain set. Not thread-safe.
    """

    SHIFT = 12
    CHUNK = 1 << SHIFT
    _LOW = CHUNK - 1

    def __init__(self) -> None:
        self._chunks: dict[tuple[Any, int], bytearray] = {}
        self._other: set[tuple[Any, Any]] = set()

    def first(self, group: Any, number: Any) -> bool:
        """True when ``(group, number)`` is new (and remembers it)."""
        return self.mask((group,), (number,))[0]

    def mask(self, groups: Iterable[Any], numbers: Iterable[Any]) -> list[bool]:
        """For each id in order: True when it is new, counting the ids before it in the same call."""
        chunks, shift, low = self._chunks, self.SHIFT, self._LOW
        out = []
        append = out.append
        for group, number in zip(groups, numbers):
            if type(number) is not int:
                key = (group, number)
                new = key not in self._other
                self._other.add(key)
                append(new)
                continue
            bits = chunks.get((group, number >> shift))
            if bits is None:
                bits = chunks[(group, number >> shift)] = bytearray(self.CHUNK // 8)
            i = number & low
            byte = bits[i >> 3]
            bit = 1 << (i & 7)
            if byte & bit:
                append(False)
            else:
                bits[i >> 3] = byte | bit
                append(True)
        return out

    @property
    def nbytes(self) -> int:
        """The bitmaps' payload (what grows with the hour), for logs."""
        return len(self._chunks) * self.CHUNK // 8


def merge(fmt: str, inputs: Sequence[Source], open_output: OpenOutput, target_bytes: int,
          parquet_compression: str = "snappy", batch_bytes: int = DEFAULT_BATCH_BYTES) -> MergeResult:
    """Merge same-schema files into files near ``target_bytes``, dropping duplicates, streaming.

    Output size is estimated from the input (bytes per committed row), so files
    land near the target without re-encoding trials.
    """
    per_file = _file_rows(sum(s.bytes for s in inputs), sum(s.rows for s in inputs), target_bytes)
    if fmt == AVRO:
        return _merge_avro(inputs, open_output, per_file)
    return _merge_parquet(inputs, open_output, per_file, parquet_compression, batch_bytes)


def _rows_per_file(total_bytes: int, rows: int, target_bytes: int) -> int:
    if rows == 0:
        return 1
    per_row = max(1.0, total_bytes / rows)
    return max(1, int(target_bytes / per_row))


def _file_rows(total_bytes: int, rows: int, target_bytes: int) -> int:
    """Rows per output file: even slices of ``rows``, none above the estimate (avoids a tiny last file)."""
    per_file = _rows_per_file(total_bytes, rows, target_bytes)
    if rows == 0:
        return per_file
    return math.ceil(rows / math.ceil(rows / per_file))


def _merge_avro(inputs: Sequence[Source], open_output: OpenOutput, per_file: int) -> MergeResult:
    import fastavro

    result = MergeResult()
    with inputs[0].open() as f:
        head = fastavro.reader(f)
        schema, codec = head.writer_schema, head.codec or "null"
    parsed = fastavro.parse_schema(schema) if schema is not None else None
    seen = SeenIds()

    def kept() -> Iterator[dict]:
        for source in inputs:
            with source.open() as f:
                for record in fastavro.reader(f):
                    result.rows_in += 1
                    if seen.first(*message_id(record)):
                        yield record
                    else:
                        result.duplicates += 1

    records = kept()
    for first in records:
        written = 0

        def counted(rows: Iterator[dict]) -> Iterator[dict]:
            nonlocal written
            for row in rows:
                written += 1
                yield row

        with open_output(len(result.rows)) as out:
            fastavro.writer(out, parsed, counted(chain((first,), islice(records, per_file - 1))), codec=codec)
        result.rows.append(written)
    log.debug("avro merge: %d rows in, %d duplicates, id bitmaps %d bytes", result.rows_in, result.duplicates,
              seen.nbytes)
    return result


class _ParquetOutput:
    """Kept batches to output files of ``per_file`` rows, one row group per ``batch_bytes`` buffered."""

    def __init__(self, open_output: OpenOutput, schema: Any, per_file: int, compression: str | None,
                 batch_bytes: int) -> None:
        self._open, self._schema, self._per_file = open_output, schema, per_file
        self._compression, self._batch_bytes = compression, batch_bytes
        self.rows: list[int] = []
        self._buffer: list[Any] = []
        self._buffered_bytes = 0
        self._file_rows = 0       # rows of the current file, buffered ones included
        self._sink: BinaryIO | None = None
        self._writer: Any = None

    def add(self, batch: Any) -> None:
        while batch.num_rows:
            part = batch.slice(0, self._per_file - self._file_rows)
            batch = batch.slice(part.num_rows)
            self._buffer.append(part)
            self._buffered_bytes += part.nbytes
            self._file_rows += part.num_rows
            if self._buffered_bytes >= self._batch_bytes:
                self._flush()
            if self._file_rows == self._per_file:
                self._close_file()

    def finish(self) -> None:
        if self._file_rows:
            self._close_file()

    def abort(self) -> None:
        """Close what is open after a failure (the staged file is left for the run's staging cleanup)."""
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            if self._sink is not None:
                self._sink.close()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._buffer:
            return
        if self._writer is None:
            self._sink = self._open(len(self.rows))
            self._writer = pq.ParquetWriter(self._sink, self._schema, compression=self._compression)
        self._writer.write_table(pa.Table.from_batches(self._buffer, self._schema))
        self._buffer, self._buffered_bytes = [], 0

    def _close_file(self) -> None:
        self._flush()
        self._writer.close()
        self._sink.close()
        self._writer = self._sink = None
        self.rows.append(self._file_rows)
        self._file_rows = 0


def _conform(batch: Any, schema: Any) -> Any:
    """``batch`` in the group's unified schema: missing columns as nulls, null-typed ones cast."""
    import pyarrow as pa

    if batch.schema.equals(schema, check_metadata=False):
        return batch
    names = batch.schema.names
    columns = [batch.column(f.name).cast(f.type) if f.name in names else pa.nulls(batch.num_rows, f.type)
               for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _merge_parquet(inputs: Sequence[Source], open_output: OpenOutput, per_file: int, compression: str,
                   batch_bytes: int) -> MergeResult:
    import pyarrow as pa
    import pyarrow.parquet as pq

    result = MergeResult()
    schemas = []
    for source in inputs:
        with source.open() as f:
            schemas.append(pq.read_schema(f))
    schema = schemas[0] if len(schemas) == 1 else pa.unify_schemas(schemas, promote_options="default")
    out = _ParquetOutput(open_output, schema, per_file, None if compression == "none" else compression, batch_bytes)
    seen = SeenIds()
    try:
        for source in inputs:
            with source.open() as f:
                parquet = pq.ParquetFile(f, buffer_size=READ_BUFFER_BYTES)
                meta = parquet.metadata
                decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
                batch_rows = max(1, int(batch_bytes / max(1.0, decoded / max(1, meta.num_rows))))
                for batch in parquet.iter_batches(batch_size=batch_rows, use_threads=False):
                    result.rows_in += batch.num_rows
                    first_id, second_id = id_columns(batch)
                    keep = seen.mask(first_id.to_pylist(), second_id.to_pylist())
                    kept = sum(keep)
                    if kept < batch.num_rows:
                        result.duplicates += batch.num_rows - kept
                        batch = batch.filter(pa.array(keep, pa.bool_()))
                    out.add(_conform(batch, schema))
        out.finish()
    except BaseException:
        out.abort()
        raise
    result.rows = out.rows
    log.debug("parquet merge: %d rows in, %d duplicates, id bitmaps %d bytes", result.rows_in, result.duplicates,
              seen.nbytes)
    return result
