"""A row's identity in the warehouse, ``(header.session, header.seq)``: read from data files, and filtered out.

The loader's data files (Avro or Parquet, :mod:`ingest.loader.writers`) carry no
partition or offset per row; the producer session and its sequence number name a
message uniquely. Compaction deduplicates on this id (:mod:`ingest.compaction.formats`)
and a replay across a compacted hour takes out exactly the rows it reloads by it
(:mod:`ingest.loader.replay`). Pure functions over a file's bytes.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from ingest.errors import CompactionError

AVRO, PARQUET = "avro", "parquet"


def message_id(record: dict[str, Any]) -> tuple[str, int]:
    """``(header.session, header.seq)`` of one decoded row.

    Raises:
        CompactionError: the row has no such header fields.
    """
    try:
        header = record["header"]
        return header["session"], header["seq"]
    except (KeyError, TypeError) as exc:
        raise CompactionError(f"record has no header.session/header.seq: {str(record)[:200]}") from exc


def message_ids(fmt: str, data: bytes) -> list[tuple[str, int]]:
    """The ``(header.session, header.seq)`` of every row of one file, in file order."""
    if fmt == AVRO:
        import fastavro  # deferred: heavy, and only the formats' users need it

        return [message_id(r) for r in fastavro.reader(io.BytesIO(data))]
    import pyarrow.compute as pc  # deferred: heavy, and only the formats' users need it
    import pyarrow.parquet as pq

    header = pq.read_table(io.BytesIO(data), columns=["header"]).column("header")
    return list(zip(pc.struct_field(header, "session").to_pylist(), pc.struct_field(header, "seq").to_pylist()))


@dataclass
class Filtered:
    """A file re-written without some rows: its bytes, the rows kept and the rows dropped."""

    data: bytes
    kept: int
    dropped: int


def without_ids(fmt: str, data: bytes, drop: set[tuple[str, int]]) -> Filtered:
    """Re-write one file without the rows whose ``(header.session, header.seq)`` is in ``drop``.

    Every other row is kept as it is, in order, with the file's own writer schema
    and codec (Avro) or compression (Parquet): the replay of a compacted range
    (:mod:`ingest.loader.replay`) takes out exactly the rows it reloads.
    """
    if fmt == AVRO:
        import fastavro  # deferred: heavy, and only the formats' users need it

        reader = fastavro.reader(io.BytesIO(data))
        schema, codec = reader.writer_schema, reader.codec or "null"
        rows = list(reader)
        kept = [r for r in rows if message_id(r) not in drop]
        out = io.BytesIO()
        fastavro.writer(out, fastavro.parse_schema(schema), kept, codec=codec)
        return Filtered(out.getvalue(), len(kept), len(rows) - len(kept))
    import pyarrow as pa  # deferred: heavy, and only the formats' users need it
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(io.BytesIO(data))
    meta = pf.metadata
    codec = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "snappy"
    table = pf.read()
    ids = message_ids(PARQUET, data)
    mask = pa.array([i not in drop for i in ids], pa.bool_())
    kept = table.filter(mask)
    out = io.BytesIO()
    pq.write_table(kept, out, compression=None if codec == "uncompressed" else codec)
    return Filtered(out.getvalue(), kept.num_rows, table.num_rows - kept.num_rows)
