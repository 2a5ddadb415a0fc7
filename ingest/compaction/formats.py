"""Read, deduplicate and re-write one hour's data files (Avro or Parquet).

Pure functions over bytes: the caller fetches the files from storage and
writes the results back. A message is identified by ``(header.session,
header.seq)``, or, for a Kafka-format topic's event without that header, by its
record's ``(_partition, _offset)`` (:mod:`ingest.loader.row_ids`); the first
occurrence in input order (files sorted by name, rows in file order) wins, so the
result is deterministic and re-running a merge over its own output changes nothing.
Every column is kept as it is (a Kafka-format topic's record columns included).

The caller groups files by format and writer-schema id, so a schema change
inside an hour never forces records into a schema they were not written with;
each group yields its own output files.
"""
from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass, field
from typing import Sequence

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


@dataclass
class MergeResult:
    """What merging one schema group produced."""

    files: list[bytes] = field(default_factory=list)   # encoded output files, in order
    rows: list[int] = field(default_factory=list)      # rows per output file
    rows_in: int = 0
    duplicates: int = 0


def merge(fmt: str, inputs: Sequence[bytes], target_bytes: int, parquet_compression: str = "snappy") -> MergeResult:
    """Merge same-schema files into files near ``target_bytes``, dropping duplicates.

    Output size is estimated from the input (bytes per surviving row), so files
    land near the target without re-encoding trials.
    """
    if fmt == AVRO:
        return _merge_avro(inputs, target_bytes)
    return _merge_parquet(inputs, target_bytes, parquet_compression)


def _rows_per_file(total_bytes: int, rows: int, target_bytes: int) -> int:
    if rows == 0:
        return 1
    per_row = max(1.0, total_bytes / rows)
    return max(1, int(target_bytes / per_row))


def _split(n: int, per_file: int) -> list[tuple[int, int]]:
    """Even slices of ``n`` rows, none above ``per_file`` (avoids a tiny last file)."""
    if n == 0:
        return []
    count = math.ceil(n / per_file)
    size = math.ceil(n / count)
    return [(i, min(n, i + size)) for i in range(0, n, size)]


def _merge_avro(inputs: Sequence[bytes], target_bytes: int) -> MergeResult:
    import fastavro

    result = MergeResult()
    seen: set[RowId] = set()
    kept: list[dict] = []
    schema = None
    codec = "null"
    for data in inputs:
        reader = fastavro.reader(io.BytesIO(data))
        if schema is None:
            schema = reader.writer_schema
            codec = reader.codec or "null"
        for record in reader:
            result.rows_in += 1
            mid = message_id(record)
            if mid in seen:
                result.duplicates += 1
                continue
            seen.add(mid)
            kept.append(record)
    parsed = fastavro.parse_schema(schema) if schema is not None else None
    per_file = _rows_per_file(sum(len(d) for d in inputs), result.rows_in, target_bytes)
    for lo, hi in _split(len(kept), per_file):
        out = io.BytesIO()
        fastavro.writer(out, parsed, kept[lo:hi], codec=codec)
        result.files.append(out.getvalue())
        result.rows.append(hi - lo)
    return result


def _merge_parquet(inputs: Sequence[bytes], target_bytes: int, compression: str) -> MergeResult:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    result = MergeResult()
    tables = [pq.read_table(io.BytesIO(d)) for d in inputs]
    table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    result.rows_in = table.num_rows
    first_id, second_id = id_columns(table)
    keyed = pa.table({"s": first_id, "q": second_id, "i": pa.array(range(table.num_rows), pa.int64())})
    first = keyed.group_by(["s", "q"], use_threads=False).aggregate([("i", "min")])
    keep = pc.sort_indices(first.column("i_min"))
    indices = pc.take(first.column("i_min"), keep)
    deduped = table.take(indices)
    result.duplicates = table.num_rows - deduped.num_rows
    per_file = _rows_per_file(sum(len(d) for d in inputs), result.rows_in, target_bytes)
    codec = None if compression == "none" else compression
    for lo, hi in _split(deduped.num_rows, per_file):
        out = io.BytesIO()
        pq.write_table(deduped.slice(lo, hi - lo), out, compression=codec)
        result.files.append(out.getvalue())
        result.rows.append(hi - lo)
    return result
