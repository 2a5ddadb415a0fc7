"""The record columns of Kafka-format topics (``_key``, ``_headers``, ``_timestamp``, ``_partition``,
``_offset``): the Avro bytes the loader appends to a producer's body decode, with fastavro, under the
extended schema, to exactly the record's key, headers, timestamp, partition and offset; Parquet rows of both decoder paths carry the same values; an
event schema using one of the names is refused naming topic, schema id and field."""
from __future__ import annotations

import io

import fastavro
import pyarrow.parquet as pq
import pytest

from ingest.errors import SchemaError
from ingest.loader.record_columns import (RECORD_COLUMNS, encode, position_values, record_values, row_values,
                                          with_record_columns)
from ingest.loader.staging import refuse_record_columns
from ingest.loader.writers import ParquetFileWriter

SCHEMA = {"type": "record", "name": "Click", "namespace": "t",
          "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "long"}]}

CASES = [
    (None, (), 0, 0, 0),
    (b"", (), 1, 1, 1),
    (b"k" * 300, (("a", b"x"), ("b", None), ("", b"")), 1_764_000_000_123, 2 ** 31 - 1, 2 ** 63 - 1),
    (None, (("only", b"\x00\xff" * 100),), -1, 63, 64),
    (b"\x00", tuple((f"h{i}", bytes([i])) for i in range(70)), 2 ** 40, 7, 2 ** 40 + 3),
]


@pytest.mark.parametrize("key,headers,ts,partition,offset", CASES)
def test_appended_bytes_decode_to_the_records_key_headers_timestamp_and_position(key, headers, ts, partition,
                                                                                 offset):
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), {"page": "/home", "n": 7})
    body = buf.getvalue() + encode(key, headers, ts, partition, offset)
    out = io.BytesIO(body)
    got = fastavro.schemaless_reader(out, fastavro.parse_schema(with_record_columns(SCHEMA)), None)
    assert out.tell() == len(body)
    assert got == {"page": "/home", "n": 7, "_key": key,
                   "_headers": [{"key": k, "value": v} for k, v in headers], "_timestamp": ts,
                   "_partition": partition, "_offset": offset}


def test_parquet_rows_of_both_paths_hold_the_same_values(tmp_path):
    from ingest.loader.decode import RowLayout

    schema = with_record_columns(SCHEMA)
    key, headers, ts = b"key", (("a", b"1"), ("b", None)), 1234
    want = {"page": "/p", "n": 3, "_key": key, "_headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
            "_timestamp": ts, "_partition": 5, "_offset": 77}
    tuples = tmp_path / "tuples.parquet"
    w = ParquetFileWriter(open(tuples, "wb"), schema, layout=RowLayout(lambda p: (), 0, 2, SCHEMA))
    w.write(("/p", 3) + row_values(key, headers, ts, 5, 77))
    w.close()
    dicts = tmp_path / "dicts.parquet"
    w = ParquetFileWriter(open(dicts, "wb"), schema)
    w.write({"page": "/p", "n": 3, **record_values(key, headers, ts), **position_values(5, 77)})
    w.close()
    assert pq.read_table(tuples).to_pylist() == pq.read_table(dicts).to_pylist() == [want]
    assert pq.read_table(tuples).schema.names == ["page", "n", *RECORD_COLUMNS]


def test_an_event_schema_with_a_record_column_name_is_refused():
    bad = {**SCHEMA, "fields": SCHEMA["fields"] + [{"name": "_timestamp", "type": "long"},
                                                   {"name": "_key", "type": "string"},
                                                   {"name": "_offset", "type": "long"}]}
    with pytest.raises(SchemaError, match=r"topic clicks, schema id 9: top-level field\(s\) _key, _offset, _timestamp"):
        refuse_record_columns("clicks", 9, bad)
    refuse_record_columns("clicks", 9, SCHEMA)   # a clean schema passes
