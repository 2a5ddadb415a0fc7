"""Hostile record batches are refused before append, each with the right typed error (and Kafka code)
naming the bad value: bad CRC, lying sizes and counts and offsets, bad varints, bombs, forbidden fields."""
from __future__ import annotations

import os
import random
import struct

import pytest

from ingest.errors import (CorruptRecordError, IngestError, InvalidRecordError, InvalidTimestampError,
                           RecordTooLargeError, UnsupportedCompressionError)
from ingest.records import batch as b
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP, NONE, ZSTD, compress
from ingest.records.record import iter_records
from ingest.records.validation import check_batches, validate_produced, walk_records
from ingest.records.varint import encode_varint
from ingest.wire.errors import KafkaErrorCode, kafka_code

T = 1_700_000_000_000


def _recrc(buf: bytearray) -> bytearray:
    """The batch with its CRC-32C made right again: a hostile client, not a damaged wire."""
    b.CRC.pack_into(buf, b.CRC_OFFSET, b.compute_crc(buf, 0, len(buf)))
    return buf


def _batch(n=10, size=50, **kw) -> bytearray:
    return build_batch([SimpleRecord(os.urandom(size), b"k%d" % i, timestamp=T + i) for i in range(n)], **kw)


def _refused(buf, error, code, match=None, **kw):
    with pytest.raises(error, match=match) as info:
        validate_produced(bytes(buf), **kw)
    assert kafka_code(info.value) == code
    return info.value


def test_a_valid_batch_is_accepted_with_its_header():
    info = validate_produced(bytes(_batch()))
    assert info.header.records_count == 10 and info.size == len(_batch())


def test_a_flipped_byte_is_a_crc_mismatch_naming_both_crcs():
    buf = _batch()
    buf[200] ^= 0x01
    _refused(buf, CorruptRecordError, KafkaErrorCode.CORRUPT_MESSAGE, "stored CRC-32C 0x[0-9a-f]{8}, computed")


def test_a_flipped_attributes_bit_is_caught_by_the_crc():
    buf = _batch()
    buf[b.ATTRIBUTES_OFFSET + 1] ^= 0x01  # would turn the codec into gzip
    _refused(buf, CorruptRecordError, KafkaErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("delta", [1, 1000, -1])
def test_a_batch_length_that_disagrees_with_the_record_set_is_corrupt(delta):
    buf = _batch()
    struct.pack_into(">i", buf, b.LENGTH_OFFSET, len(buf) - b.LOG_OVERHEAD + delta)
    _refused(buf, CorruptRecordError, KafkaErrorCode.CORRUPT_MESSAGE, "claims|holds")


def test_a_batch_length_below_the_header_is_corrupt():
    buf = _batch()
    struct.pack_into(">i", buf, b.LENGTH_OFFSET, 10)
    _refused(buf, CorruptRecordError, KafkaErrorCode.CORRUPT_MESSAGE, "batch_length 10")


def test_trailing_bytes_after_the_batch_are_refused():
    _refused(_batch() + b"\x00" * 7, CorruptRecordError, KafkaErrorCode.CORRUPT_MESSAGE, "a produce request carries")


def test_a_magic_other_than_2_is_an_invalid_record():
    buf = _batch()
    buf[b.MAGIC_OFFSET] = 1
    _refused(buf, InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "magic 1")


@pytest.mark.parametrize("count", [9, 11, 1000])
def test_a_record_count_that_lies_is_refused(count):
    buf = _batch()
    struct.pack_into(">i", buf, b.RECORDS_COUNT_OFFSET, count)
    struct.pack_into(">i", buf, 23, count - 1)   # last_offset_delta agrees with the lie
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, f"says {count} records but holds 10")


def test_a_last_offset_delta_that_disagrees_with_the_count_is_refused():
    buf = _batch()
    struct.pack_into(">i", buf, 23, 20)
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "last_offset_delta 20 but 10 records")


def test_zero_or_negative_counts_are_refused():
    for count in (0, -5):
        buf = _batch(1)
        struct.pack_into(">i", buf, b.RECORDS_COUNT_OFFSET, count)
        struct.pack_into(">i", buf, 23, count - 1)
        _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("new_length", [7, 30, 63, 200])
def test_a_record_length_that_lies_is_refused(new_length):
    # fixed payloads: the walk goes on through the payload bytes after the lie, and about 1 in 15,000
    # random payloads tile the batch exactly with the right count: that batch is stored (the walk parses
    # lengths only, docs/log-format.md "What the walk does not parse") and readers refuse its record
    rnd = random.Random(new_length)
    buf = build_batch([SimpleRecord(rnd.randbytes(50), b"k%d" % i, timestamp=T + i) for i in range(3)])
    assert buf[b.RECORDS_OFFSET] == 58 << 1   # every record: length 58 (one varint byte)
    buf[b.RECORDS_OFFSET] = new_length << 1 if new_length < 64 else 0
    if new_length >= 64:
        buf[b.RECORDS_OFFSET:b.RECORDS_OFFSET + 1] = encode_varint(new_length)
        struct.pack_into(">i", buf, b.LENGTH_OFFSET, len(buf) - b.LOG_OVERHEAD)
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "record|records")


def test_a_record_length_below_the_smallest_record_is_refused():
    buf = _batch(n=3)
    buf[b.RECORDS_OFFSET] = 5 << 1
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "claims 5 bytes")


def test_a_negative_record_length_is_refused():
    buf = _batch(n=3)
    buf[b.RECORDS_OFFSET] = 0x03   # zigzag -2
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD)


def test_an_overlong_varint_record_length_is_refused():
    recs = bytearray()
    recs += b"\xff\xff\xff\xff\xff\x01"      # six bytes with continuation bits: not a varint
    buf = bytearray(b.RECORDS_OFFSET) + recs
    b.HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, 0, 0, T, T, -1, -1, -1, 1)
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "record 0's length: .* too long")


def test_an_overlong_varint_length_of_a_later_record_names_that_record():
    # what a lying earlier length leads to: the walk lands inside a record's bytes that are no varint
    buf = _batch(n=3, size=50)
    buf[b.RECORDS_OFFSET + 59:b.RECORDS_OFFSET + 65] = b"\xff\xff\xff\xff\xff\x01"   # record 1's length
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "record 1's length: .* too long")


def test_a_record_cut_off_at_the_batch_end_is_refused():
    buf = _batch(n=3)
    buf = buf[:-10]
    struct.pack_into(">i", buf, b.LENGTH_OFFSET, len(buf) - b.LOG_OVERHEAD)
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "past the end|cut off")


def test_a_produced_batch_must_start_at_offset_0():
    _refused(_batch(base_offset=5), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "base offset 0, not 5")


def test_clients_may_not_write_control_batches():
    _refused(_batch(control=True), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "control")


def test_a_producer_id_needs_a_base_sequence():
    _refused(_batch(producer_id=7, producer_epoch=0), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "sequence")


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_compression_types_kafka_does_not_define_are_unsupported(codec):
    buf = _batch()
    struct.pack_into(">h", buf, b.ATTRIBUTES_OFFSET, codec)
    _refused(_recrc(buf), UnsupportedCompressionError, KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"type {codec}")


def test_a_batch_above_max_message_bytes_is_too_large():
    buf = _batch(n=20, size=100)
    _refused(buf, RecordTooLargeError, KafkaErrorCode.MESSAGE_TOO_LARGE,
             f"{len(buf)} bytes, more than max.message.bytes 1000", max_batch_size=1000)


@pytest.mark.parametrize("codec", [GZIP, ZSTD])
def test_a_compressed_batch_that_inflates_past_the_limit_is_a_bomb(codec):
    one = build_batch([SimpleRecord(bytes(1 << 20))])          # 1 MB of zeros, one record
    body = compress(codec, bytes(one[b.RECORDS_OFFSET:]))
    buf = bytearray(b.RECORDS_OFFSET) + body
    b.HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, codec, 0, T, T, -1, -1, -1, 1)
    _refused(_recrc(buf), RecordTooLargeError, KafkaErrorCode.MESSAGE_TOO_LARGE, "limit", inflate_limit=64 * 1024)
    validate_produced(bytes(_recrc(buf)), inflate_limit=2 << 20)   # the same batch under a larger limit passes


def test_a_compressed_batch_whose_count_lies_is_refused_after_inflating():
    plain = _batch(n=5)
    body = compress(GZIP, bytes(plain[b.RECORDS_OFFSET:]))
    buf = bytearray(b.RECORDS_OFFSET) + body
    b.HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, GZIP, 5, T, T + 4, -1, -1, -1, 6)
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "gzip batch, inflated: .*says 6")


def test_a_compressed_batch_whose_offset_deltas_lie_is_refused():
    recs = bytearray()
    from ingest.records.builder import encode_record
    for i in range(4):
        encode_record(recs, 0, 0, SimpleRecord(b"same offset"))  # every record claims offset delta 0
    body = compress(GZIP, bytes(recs))
    buf = bytearray(b.RECORDS_OFFSET) + body
    b.HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, GZIP, 3, T, T, -1, -1, -1, 4)
    _refused(_recrc(buf), InvalidRecordError, KafkaErrorCode.INVALID_RECORD, "record 1 has offset delta 0")


def test_corrupt_compressed_records_are_corrupt():
    buf = _batch(codec=GZIP)
    buf[b.RECORDS_OFFSET + 20] ^= 0xFF
    _refused(_recrc(buf), CorruptRecordError, KafkaErrorCode.CORRUPT_MESSAGE, "gzip payload")


def test_a_producer_may_not_claim_log_append_time():
    _refused(_batch(timestamp_type=b.LOG_APPEND_TIME, now_ms=T), InvalidTimestampError,
             KafkaErrorCode.INVALID_TIMESTAMP, "LOG_APPEND_TIME")


def test_timestamps_outside_the_configured_bounds_are_refused():
    buf = _batch()
    _refused(buf, InvalidTimestampError, KafkaErrorCode.INVALID_TIMESTAMP, "before.max.ms=1000",
             now_ms=T + 5000, timestamp_before_ms=1000)
    _refused(buf, InvalidTimestampError, KafkaErrorCode.INVALID_TIMESTAMP, "after.max.ms=1000",
             now_ms=T - 5000, timestamp_after_ms=1000)
    validate_produced(bytes(buf), now_ms=T + 500, timestamp_before_ms=1000, timestamp_after_ms=1000)


def test_a_base_timestamp_after_the_max_timestamp_is_refused():
    buf = _batch()
    struct.pack_into(">q", buf, 27, T + 10_000)
    _refused(_recrc(buf), InvalidTimestampError, KafkaErrorCode.INVALID_TIMESTAMP, "after its max timestamp")


def test_the_walk_steps_over_runs_of_equal_records_and_still_finds_one_that_lies():
    buf = _batch(n=2000, size=200)       # equal records: the strided fast path
    validate_produced(bytes(buf))
    pos = b.RECORDS_OFFSET
    for _ in range(1500):                 # walk to record 1500 and make its length lie by one byte
        v, n = buf[pos] & 0x7F | buf[pos + 1] << 7, 2
        pos += n + (v >> 1)
    buf[pos] = (buf[pos] & 0x80) | ((buf[pos] & 0x7F) + 2) & 0x7F
    with pytest.raises(InvalidRecordError):
        validate_produced(bytes(_recrc(buf)))


def test_random_hostile_batches_are_refused_with_a_typed_error_or_accepted_whole():
    rnd = random.Random(26)
    accepted = 0
    for trial in range(400):
        buf = _batch(n=rnd.randint(1, 30), size=rnd.randint(0, 120), codec=rnd.choice([NONE, NONE, GZIP]))
        for _ in range(rnd.randint(1, 4)):
            buf[rnd.randrange(b.LOG_OVERHEAD, len(buf))] = rnd.randrange(256)
        if rnd.random() < 0.8:
            _recrc(buf)
        try:
            info = validate_produced(bytes(buf))
        except IngestError as exc:
            assert kafka_code(exc) in {KafkaErrorCode.CORRUPT_MESSAGE, KafkaErrorCode.INVALID_RECORD,
                                       KafkaErrorCode.INVALID_TIMESTAMP, KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                       KafkaErrorCode.MESSAGE_TOO_LARGE}, exc
            continue
        accepted += 1
        assert info.header.records_count >= 1
    assert accepted < 400


def test_check_batches_requires_increasing_offsets_and_whole_batches():
    one, two = _batch(n=3, base_offset=10), _batch(n=2, base_offset=13)
    assert [h.base_offset for h in check_batches(bytes(one + two))] == [10, 13]
    with pytest.raises(InvalidRecordError, match="offsets must increase"):
        check_batches(bytes(two + one))
    with pytest.raises(CorruptRecordError):
        check_batches(bytes(one + two[:-1]))


def test_walk_records_alone_counts_records():
    buf = _batch(n=7)
    walk_records(buf, b.RECORDS_OFFSET, len(buf), 7)
    with pytest.raises(InvalidRecordError, match="says 8 records but holds 7"):
        walk_records(buf, b.RECORDS_OFFSET, len(buf), 8)


def test_a_record_whose_inner_fields_lie_passes_the_walk_and_is_refused_when_read():
    # The produce-time walk checks record lengths only (docs/performance.md); the reader checks every field.
    # Fixed values: random ones can, now and then, happen to parse as a consistent record after the lie.
    buf = build_batch([SimpleRecord(b"\x7f" * 50, b"k%d" % i, timestamp=T + i) for i in range(3)])
    key_len_at = b.RECORDS_OFFSET + 1 + 1 + 1 + 1     # length, attributes, timestamp delta, offset delta
    buf[key_len_at] = 40 << 1                         # key claims 40 bytes of a 59-byte record
    validate_produced(bytes(_recrc(buf)))
    with pytest.raises(InvalidRecordError, match="record 0"):
        list(iter_records(buf))
