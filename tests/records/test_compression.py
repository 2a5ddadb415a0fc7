"""Kafka's compression types: round trips, what each client writes (xerial and raw snappy, Java's lz4
frames, the broken lz4 checksum of magic 0), and bounded decompression that refuses bombs."""
from __future__ import annotations

import os
import random
import struct
import time

import cramjam
import pytest

from ingest.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionError
from ingest.records import compression as c
from ingest.records import lz4_frame

DATA = b"".join(b"event %06d " % i + os.urandom(20) for i in range(3000))


@pytest.mark.parametrize("codec", [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
@pytest.mark.parametrize("size", [0, 1, 200, 70_000, len(DATA)])
def test_round_trip(codec, size):
    data = DATA[:size]
    assert bytes(c.decompress(codec, c.compress(codec, data), limit=len(data) or 1)) == data


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [c.GZIP, c.SNAPPY, c.LZ4])
def test_round_trip_in_legacy_formats(codec, magic):
    assert bytes(c.decompress(codec, c.compress(codec, DATA, magic=magic), limit=len(DATA), magic=magic)) == DATA


def test_snappy_is_written_with_xerial_framing_and_raw_blocks_are_read_too():
    framed = c.compress(c.SNAPPY, DATA)
    assert framed[:8] == c.XERIAL_MAGIC
    raw = bytes(cramjam.snappy.compress_raw(DATA))  # what librdkafka writes
    assert bytes(c.decompress(c.SNAPPY, raw, limit=len(DATA))) == DATA
    python_snappy = pytest.importorskip("snappy")
    assert python_snappy.decompress(framed[20:20 + struct.unpack(">i", framed[16:20])[0]]) == DATA[:32 * 1024]


def test_lz4_frames_are_javas_independent_64k_blocks_and_a_standard_decoder_reads_them():
    frame = c.compress(c.LZ4, DATA)
    assert frame[:4] == lz4_frame.MAGIC_BYTES and frame[4] == 0x60 and frame[5] == 0x40
    assert bytes(cramjam.lz4.decompress(frame)) == DATA
    lz4 = pytest.importorskip("lz4.frame")
    assert lz4.decompress(frame) == DATA


def test_magic_0_lz4_carries_kafkas_broken_header_checksum_both_ways():
    broken = c.compress(c.LZ4, DATA, magic=0)
    right = c.compress(c.LZ4, DATA, magic=1)
    assert broken[:6] == right[:6] and broken[6] != right[6]
    assert broken[6] == lz4_frame.header_checksum(broken[:6])   # the magic bytes hashed too
    with pytest.raises(CorruptRecordError):                        # a standard reader refuses it
        c.decompress(c.LZ4, broken, limit=len(DATA), magic=1)
    assert bytes(c.decompress(c.LZ4, broken, limit=len(DATA), magic=0)) == DATA


def test_xxh32_matches_the_reference_vectors():
    assert [lz4_frame.xxh32(d) for d in (b"", b"a", b"abc")] == [0x02CC5D05, 0x550D7456, 0x32D153FF]
    assert lz4_frame.xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("codec", [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
def test_a_decompression_bomb_is_refused_fast_within_the_limit(codec):
    zeros = bytes(64 << 20)
    if codec == c.SNAPPY:
        bomb = bytes(cramjam.snappy.compress_raw(zeros))
    else:
        bomb = c.compress(codec, zeros)
    assert len(bomb) < len(zeros) // 20  # snappy expands at most ~21x; the others far more
    began = time.perf_counter()
    with pytest.raises(RecordTooLargeError, match="limit of|the limit is"):
        c.decompress(codec, bomb, limit=1 << 20)
    assert time.perf_counter() - began < 5  # generous: it stops at the limit, it does not inflate 64 MB


def test_a_xerial_stream_whose_blocks_sum_past_the_limit_is_refused_before_inflating():
    block = bytes(cramjam.snappy.compress_raw(bytes(1 << 20)))
    stream = struct.pack(">8sii", c.XERIAL_MAGIC, 1, 1) + (struct.pack(">i", len(block)) + block) * 8
    with pytest.raises(RecordTooLargeError):
        c.decompress(c.SNAPPY, stream, limit=4 << 20)


def test_output_exactly_at_the_limit_is_accepted_and_one_byte_over_is_not():
    data = DATA[:100_000]
    for codec in (c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD):
        packed = c.compress(codec, data)
        assert bytes(c.decompress(codec, packed, limit=len(data))) == data
        with pytest.raises(RecordTooLargeError):
            c.decompress(codec, packed, limit=len(data) - 1)


@pytest.mark.parametrize("codec", [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
def test_garbage_and_cut_off_payloads_are_corrupt(codec):
    packed = c.compress(codec, DATA)
    garbage = random.Random(7).randbytes(300)    # fixed: random bytes can, rarely, be a valid snappy block
    for bad in (garbage, packed[: len(packed) // 2]):
        with pytest.raises(CorruptRecordError):
            c.decompress(codec, bad, limit=len(DATA))


def test_unknown_compression_types_and_zstd_below_magic_2_are_unsupported():
    for codec in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError, match=f"compression type {codec}"):
            c.decompress(codec, b"x", limit=10)
    with pytest.raises(UnsupportedCompressionError, match="zstd"):
        c.compress(c.ZSTD, b"x", magic=1)


def test_random_bytes_as_snappy_are_refused_as_corrupt_or_too_large_never_anything_else():
    rnd = random.Random(26)
    for _ in range(2000):
        try:
            c.decompress(c.SNAPPY, rnd.randbytes(rnd.randint(1, 400)), limit=1 << 20)
        except (CorruptRecordError, RecordTooLargeError):
            pass
