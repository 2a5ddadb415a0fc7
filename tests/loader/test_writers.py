"""Writers round-trip: Avro container files (raw bodies and records) and Parquet with nested structs."""
from __future__ import annotations

import io

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.errors import SchemaError
from ingest.loader.writers import AvroFileWriter, AvroRawWriter, ParquetFileWriter, arrow_schema

SCHEMA = {
    "type": "record", "name": "E", "namespace": "t",
    "fields": [
        {"name": "header", "type": {"type": "record", "name": "EventHeader", "namespace": "ingest.events", "fields": [
            {"name": "time", "type": "long"}, {"name": "session", "type": "string"}, {"name": "seq", "type": "long"}]}},
        {"name": "ref", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
RECORDS = [{"header": {"time": 1000 + i, "session": "s", "seq": i}, "ref": None if i % 2 else f"r{i}",
            "tags": ["x"] * (i % 3), "kind": "AB"[i % 2], "ts": 1_700_000_000_000 + i} for i in range(2500)]


class _Keep(io.BytesIO):
    def close(self):  # the writers close their file; keep the bytes readable
        pass


def _bodies():
    out = []
    parsed = fastavro.parse_schema(SCHEMA)
    for r in RECORDS:
        b = io.BytesIO()
        fastavro.schemaless_writer(b, parsed, r)
        out.append(b.getvalue())
    return out


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy"])
def test_raw_avro_container_reads_back_with_fastavro(codec):
    f = _Keep()
    w = AvroRawWriter(f, SCHEMA, codec, block_bytes=4096)  # several blocks
    for body in _bodies():
        w.write_raw(body)
    assert w.close() == len(RECORDS)
    f.seek(0)
    reader = fastavro.reader(f)
    assert reader.writer_schema["name"] == "t.E" and reader.metadata["avro.codec"] == codec
    assert [r["header"] for r in reader] == [r["header"] for r in RECORDS]


def test_record_avro_writer_and_parquet_keep_the_nested_header():
    f = _Keep()
    w = AvroFileWriter(f, SCHEMA, "deflate")
    w.write_many(RECORDS[:10])
    w.close()
    f.seek(0)
    assert [r["header"]["seq"] for r in fastavro.reader(f)] == list(range(10))
    p = _Keep()
    w = ParquetFileWriter(p, SCHEMA, "snappy", row_group_rows=1000)  # three row groups
    for r in RECORDS:
        w.write(r)
    assert w.close() == len(RECORDS)
    p.seek(0)
    table = pq.read_table(p)
    assert pq.ParquetFile(io.BytesIO(p.getvalue())).num_row_groups == 3
    assert table.schema.field("header").type == pa.struct(
        [pa.field("time", pa.int64(), False), pa.field("session", pa.string(), False), pa.field("seq", pa.int64(), False)])
    assert table.schema.field("ref").nullable and table.schema.field("ts").type == pa.timestamp("ms", tz="UTC")
    assert table.column("header").to_pylist() == [r["header"] for r in RECORDS]


def test_union_of_several_types_is_refused_for_parquet_with_advice():
    bad = {"type": "record", "name": "B", "fields": [{"name": "v", "type": ["null", "string", "long"]}]}
    with pytest.raises(SchemaError, match="use format=avro"):
        arrow_schema(bad)
