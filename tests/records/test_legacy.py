"""Legacy message sets (magic 0 and 1): read and validated as Produce v0-v2 carry them, converted up to one
record batch v2, and v2 batches converted down for Fetch v0-v3, checked both ways against kafka-python."""
from __future__ import annotations

import struct

import pytest

from ingest.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, UnsupportedCompressionError
from ingest.records import batch as b
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from ingest.records.convert import down_convert, up_convert
from ingest.records.legacy import (CRC_OFFSET, MAGIC_OFFSET, encode_message, encode_message_set, iter_legacy_records,
                                   validate_legacy_produced)
from ingest.records.record import iter_records
from ingest.wire.errors import KafkaErrorCode, kafka_code

legacy_records = pytest.importorskip("kafka.record.legacy_records")
memory_records = pytest.importorskip("kafka.record.memory_records")
T = 1_700_000_000_000
LIMIT = 16 << 20
# kafka-python's LegacyRecordBatchBuilder: (0, t, b"k", b"v") and (1, t+1, None, b"w")
GOLDEN_V0 = bytes.fromhex("0000000000000000000000101fecd70a0000000000016b000000017600000000000000010000000fa50b8f630000"
                          "ffffffff0000000177")
GOLDEN_V1 = bytes.fromhex("00000000000000000000001839268c3301000000018bcfe56800000000016b0000000176000000000000000100"
                          "00001759a2716d01000000018bcfe56801ffffffff0000000177")


def _kafka_python_set(magic, codec, n=40):
    builder = legacy_records.LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(n):
        builder.append(i, T + i, b"k%d" % i if i % 2 else None, b"value %d" % i)
    return bytes(builder.build())


def _read_with_kafka_python(data):
    mr = memory_records.MemoryRecords(data)
    out = []
    while mr.has_next():
        for r in mr.next_batch():
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out


def test_encode_writes_kafka_pythons_golden_bytes():
    assert bytes(encode_message_set([(0, T, b"k", b"v"), (1, T + 1, None, b"w")], 0)) == GOLDEN_V0
    assert bytes(encode_message_set([(0, T, b"k", b"v"), (1, T + 1, None, b"w")], 1)) == GOLDEN_V1


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_a_produced_legacy_set_converts_up_to_one_v2_batch(magic, codec):
    if codec == LZ4:
        pytest.importorskip("lz4")
        if magic == 0:
            pytest.importorskip("xxhash")  # kafka-python's broken-checksum lz4 writer needs it
    data = _kafka_python_set(magic, codec)
    v2 = up_convert(data, max_message_size=1 << 20, inflate_limit=LIMIT)
    h = b.read_header(v2, 0)
    assert (h.records_count, h.codec, h.base_offset, h.producer_id) == (40, codec, 0, -1)
    got = [(r.offset, r.timestamp, None if r.key is None else bytes(r.key), bytes(r.value)) for r in iter_records(v2)]
    assert got == [(i, T + i if magic else b.NO_TIMESTAMP, b"k%d" % i if i % 2 else None, b"value %d" % i)
                   for i in range(40)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_v2_batches_convert_down_to_what_kafka_python_reads(magic, codec):
    if codec == LZ4:
        pytest.importorskip("lz4")
        if magic == 0:
            pytest.importorskip("xxhash")
    batches = build_batch([SimpleRecord(b"v%d" % i, b"k", [("dropped", b"x")], T + i) for i in range(30)],
                          codec=codec, base_offset=100) + \
        build_batch([SimpleRecord(b"w%d" % i, None, (), T + 50 + i) for i in range(5)], codec=codec, base_offset=130)
    legacy = bytes(down_convert(batches, magic, inflate_limit=LIMIT))
    expect = [(100 + i, T + i if magic else None, b"k", b"v%d" % i) for i in range(30)] + \
        [(130 + i, T + 50 + i if magic else None, None, b"w%d" % i) for i in range(5)]
    assert _read_with_kafka_python(legacy) == expect
    ours = [(r.offset, r.timestamp, r.key and bytes(r.key), bytes(r.value))
            for r in iter_legacy_records(legacy, inflate_limit=LIMIT)]
    assert ours == [(o, -1 if t is None else t, k, v) for o, t, k, v in expect]


def test_down_conversion_drops_a_cut_off_last_batch_and_skips_control_batches():
    one = build_batch([b"a"], base_offset=0)
    control = build_batch([SimpleRecord(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00")], base_offset=1, control=True)
    two = build_batch([b"b", b"c"], base_offset=2)
    data = bytes(one + control + two)
    assert [r[0] for r in _read_with_kafka_python(bytes(down_convert(data, 1, inflate_limit=LIMIT)))] == [0, 2, 3]
    assert [r[0] for r in _read_with_kafka_python(bytes(down_convert(data[:-3], 1, inflate_limit=LIMIT)))] == [0]


def test_zstd_cannot_be_converted_down():
    with pytest.raises(UnsupportedCompressionError, match="zstd") as info:
        down_convert(build_batch([b"x"], codec=ZSTD), 1, inflate_limit=LIMIT)
    assert kafka_code(info.value) == KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_a_bad_crc_in_a_legacy_message_is_corrupt():
    data = bytearray(_kafka_python_set(1, NONE, 3))
    data[-1] ^= 0x20
    with pytest.raises(CorruptRecordError, match="stored CRC-32"):
        validate_legacy_produced(data, max_message_size=1 << 20, inflate_limit=LIMIT)


def test_a_bad_inner_crc_of_a_compressed_message_is_corrupt():
    inner = bytearray(encode_message_set([(0, T, None, b"a"), (1, T, None, b"b")], 1))
    inner[-1] ^= 0x01
    from ingest.records.compression import compress
    wrapper = bytearray()
    encode_message(wrapper, 1, 1, None, compress(GZIP, inner, magic=1), timestamp=T, attributes=GZIP)
    with pytest.raises(CorruptRecordError):
        validate_legacy_produced(wrapper, max_message_size=1 << 20, inflate_limit=LIMIT)


def test_nested_compression_and_mixed_magics_are_invalid():
    from ingest.records.compression import compress
    inner = encode_message_set([(0, T, None, b"a")], 1, GZIP)
    wrapper = bytearray()
    encode_message(wrapper, 0, 1, None, compress(GZIP, inner, magic=1), timestamp=T, attributes=GZIP)
    with pytest.raises(InvalidRecordError, match="one level of compression"):
        validate_legacy_produced(wrapper, max_message_size=1 << 20, inflate_limit=LIMIT)
    mixed = encode_message_set([(0, T, None, b"a")], 0) + encode_message_set([(1, T, None, b"b")], 1)
    with pytest.raises(InvalidRecordError, match="mixes magic 0 and 1"):
        validate_legacy_produced(mixed, max_message_size=1 << 20, inflate_limit=LIMIT)


def test_unknown_magic_bad_sizes_and_lying_key_lengths_are_refused():
    data = bytearray(GOLDEN_V1)
    data[MAGIC_OFFSET] = 3
    with pytest.raises(InvalidRecordError, match="magic 3"):
        validate_legacy_produced(data, max_message_size=1 << 20, inflate_limit=LIMIT)
    data = bytearray(GOLDEN_V1)
    struct.pack_into(">i", data, 8, 10_000)
    with pytest.raises(CorruptRecordError, match="claims 10000 bytes"):
        validate_legacy_produced(data, max_message_size=1 << 20, inflate_limit=LIMIT)
    data = bytearray(GOLDEN_V0[:28])                    # the first message: key length 1 -> 9
    struct.pack_into(">i", data, 18, 9)
    from ingest.records.crc import crc32
    struct.pack_into(">I", data, CRC_OFFSET, crc32(data[MAGIC_OFFSET:]))
    with pytest.raises(InvalidRecordError, match="key length 9"):
        validate_legacy_produced(data, max_message_size=1 << 20, inflate_limit=LIMIT)


def test_a_legacy_message_above_the_limit_and_a_bomb_are_too_large():
    data = encode_message_set([(0, T, None, b"x" * 5000)], 1)
    with pytest.raises(RecordTooLargeError):
        validate_legacy_produced(data, max_message_size=1000, inflate_limit=LIMIT)
    bomb = encode_message_set([(i, T, None, bytes(10_000)) for i in range(200)], 1, GZIP)
    assert len(bomb) < 20_000
    with pytest.raises(RecordTooLargeError):
        validate_legacy_produced(bomb, max_message_size=1 << 20, inflate_limit=100_000)


def test_magic_1_inner_offsets_are_relative_and_magic_0_absolute():
    for magic in (0, 1):
        data = encode_message_set([(500 + i, T + i, None, b"m%d" % i) for i in range(3)], magic, GZIP)
        assert [r.offset for r in iter_legacy_records(data, inflate_limit=LIMIT)] == [500, 501, 502]
        assert _read_with_kafka_python(bytes(data))[0][0] == 500


def test_a_log_append_time_wrapper_stamps_its_inner_messages():
    data = encode_message_set([(0, 5, None, b"a"), (1, 6, None, b"b")], 1, GZIP,
                              timestamp_type=1, wrapper_timestamp=T)
    assert [r.timestamp for r in iter_legacy_records(data, inflate_limit=LIMIT)] == [T, T]
