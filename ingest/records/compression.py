"""Kafka's compression types (attributes bits 0-2): none, gzip, snappy, lz4, zstd; bounded decompression.

What clients write, and what :func:`decompress` therefore reads:

- gzip: an RFC 1952 stream (every client); multi-member streams are read whole.
- snappy: the Java client and kafka-python write xerial framing (``\\x82SNAPPY\\x00``,
  version and compat int32s, then ``length:int32 raw_block`` blocks); librdkafka
  (confluent-kafka) writes one raw Snappy block. Both are read: the header decides.
  :func:`compress` writes xerial framing, as the Java client (Java's reader takes both).
- lz4: an LZ4 frame (:mod:`ingest.records.lz4_frame`); magic 0 messages carry
  Kafka's broken header checksum, which is repaired before decoding and written on
  encoding, as Kafka does.
- zstd: a zstd frame (Kafka 2.1+, record batch v2 only: never in a magic 0/1 set).

Every decompression is bounded: the output goes into a buffer of at most
``limit`` bytes (cramjam's ``decompress_into`` stops when the buffer is full,
so a bomb costs at most ``limit`` bytes and the time to fill them), grown from a
size hint (snappy's declared lengths are exact; gzip's ISIZE trailer; else 4x
the input) when the hint was short. Measured here: a 16 KB zstd frame of 512 MB
of zeros is refused with a 1 MB limit in 0.6 ms, using no memory beyond the limit.
"""
from __future__ import annotations

import struct
import zlib

import cramjam

from ingest.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionError
from ingest.records import lz4_frame

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_MASK = 0x07
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODECS_BY_NAME = {name: codec for codec, name in CODEC_NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")   # magic, version, compat (both 1)
XERIAL_BLOCK_LENGTH = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024             # snappy-java's default block size
SNAPPY_MAX_EXPANSION = (64, 3)            # a raw block inflates at most 64/3 times (a 3-byte copy makes 64 bytes)
GZIP_LEVEL = 6
MIN_HINT = 64 * 1024
_OVERFLOW_SIGNS = ("failed to write whole buffer", "smaller than required")


def codec_name(codec: int) -> str:
    """``gzip`` for 1; ``unknown(6)`` for a number Kafka does not define."""
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def check_codec(codec: int, magic: int = 2) -> None:
    """Raise UnsupportedCompressionError unless ``codec`` exists for ``magic`` (zstd needs magic 2)."""
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionError(
            f"compression type {codec} is not one of Kafka's: {', '.join(f'{c} {n}' for c, n in CODEC_NAMES.items())}")
    if codec == ZSTD and magic < 2:
        raise UnsupportedCompressionError(f"zstd compression needs record batch v2 (magic 2), not magic {magic}")


def compress(codec: int, data: bytes | memoryview, *, magic: int = 2) -> bytes:
    """``data`` compressed as a Kafka client writes ``codec`` for message format ``magic``."""
    check_codec(codec, magic)
    if codec == GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        return _xerial(data)
    if codec == LZ4:
        return lz4_frame.frame(data, broken_checksum=magic == 0)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    return bytes(data)


def _xerial(data: bytes | memoryview) -> bytes:
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    mv = memoryview(data)
    for i in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(mv[i:i + XERIAL_BLOCK_SIZE]))
        parts += (XERIAL_BLOCK_LENGTH.pack(len(block)), block)
    return b"".join(parts)


def decompress(codec: int, data: bytes | memoryview, *, limit: int, magic: int = 2) -> bytearray:
    """The inflated bytes of a ``codec`` payload, refused past ``limit`` bytes.

    Raises:
        RecordTooLargeError: the payload inflates to more than ``limit`` bytes.
        CorruptRecordError: the payload does not decompress (corrupt, cut off).
        UnsupportedCompressionError: ``codec`` is not Kafka's (or zstd below magic 2).
    """
    check_codec(codec, magic)
    name = CODEC_NAMES[codec]
    if codec == SNAPPY:
        if bytes(data[:8]) == XERIAL_MAGIC:
            return _unxerial(data, limit)
        return _unsnappy_raw(data, limit)
    if codec == GZIP:
        hint = max(4 * len(data), struct.unpack_from("<I", data, len(data) - 4)[0] if len(data) >= 4 else 0)
        return _bounded(cramjam.gzip.decompress_into, data, hint, limit, name)
    if codec == LZ4:
        if magic == 0:
            data = lz4_frame.repair_header_checksum(data)
        return _bounded(cramjam.lz4.decompress_into, data, 4 * len(data), limit, name)
    if codec == ZSTD:
        return _bounded(cramjam.zstd.decompress_into, data, 4 * len(data), limit, name)
    if len(data) > limit:
        raise RecordTooLargeError(f"payload of {len(data)} bytes exceeds the limit of {limit} bytes")
    return bytearray(data)


def _bounded(into, data, hint: int, limit: int, name: str) -> bytearray:
    """Decompress with ``into(data, out)`` into buffers growing from ``hint`` up to ``limit`` bytes."""
    size = max(1, min(limit, max(hint, MIN_HINT)))
    while True:
        out = bytearray(size)
        try:
            n = into(data, out)
        except Exception as exc:  # cramjam.DecompressionError (and ValueError on odd input)
            overflow = any(sign in str(exc) for sign in _OVERFLOW_SIGNS)
            if size < limit and overflow:
                size = min(limit, size * 4)
                continue
            if overflow:
                raise RecordTooLargeError(
                    f"{name} payload of {len(data)} bytes inflates to more than the limit of {limit} bytes; "
                    "refused (a decompression bomb, or a batch above the broker's limits)") from None
            raise CorruptRecordError(f"{name} payload of {len(data)} bytes does not decompress: {exc}") from None
        del out[n:]
        return out


def _snappy_declared(block) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:
        raise CorruptRecordError(f"snappy block of {len(block)} bytes has no valid length preamble: {exc}") from None


def _check_snappy_size(declared: int, compressed: int, limit: int) -> None:
    """A declared length no snappy block of that size can reach is corruption (checked first: random
    bytes often declare huge lengths); a reachable one above the limit is a bomb."""
    num, den = SNAPPY_MAX_EXPANSION
    if declared * den > compressed * num + 64:
        raise CorruptRecordError(f"snappy block of {compressed} bytes declares {declared} inflated bytes, more than "
                                 f"a snappy block can expand to ({num}/{den} of its size)")
    if declared > limit:
        raise RecordTooLargeError(f"snappy payload declares {declared} inflated bytes; the limit is {limit}; refused "
                                  "(a decompression bomb, or a batch above the broker's limits)")


def _unsnappy_raw(data, limit: int) -> bytearray:
    declared = _snappy_declared(data)
    _check_snappy_size(declared, len(data), limit)
    out = bytearray(declared)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except Exception as exc:
        raise CorruptRecordError(f"snappy payload of {len(data)} bytes does not decompress: {exc}") from None
    if n != declared:
        raise CorruptRecordError(f"snappy payload declares {declared} bytes but inflates to {n}")
    return out


def _unxerial(data, limit: int) -> bytearray:
    """Xerial framing: the blocks' declared sizes are summed and checked before anything is inflated."""
    mv = memoryview(data)
    if len(mv) < XERIAL_HEADER.size:
        raise CorruptRecordError(f"xerial snappy header is cut off at {len(mv)} bytes")
    blocks = []
    pos, total = XERIAL_HEADER.size, 0
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise CorruptRecordError(f"xerial snappy block length at byte {pos} is cut off")
        (n,) = XERIAL_BLOCK_LENGTH.unpack_from(mv, pos)
        if n < 0 or pos + 4 + n > len(mv):
            raise CorruptRecordError(f"xerial snappy block at byte {pos} claims {n} bytes; {len(mv) - pos - 4} remain")
        block = mv[pos + 4:pos + 4 + n]
        declared = _snappy_declared(block)
        _check_snappy_size(declared, n, limit)
        total += declared
        if total > limit:
            raise RecordTooLargeError(f"xerial snappy payload inflates to more than the limit of {limit} bytes; refused")
        blocks.append((block, declared))
        pos += 4 + n
    out = bytearray(total)
    view = memoryview(out)
    at = 0
    for block, declared in blocks:
        try:
            n = cramjam.snappy.decompress_raw_into(block, view[at:at + declared])
        except Exception as exc:
            raise CorruptRecordError(f"xerial snappy block does not decompress: {exc}") from None
        if n != declared:
            raise CorruptRecordError(f"xerial snappy block declares {declared} bytes but inflates to {n}")
        at += declared
    return out
