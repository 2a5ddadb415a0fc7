"""A row's identity in the warehouse: ``(header.session, header.seq)``, or a Kafka record's position
``(_partition, _offset)``; read from data files, and filtered out.

The loader's data files (Avro or Parquet, :mod:`ingest.loader.writers`) hold decoded events. An
event with the product's header names itself: the producer session and its sequence number
identify a message uniquely, across every copy of it (a producer's retry that the log holds twice,
at two offsets, included), and that is the id wherever a row has it. A Kafka-format topic's row
of an event without that header (any producer's schema) is identified by where its record is in
the log, ``(topic, partition, offset)``: the loader writes the record's partition and offset as the
columns ``_partition`` and ``_offset`` (:mod:`ingest.loader.record_columns`; the topic is the
file's), so two rows with one position are two copies of one record. Two records with equal
values at two offsets are two records: without a header nothing says they are one event. A 0.7
topic's row without the header has no id (its files carry no offsets per row).

Compaction deduplicates on this id (:mod:`ingest.compaction.formats`) and a replay across a
compacted hour takes out exactly the rows it reloads by it (:mod:`ingest.loader.replay`). Pure
functions over a file's bytes.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from ingest.errors import CompactionError

AVRO, PARQUET = "avro", "parquet"

RowId = tuple[str, int] | tuple[int, int]
"""``(session, seq)`` of an event with the product's header, else ``(partition, offset)`` of a Kafka record."""

_HEADER_ID = ("session", "seq")
_POSITION = ("_partition", "_offset")


def _header_id(record: dict[str, Any]) -> tuple[str, int] | None:
    header = record.get("header")
    if isinstance(header, dict) and "session" in header and "seq" in header:
        return header["session"], header["seq"]
    return None


def message_id(record: dict[str, Any]) -> RowId:
    """The id of one decoded row (module docstring).

    Raises:
        CompactionError: the row has neither the header fields nor a Kafka record's position.
    """
    found = _header_id(record)
    if found is not None:
        return found
    if _POSITION[0] in record and _POSITION[1] in record:
        return record[_POSITION[0]], record[_POSITION[1]]
    raise CompactionError(f"record has no header.session/header.seq and no _partition/_offset (the position "
                          f"of a Kafka-format topic's record), so it has no identity: {str(record)[:200]}")


def id_columns(table) -> list:
    """The id of every row of a pyarrow table (or record batch) as columns: ``[session, seq]`` or ``[_partition, _offset]``.

    Raises:
        CompactionError: the table has neither (names its columns).
    """
    import pyarrow as pa  # deferred: heavy, and only the formats' users need it
    import pyarrow.compute as pc

    names = table.column_names
    if "header" in names:
        t = table.schema.field("header").type
        if pa.types.is_struct(t) and all(t.get_field_index(f) >= 0 for f in _HEADER_ID):
            header = table.column("header")
            return [pc.struct_field(header, f) for f in _HEADER_ID]
    if all(c in names for c in _POSITION):
        return [table.column(c) for c in _POSITION]
    raise CompactionError(f"Parquet rows have neither a 'header' struct with session and seq nor the _partition "
                          f"and _offset of a Kafka-format topic's records, so they have no identity "
                          f"(columns: {names})")


def message_ids(fmt: str, data: bytes) -> list[RowId]:
    """The id of every row of one file, in file order."""
    if fmt == AVRO:
        import fastavro  # deferred: heavy, and only the formats' users need it

        return [message_id(r) for r in fastavro.reader(io.BytesIO(data))]
    import pyarrow.parquet as pq  # deferred: heavy, and only the formats' users need it

    return list(zip(*(c.to_pylist() for c in id_columns(pq.read_table(io.BytesIO(data))))))


def session_ids(fmt: str, data: bytes) -> list[tuple[str, int]]:
    """The ``(header.session, header.seq)`` of every row of one file that has the product's header
    (none for a file of events without it)."""
    if fmt == AVRO:
        import fastavro  # deferred: heavy, and only the formats' users need it

        return [i for i in map(_header_id, fastavro.reader(io.BytesIO(data))) if i is not None]
    import pyarrow as pa  # deferred: heavy, and only the formats' users need it
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(io.BytesIO(data)).schema_arrow
    t = schema.field("header").type if "header" in schema.names else None
    if t is None or not pa.types.is_struct(t) or any(t.get_field_index(f) < 0 for f in _HEADER_ID):
        return []
    header = pq.read_table(io.BytesIO(data), columns=["header"]).column("header")
    return list(zip(*(pc.struct_field(header, f).to_pylist() for f in _HEADER_ID)))


@dataclass
class Filtered:
    """A file re-written without some rows: its bytes, the rows kept and the rows dropped."""

    data: bytes
    kept: int
    dropped: int


def without_ids(fmt: str, data: bytes, drop: set[RowId]) -> Filtered:
    """Re-write one file without the rows whose id (:func:`message_id`) is in ``drop``.

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
    ids = list(zip(*(c.to_pylist() for c in id_columns(table))))
    mask = pa.array([i not in drop for i in ids], pa.bool_())
    kept = table.filter(mask)
    out = io.BytesIO()
    pq.write_table(kept, out, compression=None if codec == "uncompressed" else codec)
    return Filtered(out.getvalue(), kept.num_rows, table.num_rows - kept.num_rows)
