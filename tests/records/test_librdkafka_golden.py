"""Record batches written by the real librdkafka (confluent-kafka 2.16.1, librdkafka 2.16.0), every codec:
they pass the produce-path validation and read back exactly what was produced, as kafka-python reads them.

The files in tests/records/golden/ were captured from confluent-kafka's Producer by
``golden/capture_librdkafka.py`` (300 records, timestamps, keys on 2 of 3, a header on every other one,
``compression.type`` none/gzip/snappy/lz4/zstd). librdkafka writes snappy as ONE raw block (no xerial
framing) and sends a batch uncompressed when compressing does not pay (the lz4 file's first batch).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ingest.records.batch import iter_batches
from ingest.records.compression import GZIP, LZ4, NONE, SNAPPY, XERIAL_MAGIC, ZSTD
from ingest.records.record import iter_records
from ingest.records.validation import validate_produced

GOLDEN = Path(__file__).parent / "golden"
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
EXPECTED = [(1_700_000_000_000 + i, None if i % 3 == 0 else b"key-%d" % i, (b"librdkafka value %d " % i) * (1 + i % 7),
             [("h", b"v%d" % i)] if i % 2 else []) for i in range(300)]


def _read(name: str):
    data = (GOLDEN / f"librdkafka-{name}.bin").read_bytes()
    return data, list(iter_batches(data))


@pytest.mark.parametrize("name", sorted(CODECS))
def test_librdkafka_batches_validate_and_read_back_exactly(name):
    data, batches = _read(name)
    assert sum(h.size for _, h in batches) == len(data)
    assert batches[-1][1].codec == CODECS[name]
    got = []
    for pos, h in batches:
        info = validate_produced(data[pos:pos + h.size])
        assert info.header.records_count == h.records_count
        got += [(r.timestamp, None if r.key is None else bytes(r.key), bytes(r.value),
                 [(k, bytes(v)) for k, v in r.headers]) for r in iter_records(data, pos)]
    assert got == EXPECTED


def test_librdkafka_writes_snappy_as_one_raw_block():
    data, [(pos, h)] = _read("snappy")
    assert data[pos + 61:pos + 69] != XERIAL_MAGIC


@pytest.mark.parametrize("name", sorted(CODECS))
def test_kafka_python_reads_the_same_records(name):
    default_records = pytest.importorskip("kafka.record.default_records")
    if name in ("lz4", "zstd"):
        pytest.importorskip("lz4" if name == "lz4" else "zstandard")
    data, batches = _read(name)
    theirs = []
    for pos, h in batches:
        batch = default_records.DefaultRecordBatch(data[pos:pos + h.size])
        assert batch.validate_crc()
        theirs += [(r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
    assert theirs == EXPECTED
