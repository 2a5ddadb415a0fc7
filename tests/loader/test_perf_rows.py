"""Generated row decoders (ingest.loader.decode.compile_row_layout) agree with fastavro, byte for byte.

The Parquet fast path must decode exactly what fastavro decodes and refuse (hand
to the deserializer) whatever fastavro refuses; these tests fuzz both with real
encoded bodies, truncations, trailing bytes and flipped bytes.
"""
from __future__ import annotations

import io
import random
import struct

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.loader.decode import compile_row_layout
from ingest.loader.writers import ParquetFileWriter

RICH = {
    "type": "record", "name": "Rich", "namespace": "t",
    "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [
            {"name": "time", "type": "long"}, {"name": "server", "type": "string"},
            {"name": "seq", "type": {"type": "long"}}]}},
        {"name": "flag", "type": "boolean"},
        {"name": "count", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "maybe", "type": ["null", "string"]},
        {"name": "later", "type": ["long", "null"]},
        {"name": "nothing", "type": "null"},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
            {"name": "x", "type": ["null", {"type": "enum", "name": "E2", "symbols": ["P", "Q"]}]}]}},
    ],
}


def _record(rng: random.Random) -> dict:
    return {
        "header": {"time": rng.randrange(-(1 << 62), 1 << 62), "server": "s" * rng.randrange(0, 70) + "é",
                   "seq": rng.randrange(0, 1 << 20)},
        "flag": rng.random() < 0.5, "count": rng.randrange(-(1 << 31), 1 << 31), "ratio": 0.5,
        "score": rng.random(), "blob": bytes(rng.randrange(256) for _ in range(rng.randrange(0, 9))),
        "kind": rng.choice("ABC"), "maybe": rng.choice([None, "", "m" * 200]),
        "later": rng.choice([None, rng.randrange(-1000, 1000)]), "nothing": None,
        "inner": {"x": rng.choice([None, "P", "Q"])},
    }


def _body(schema, record) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def _fastavro(parsed, payload: bytes):
    buf = io.BytesIO(payload[5:])
    try:
        rec = fastavro.schemaless_reader(buf, parsed, None)
    except Exception:
        return None
    return rec if buf.tell() == len(payload) - 5 else None


def test_generated_decoder_matches_fastavro_on_valid_and_corrupt_bodies():
    layout = compile_row_layout(RICH)
    assert layout is not None and layout.time_index == 0
    parsed = fastavro.parse_schema(RICH)
    rng = random.Random(7)
    agreed = refused = 0
    for _ in range(400):
        rec = _record(rng)
        payload = b"\x00" + struct.pack(">i", 9) + _body(RICH, rec)
        assert layout.decode(payload) == layout.from_record(rec)
        variants = [payload[:rng.randrange(5, len(payload))], payload + b"\x00"]
        for _ in range(4):
            b = bytearray(payload)
            b[rng.randrange(5, len(b))] = rng.randrange(256)
            variants.append(bytes(b))
        for v in variants:
            expected = _fastavro(parsed, v)
            try:
                got = layout.decode(v)
            except Exception:
                got = None
            if got is None:
                refused += 1  # the loader then asks the deserializer, which has the last word
            else:
                assert expected is not None, f"generated decoder accepted what fastavro refuses: {v!r}"
                assert got == layout.from_record(expected)
                agreed += 1
    assert agreed > 100 and refused > 100
    # a 10-byte varint (|time| >= 2**62; fastavro wraps to 64 bits) is left to the deserializer
    huge = b"\x00" + struct.pack(">i", 9) + _body(RICH, dict(_record(rng), header={"time": -(1 << 63), "server": "",
                                                                                   "seq": 0}))
    with pytest.raises(ValueError):
        layout.decode(huge)


@pytest.mark.parametrize("schema", [
    {"type": "record", "name": "NoHeader", "fields": [{"name": "a", "type": "long"}]},
    {"type": "record", "name": "StrTime", "fields": [{"name": "header", "type": {
        "type": "record", "name": "H", "fields": [{"name": "time", "type": "string"}]}}]},
    {"type": "record", "name": "Arr", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
        {"name": "xs", "type": {"type": "array", "items": "long"}}]},
    {"type": "record", "name": "Ts", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [
            {"name": "time", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}}]},
])
def test_schemas_outside_the_generated_subset_keep_the_dict_path(schema):
    assert compile_row_layout(schema) is None


def test_parquet_from_rows_equals_parquet_from_dicts(tmp_path):
    layout = compile_row_layout(RICH)
    rng = random.Random(3)
    records = [_record(rng) for _ in range(1000)]
    for name, lay, items in (("dicts", None, records), ("rows", layout, [layout.from_record(r) for r in records])):
        w = ParquetFileWriter(open(tmp_path / f"{name}.parquet", "wb"), RICH, row_group_rows=300, layout=lay)
        for it in items:
            w.write(it)
        assert w.close() == 1000
    a = pq.read_table(tmp_path / "dicts.parquet")
    b = pq.read_table(tmp_path / "rows.parquet")
    assert a.schema == b.schema and a.equals(b)
    assert pq.ParquetFile(tmp_path / "rows.parquet").metadata.num_row_groups == 4
    assert b.column("header").type == pa.struct([pa.field("time", pa.int64(), nullable=False),
                                                 pa.field("server", pa.string(), nullable=False),
                                                 pa.field("seq", pa.int64(), nullable=False)])


def test_parquet_from_chunks_and_single_rows_mixed_equals_parquet_from_dicts(tmp_path):
    """A bucket gets whole chunks (write_columns) and single rows (write, the per-message path) in
    any order; the file holds them in that order, in row groups of at most row_group_rows (a chunk
    that crosses the limit ends the group with it)."""
    from ingest.loader.writers import column_arrays

    prefix = b"\x00" + struct.pack(">i", 9)
    layout = compile_row_layout(RICH, prefix)
    rng = random.Random(4)
    records = [_record(rng) for _ in range(700)]
    payloads = [prefix + _body(RICH, r) for r in records]
    w = ParquetFileWriter(open(tmp_path / "mixed.parquet", "wb"), RICH, row_group_rows=300, layout=layout)
    for lo, hi, chunk in ((0, 50, False), (50, 450, True), (450, 460, False), (460, 660, True), (660, 700, False)):
        if chunk:
            w.write_columns(column_arrays(layout, layout.decode_columns(payloads[lo:hi])), hi - lo)
        else:
            for p in payloads[lo:hi]:
                w.write(layout.decode(p))
    assert w.close() == 700
    d = ParquetFileWriter(open(tmp_path / "dicts.parquet", "wb"), RICH)
    d.write_many(records)
    d.close()
    mixed = pq.read_table(tmp_path / "mixed.parquet")
    assert mixed.equals(pq.read_table(tmp_path / "dicts.parquet"))
    meta = pq.ParquetFile(tmp_path / "mixed.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [450, 250]
