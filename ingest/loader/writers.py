"""Output files: Avro container files (fastavro) and Parquet (pyarrow) with the nested header.

Both writers take decoded records (dicts exactly as Avro decoding returns them)
one at a time and write them to an open binary file; ``close()`` finishes the
file and returns the row count. The Avro file carries the event's writer schema;
the Parquet file carries the same structure mapped by :func:`arrow_schema`
(records -> struct, so ``header`` stays a struct with ``time``, ``server``, ...).

Memory: Parquet buffers at most ``row_group_rows`` records before writing a row
group; Avro buffers one block (fastavro's ``sync_interval``).
"""
from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from typing import Any, BinaryIO

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import SchemaError

log = logging.getLogger(__name__)

_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_LOGICAL = {
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
}


def arrow_type(schema: Any, named: dict[str, pa.DataType] | None = None) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) for an Avro schema.

    Raises:
        SchemaError: a union of several non-null branches (no Parquet equivalent; use avro).
    """
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema], schema == "null"
        if schema in named:
            return named[schema], False
        raise SchemaError(f"unknown Avro type name {schema!r}")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise SchemaError(f"Avro union {schema} has several non-null branches; Parquet output supports "
                              f"only [\"null\", T]; use format=avro for this topic")
        t, _ = arrow_type(branches[0], named)
        return t, len(branches) < len(schema)
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)], False
    if logical == "decimal":
        return pa.decimal128(schema["precision"], schema.get("scale", 0)), False
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            t, nullable = arrow_type(f["type"], named)
            fields.append(pa.field(f["name"], t, nullable=nullable))
        st = pa.struct(fields)
        named[schema["name"]] = st
        if schema.get("namespace"):
            named[f"{schema['namespace']}.{schema['name']}"] = st
        return st, False
    if kind == "array":
        t, nullable = arrow_type(schema["items"], named)
        return pa.list_(pa.field("element", t, nullable=nullable)), False
    if kind == "map":
        t, nullable = arrow_type(schema["values"], named)
        return pa.map_(pa.string(), pa.field("value", t, nullable=nullable)), False
    if kind == "enum":
        named[schema["name"]] = pa.string()
        return pa.string(), False
    if kind == "fixed":
        named[schema["name"]] = pa.binary(schema["size"])
        return pa.binary(schema["size"]), False
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind], kind == "null"
    raise SchemaError(f"unsupported Avro schema for Parquet output: {schema!r}")


def arrow_schema(avro_schema: dict) -> pa.Schema:
    """The Arrow schema of a record schema (top-level fields become columns)."""
    st, _ = arrow_type(avro_schema)
    return pa.schema(list(st))


class AvroFileWriter:
    """Streams records into one Avro container file with the writer schema."""

    def __init__(self, fo: BinaryIO, avro_schema: dict, codec: str = "snappy") -> None:
        self._fo = fo
        self._writer = fastavro.write.Writer(fo, fastavro.parse_schema(avro_schema), codec=codec)
        self.rows = 0

    def write(self, record: dict) -> None:
        self._writer.write(record)
        self.rows += 1

    def write_many(self, records: list[dict]) -> None:
        for r in records:
            self._writer.write(r)
        self.rows += len(records)

    def close(self) -> int:
        self._writer.flush()
        self._fo.close()
        return self.rows


def _long(n: int) -> bytes:
    """Avro long: zigzag varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _bytes(b: bytes) -> bytes:
    return _long(len(b)) + b


_CRC = struct.Struct(">I")


class AvroRawWriter:
    """An Avro container file built from records that are already Avro-encoded (payload bodies).

    Container layout (Avro spec): ``Obj\x01``, metadata map {``avro.schema``,
    ``avro.codec``}, 16-byte sync marker; then blocks of ``count:long size:long
    data sync``. Codecs: ``null``; ``deflate`` (raw deflate); ``snappy`` (raw snappy
    followed by the big-endian CRC-32 of the uncompressed block).
    """

    def __init__(self, fo: BinaryIO, avro_schema: dict, codec: str = "snappy", block_bytes: int = 256 * 1024) -> None:
        if codec not in ("null", "deflate", "snappy"):
            raise SchemaError(f"unknown avro.codec {codec!r}: allowed are null, deflate, snappy")
        self._fo = fo
        self._codec = codec
        self._sync = os.urandom(16)
        self._block = bytearray()
        self._count = 0
        self._block_bytes = block_bytes
        self.rows = 0
        meta = _long(2) + _bytes(b"avro.schema") + _bytes(json.dumps(avro_schema).encode()) \
            + _bytes(b"avro.codec") + _bytes(codec.encode()) + _long(0)
        fo.write(b"Obj\x01" + meta + self._sync)
        if codec == "snappy":
            from cramjam import snappy

            self._snappy = snappy.compress_raw

    def write_raw(self, body) -> None:
        self._block += body
        self._count += 1
        if len(self._block) >= self._block_bytes:
            self._flush()

    def write_raw_many(self, bodies) -> None:
        """``write_raw`` of each body in turn (same blocks as one call per body)."""
        block, limit = self._block, self._block_bytes
        for body in bodies:
            block += body
            self._count += 1
            if len(block) >= limit:
                self._flush()
                block = self._block

    def _flush(self) -> None:
        if not self._count:
            return
        data = bytes(self._block)
        if self._codec == "deflate":
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            data = c.compress(data) + c.flush()
        elif self._codec == "snappy":
            data = bytes(self._snappy(data)) + _CRC.pack(zlib.crc32(self._block) & 0xFFFFFFFF)
        self._fo.write(_long(self._count) + _long(len(data)) + data + self._sync)
        self.rows += self._count
        self._block = bytearray()
        self._count = 0

    def close(self) -> int:
        self._flush()
        self._fo.close()
        return self.rows


class ParquetFileWriter:
    """Buffers records into row groups of one Parquet file.

    Records are dicts (``Table.from_pylist``) or, with ``layout`` (a
    :class:`ingest.loader.decode.RowLayout`), its leaf values in depth-first field
    order: whole chunks as one Arrow array per leaf (:meth:`write_columns`, what
    :func:`column_arrays` makes of ``RowLayout.decode_columns``) or single row tuples
    (:meth:`write`). The buffer then holds, per leaf and in row order, those arrays
    and lists of single rows' values; at a row group's end each piece's leaves are
    put back together into the fields (``StructArray.from_arrays`` for nested
    records) and the pieces' tables joined without a copy, with no per-record dict
    or tuple.
    """

    def __init__(self, fo: BinaryIO, avro_schema: dict, compression: str = "snappy", row_group_rows: int = 131_072,
                 layout: Any = None) -> None:
        self._fo = fo
        self.schema = arrow_schema(avro_schema)
        self._writer = pq.ParquetWriter(fo, self.schema, compression=None if compression == "none" else compression)
        self._buf: list = []
        self._row_group_rows = row_group_rows
        self._layout = layout
        self._leaves = _leaves(self.schema) if layout is not None else []
        self._pieces: list[list] = [[] for _ in self._leaves]  # per leaf: arrays and value lists, in row order
        self._tail: list[list] | None = None  # the value lists single rows are appended to (last pieces)
        self._pending = 0  # rows in self._pieces
        self.rows = 0

    def write(self, record) -> None:
        if self._layout is not None:
            if self._tail is None:
                self._tail = [[] for _ in self._leaves]
                for pieces, values in zip(self._pieces, self._tail):
                    pieces.append(values)
            for values, value in zip(self._tail, record):
                values.append(value)
            self._pending += 1
            if self._pending >= self._row_group_rows:
                self._flush()
            return
        self._buf.append(record)
        if len(self._buf) >= self._row_group_rows:
            self._flush()

    def write_many(self, records: list) -> None:
        if self._layout is not None:
            for record in records:
                self.write(record)
            return
        self._buf.extend(records)
        if len(self._buf) >= self._row_group_rows:
            self._flush()

    def write_columns(self, arrays: list, n: int) -> None:
        """``n`` rows given as one Arrow array per leaf (:func:`column_arrays`; needs ``layout``)."""
        if self._layout is None:
            raise SchemaError("write_columns needs a writer opened with the schema's row layout")
        if len(arrays) != len(self._pieces):
            raise SchemaError(f"write_columns got {len(arrays)} columns; this file's schema has "
                              f"{len(self._pieces)} leaf columns")
        self._tail = None
        for pieces, array in zip(self._pieces, arrays):
            pieces.append(array)
        self._pending += n
        if self._pending >= self._row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self._layout is not None:
            if not self._pending:
                return
            n = self._pending
            # one table per piece (every leaf has the same pieces), joined without copying:
            # concatenating each leaf's arrays instead copies every value once more
            tables = []
            for k in range(len(self._pieces[0])):
                columns = iter([p[k] if isinstance(p[k], pa.Array) else pa.array(p[k], type=f.type)
                                for p, f in zip(self._pieces, self._leaves)])
                tables.append(pa.Table.from_arrays([_column(f.type, columns) for f in self.schema],
                                                   schema=self.schema))
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            self._writer.write_table(table, row_group_size=n)
            self.rows += n
            self._pieces = [[] for _ in self._leaves]
            self._tail = None
            self._pending = 0
        elif self._buf:
            table = pa.Table.from_pylist(self._buf, schema=self.schema)
            self._writer.write_table(table, row_group_size=len(self._buf))
            self.rows += len(self._buf)
            self._buf = []

    def close(self) -> int:
        self._flush()
        self._writer.close()
        self._fo.close()
        return self.rows


def column_arrays(layout: Any, columns: list[list]) -> list[pa.Array]:
    """The Arrow arrays of ``RowLayout.decode_columns``' lists, one per leaf of the layout's schema.

    String leaves arrive as their bytes (a list, or from the compiled decoder one tuple of Arrow
    buffers per bytes/string leaf): each becomes a binary array cast to string, which checks
    every value's UTF-8 (as strictly as Python's ``bytes.decode``: no surrogates, no overlong
    forms). Raises ``pyarrow.ArrowInvalid`` on an invalid value (the caller then hands the chunk to
    the per-message path, which quarantines that payload with the deserializer's message).
    """
    types = layout.arrow_types
    if types is None:
        types = layout.arrow_types = [f.type for f in _leaves(arrow_schema(layout.schema))]
    raw = layout.raw_strings
    return [_binary(values, t) if values.__class__ is tuple else
            pa.array(values, type=_BINARY).cast(t) if i in raw else pa.array(values, type=t)
            for i, (values, t) in enumerate(zip(columns, types))]


_BINARY = pa.binary()


def _binary(buffers: tuple, t: pa.DataType) -> pa.Array:
    """A bytes or string leaf that the compiled decoder (:mod:`ingest.loader.cdecode`) returns as Arrow's
    binary layout, ``(validity bitmap or None, int32 offsets, data)``; cast to ``t`` (for strings the cast
    checks the UTF-8, as for the lists above)."""
    valid, offsets, data = buffers
    array = pa.Array.from_buffers(_BINARY, len(offsets) // 4 - 1,
                                  [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets),
                                   pa.py_buffer(data)])
    return array if t == _BINARY else array.cast(t)


def _leaves(fields) -> list[pa.Field]:
    """Leaf fields in depth-first order (the order of a RowLayout's tuple)."""
    out = []
    for f in fields:
        out.extend(_leaves(list(f.type)) if pa.types.is_struct(f.type) else [f])
    return out


def _column(t: pa.DataType, columns) -> pa.Array:
    """The array of one field from the leaf arrays (consumed in depth-first order)."""
    if pa.types.is_struct(t):
        children = [_column(t.field(i).type, columns) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=[t.field(i) for i in range(t.num_fields)])
    return next(columns)


def open_writer(fmt: str, fo: BinaryIO, avro_schema: dict, *, avro_codec: str = "snappy",
                parquet_compression: str = "snappy", row_group_rows: int = 131_072, layout: Any = None):
    """An :class:`AvroRawWriter` or :class:`ParquetFileWriter` for ``fmt`` (``layout``: Parquet row tuples)."""
    if fmt == "avro":
        return AvroRawWriter(fo, avro_schema, avro_codec)
    if fmt == "parquet":
        return ParquetFileWriter(fo, avro_schema, parquet_compression, row_group_rows, layout)
    raise SchemaError(f"unknown output format {fmt!r}: allowed are avro, parquet")
