"""LZ4 frames as Kafka writes them, and the broken header checksum of Kafka's magic 0 messages.

Frame layout (LZ4 frame format 1.6, little-endian)::

    magic:uint32=0x184D2204  FLG:uint8  BD:uint8  [content_size:uint64]  HC:uint8
    { block_size:uint32 (high bit: stored uncompressed)  block_data  [block_checksum:uint32] }*
    end_mark:uint32=0  [content_checksum:uint32]

Kafka's ``Lz4BlockOutputStream`` writes FLG version 01 with independent blocks
and nothing optional (``0x60``), BD 64 KB blocks (``0x40``); its reader refuses
dependent blocks. :func:`frame` writes exactly that, from raw blocks made by
``cramjam.lz4.compress_block`` (cramjam's own frame writer links blocks, which
Java consumers refuse).

HC is the second byte of XXH32 (seed 0) over FLG..content size. Kafka before
0.10 hashed the 4 magic bytes too; Kafka keeps that broken checksum for magic 0
messages, both ways (``useBrokenFlagDescriptorChecksum``). :func:`frame` writes
it for ``broken_checksum=True``, and :func:`repair_header_checksum` rewrites it
to the standard value before a standard decoder reads the frame.
"""
from __future__ import annotations

import struct

import cramjam

from ingest.errors import CorruptRecordError

MAGIC = 0x184D2204
MAGIC_BYTES = struct.pack("<I", MAGIC)
FLG_KAFKA = 0x60       # version 01, independent blocks, no checksums, no content size
BD_64KB = 0x40
BLOCK_SIZE = 64 * 1024
FLG_CONTENT_SIZE = 0x08
BLOCK_SIZE_FIELD = struct.Struct("<I")
UNCOMPRESSED_BIT = 0x80000000
END_MARK = bytes(4)

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (pure Python: used on frame headers of a few bytes only)."""
    n = len(data)
    p = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32
        while p + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, p)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            p += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        (k,) = struct.unpack_from("<I", data, p)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def header_checksum(descriptor: bytes) -> int:
    """The HC byte of a frame whose descriptor (FLG..content size) is ``descriptor``."""
    return (xxh32(descriptor) >> 8) & 0xFF


def frame(data: bytes | memoryview, *, broken_checksum: bool = False) -> bytes:
    """``data`` as one LZ4 frame of independent 64 KB blocks, as Kafka's Java client writes it."""
    descriptor = bytes((FLG_KAFKA, BD_64KB))
    hc = header_checksum(MAGIC_BYTES + descriptor if broken_checksum else descriptor)
    parts = [MAGIC_BYTES, descriptor, bytes((hc,))]
    mv = memoryview(data)
    pack = BLOCK_SIZE_FIELD.pack
    for i in range(0, len(mv), BLOCK_SIZE):
        chunk = mv[i:i + BLOCK_SIZE]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: store it
            parts += (pack(len(chunk) | UNCOMPRESSED_BIT), bytes(chunk))
        else:
            parts += (pack(len(block)), block)
    parts.append(END_MARK)
    return b"".join(parts)


def repair_header_checksum(data: bytes | memoryview) -> bytes | memoryview:
    """``data`` with the standard HC if it carries Kafka's broken one (magic 0); else ``data``.

    Raises:
        CorruptRecordError: ``data`` is not an LZ4 frame.
    """
    if len(data) < 7 or bytes(data[:4]) != MAGIC_BYTES:
        raise CorruptRecordError(f"lz4 payload of {len(data)} bytes is not an LZ4 frame (magic {bytes(data[:4]).hex()})")
    end = 6 + (8 if data[4] & FLG_CONTENT_SIZE else 0)
    if len(data) <= end:
        raise CorruptRecordError(f"lz4 frame header is cut off at {len(data)} bytes")
    descriptor = bytes(data[4:end])
    right = header_checksum(descriptor)
    if data[end] == right:
        return data
    out = bytearray(data)
    out[end] = right
    return out
