"""The record columns of Kafka-format topics: each record's key, headers, timestamp and position beside
its event.

A Kafka record carries more than its value: a key, headers and a timestamp; and it has a place in
its log, a partition and an offset, which identify it. The loader keeps them as five reserved
top-level columns after the event's own fields (the payload, the record's value, is the framed
Avro event)::

    _key        ["null", "bytes"]                                   the record's key; null: none
    _headers    array of ingest.kafka.RecordHeader                  the record's headers, in order
                  {key: string, value: ["null", "bytes"]}
    _timestamp  long                                                the record's timestamp, ms since the
                                                                    epoch (CreateTime, or LogAppendTime
                                                                    when the topic sets it)
    _partition  int                                                 the record's partition
    _offset     long                                                the record's offset in it

``(_topic, _partition, _offset)`` is a record's identity (``_topic`` is the path's): compaction and
a replay across a compacted hour tell the rows of events without the product's header apart by it
(:mod:`ingest.loader.row_ids`). The first three are the record's contents (:data:`CONTENT_COLUMNS`,
what the Spark source adds to its rows, beside its own ``partition`` and ``offset``).

Named like the path-derived ``_topic`` column (:data:`ingest.loader.layout.PATH_COLUMNS`): an
event schema of a Kafka-format topic may not have a top-level field of one of these names (the
task refuses it, as it refuses the path columns). 0.7 topics' records have none of these and their
files get no such columns.

Avro output: a record's Avro binary is its fields' encodings one after the other, so a row is the
producer's body, copied, followed by :func:`encode` of the five (no re-encoding). Parquet output:
the row tuple of the generated decoder (or the decoded dict) gets the five values appended
(:func:`row_values` / :func:`record_values` and :func:`position_values`).
"""
from __future__ import annotations

from typing import Any, Sequence

CONTENT_COLUMNS = ("_key", "_headers", "_timestamp")
"""The record's key, headers and timestamp."""
POSITION_COLUMNS = ("_partition", "_offset")
"""Where the record is: with the topic, its identity."""
RECORD_COLUMNS = CONTENT_COLUMNS + POSITION_COLUMNS
"""The reserved columns of Kafka-format topics' rows, in the order the loader writes them."""

HEADER_RECORD: dict = {
    "type": "record", "name": "RecordHeader", "namespace": "ingest.kafka",
    "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"]}],
}
FIELDS: tuple[dict, ...] = (
    {"name": "_key", "type": ["null", "bytes"], "default": None},
    {"name": "_headers", "type": {"type": "array", "items": HEADER_RECORD}, "default": []},
    {"name": "_timestamp", "type": "long", "default": -1},
    {"name": "_partition", "type": "int", "default": -1},
    {"name": "_offset", "type": "long", "default": -1},
)
"""The columns' Avro fields, appended to an event schema's (defaults, so that a reader schema with
them resolves older files)."""


def record_columns_in(schema: dict) -> list[str]:
    """The top-level fields of an event schema named like a :data:`RECORD_COLUMNS` column, sorted."""
    return sorted(f["name"] for f in schema.get("fields", ()) if f.get("name") in RECORD_COLUMNS)


def with_record_columns(schema: dict, *, position: bool = True) -> dict:
    """The output schema of a Kafka-format topic's rows: the event schema plus :data:`FIELDS` (without
    the position columns when ``position`` is false)."""
    fields = FIELDS if position else FIELDS[:len(CONTENT_COLUMNS)]
    return {**schema, "fields": [*schema["fields"], *fields]}


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_NO_KEY_NO_HEADERS = b"\x00\x00"   # _key null (union branch 0), _headers empty (block count 0)


def encode(key, headers: Sequence[tuple[str, Any]], timestamp: int, partition: int, offset: int) -> bytes:
    """The Avro binary of the five columns (in :data:`FIELDS` order; an Avro int and long encode alike)."""
    if key is None and not headers:
        return _NO_KEY_NO_HEADERS + _long(timestamp) + _long(partition) + _long(offset)
    out = bytearray(b"\x00" if key is None else b"\x02" + _long(len(key)) + bytes(key))
    if headers:
        out += _long(len(headers))
        for name, value in headers:
            raw = name.encode()
            out += _long(len(raw)) + raw
            out += b"\x00" if value is None else b"\x02" + _long(len(value)) + bytes(value)
    out += b"\x00" + _long(timestamp) + _long(partition) + _long(offset)
    return bytes(out)


def row_values(key, headers: Sequence[tuple[str, Any]], timestamp: int, partition: int, offset: int) -> tuple:
    """The five values as a row tuple's tail (Parquet rows of a generated decoder)."""
    return (None if key is None else bytes(key),
            [(name, None if value is None else bytes(value)) for name, value in headers], timestamp, partition,
            offset)


def record_values(key, headers: Sequence[tuple[str, Any]], timestamp: int) -> dict:
    """The record's key, headers and timestamp (:data:`CONTENT_COLUMNS`) as a decoded record's extra keys."""
    return {"_key": None if key is None else bytes(key),
            "_headers": [{"key": name, "value": None if value is None else bytes(value)} for name, value in headers],
            "_timestamp": timestamp}


def position_values(partition: int, offset: int) -> dict:
    """The record's partition and offset (:data:`POSITION_COLUMNS`) as a decoded record's extra keys."""
    return {"_partition": partition, "_offset": offset}
