"""Record batch v2: built and read as Kafka lays it out, byte for byte against golden bytes from kafka-python's
builder, both ways against kafka-python's reader and builder for every codec, header fields, in-place rewrites."""
from __future__ import annotations

import os

import pytest

from ingest.records import batch as b
from ingest.records.builder import SimpleRecord, build_batch, record_size
from ingest.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from ingest.records.record import iter_records
from ingest.records.validation import check_batch

kafka_records = pytest.importorskip("kafka.record.default_records")

# kafka-python 3.0's DefaultRecordBatchBuilder(magic 2, none, producer id 1000, epoch 3, base sequence 7):
# k0/hello with header trace=0102 at t, None/world at t+5, k2/None with header a=None at t+3
GOLDEN = bytes.fromhex(
    "0000000000000000000000600000000002233e9beb0000000000020000018bcfe568000000018bcfe5680500000000000003e8000300"
    "000007000000032c000000046b300a68656c6c6f020a747261636504010216000a02010a776f726c640016000604046b320102026101")
T = 1_700_000_000_000
GOLDEN_RECORDS = [SimpleRecord(b"hello", b"k0", [("trace", b"\x01\x02")], T), SimpleRecord(b"world", None, [], T + 5),
                  SimpleRecord(None, b"k2", [("a", None)], T + 3)]
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


def _plain(records):
    return [(r.offset, r.timestamp, None if r.key is None else bytes(r.key),
             None if r.value is None else bytes(r.value),
             [(k, None if v is None else bytes(v)) for k, v in r.headers]) for r in records]


def _sample(n=300, seed=1):
    rnd = __import__("random").Random(seed)
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 50 == 49 else os.urandom(rnd.randint(0, 400))
        headers = [("h%d" % j, None if j == 2 else os.urandom(j)) for j in range(i % 4)]
        out.append(SimpleRecord(value, key, headers, T + rnd.randint(0, 100_000)))
    return out


def test_build_batch_writes_exactly_kafka_pythons_bytes():
    # kafka-python writes partition leader epoch 0 where Java's producer writes -1 (the broker sets it)
    built = build_batch(GOLDEN_RECORDS, producer_id=1000, producer_epoch=3, base_sequence=7, partition_leader_epoch=0)
    assert bytes(built) == GOLDEN
    assert check_batch(build_batch(GOLDEN_RECORDS)).partition_leader_epoch == b.NO_PARTITION_LEADER_EPOCH


def test_golden_bytes_read_back_with_every_header_field():
    h = check_batch(GOLDEN)
    assert (h.base_offset, h.size, h.magic, h.records_count, h.last_offset_delta) == (0, len(GOLDEN), 2, 3, 2)
    assert (h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence) == \
        (T, T + 5, 1000, 3, 7)
    assert (h.codec, h.timestamp_type, h.is_transactional, h.is_control, h.partition_leader_epoch) == \
        (NONE, 0, False, False, 0)
    assert _plain(iter_records(GOLDEN)) == [
        (0, T, b"k0", b"hello", [("trace", b"\x01\x02")]), (1, T + 5, None, b"world", []),
        (2, T + 3, b"k2", None, [("a", None)])]


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_identically_with_kafka_pythons_reader(codec):
    if codec in (LZ4, ZSTD):
        pytest.importorskip("lz4" if codec == LZ4 else "zstandard")  # kafka-python's own codec libraries
    recs = _sample()
    built = bytes(build_batch(recs, codec=codec, base_offset=42))
    theirs = kafka_records.DefaultRecordBatch(built)
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs] == _plain(iter_records(built))
    assert theirs.compression_type == codec and theirs.base_offset == 42


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_pythons_batches_validate_and_read_identically_with_ours(codec):
    if codec in (LZ4, ZSTD):
        pytest.importorskip("lz4" if codec == LZ4 else "zstandard")
    builder = kafka_records.DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 10 << 20)
    recs = _sample(seed=2)
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    built = bytes(builder.build())
    check_batch(built)
    theirs = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kafka_records.DefaultRecordBatch(built)]
    assert _plain(iter_records(built)) == theirs
    assert [(v[2], v[3]) for v in theirs] == [(r.key, r.value) for r in recs]


def test_base_offset_and_leader_epoch_are_rewritten_in_place_without_touching_the_crc():
    buf = bytearray(GOLDEN)
    b.set_base_offset(buf, 0, 123_456_789)
    b.set_partition_leader_epoch(buf, 0, 17)
    h = check_batch(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (123_456_789, 17, check_batch(GOLDEN).crc)
    assert [r.offset for r in iter_records(buf)] == [123_456_789, 123_456_790, 123_456_791]


def test_log_append_time_gives_every_record_the_batch_max_timestamp():
    built = build_batch([SimpleRecord(b"a", timestamp=5), SimpleRecord(b"b", timestamp=9)],
                        timestamp_type=b.LOG_APPEND_TIME, now_ms=T)
    h = check_batch(built)
    assert h.timestamp_type == b.LOG_APPEND_TIME and h.max_timestamp == T
    assert [r.timestamp for r in iter_records(built)] == [T, T]


def test_records_without_timestamps_get_now_or_no_timestamp():
    assert check_batch(build_batch([b"x"])).max_timestamp == b.NO_TIMESTAMP
    assert [r.timestamp for r in iter_records(build_batch([b"x", b"y"], now_ms=T))] == [T, T]


def test_keys_and_values_are_views_into_the_batch_not_copies():
    built = build_batch([SimpleRecord(b"v" * 100, b"k")])
    rec = next(iter_records(built))
    assert isinstance(rec.value, memoryview) and rec.value.obj is built


def test_record_size_is_what_the_builder_writes():
    for r in _sample(50):
        one = build_batch([r])
        assert len(one) - b.RECORDS_OFFSET == record_size(r)


def test_iter_batches_yields_whole_batches_and_stops_at_a_cut_off_one():
    one = build_batch([b"a"] * 3, base_offset=0)
    two = build_batch([b"b"] * 2, base_offset=3)
    data = bytes(one + two)
    assert [(p, h.base_offset, h.records_count) for p, h in b.iter_batches(data)] == [(0, 0, 3), (len(one), 3, 2)]
    assert [p for p, _ in b.iter_batches(data[:-1])] == [0]
    assert list(b.iter_batches(data[:30])) == []


def test_transactional_and_producer_fields_round_trip():
    built = build_batch([b"x"], producer_id=77, producer_epoch=2, base_sequence=41, transactional=True,
                        partition_leader_epoch=9)
    h = check_batch(built)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional, h.partition_leader_epoch) == \
        (77, 2, 41, True, 9)
