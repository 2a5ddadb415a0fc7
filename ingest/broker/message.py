"""One message's byte layout: encode, decode, CRC.

Layout (all integers big-endian; identical on disk and on the wire)::

    length:int32        bytes that follow (magic + attributes + crc + payload)
    magic:int8  = 1
    attributes:int8     bits 0-1 codec (0 none, 1 gzip, 2 snappy), other bits 0
    crc:uint32          CRC-32 (IEEE, zlib.crc32) over attributes byte + payload
    payload             length - 6 bytes

Unlike Kafka 0.7 the CRC covers the attributes byte, so a flipped codec bit is
caught. The CRC is computed as ``crc32(payload, CRC_SEED[attributes])`` where
``CRC_SEED[a] = crc32(bytes([a]))``: the same value as a CRC over the
attributes byte followed by the payload, without copying them together.
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from ingest.errors import BufferUnderrunError, InvalidMessageError

MAGIC = 1
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY = 0, 1, 2
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy"}
CODEC_MASK = 0x03
"""Attribute bits carrying the codec; every other attribute bit must be 0."""

LENGTH = struct.Struct(">i")
"""The leading ``length:int32``."""
HEADER = struct.Struct(">ibbI")
"""``length:int32 magic:int8 attributes:int8 crc:uint32``."""
HEADER_SIZE = HEADER.size  # 10
LENGTH_SIZE = LENGTH.size  # 4
OVERHEAD = HEADER_SIZE - LENGTH_SIZE
"""Bytes counted by ``length`` besides the payload (magic, attributes, crc): 6."""
ATTRIBUTES_OFFSET = 5
CRC_OFFSET = 6
"""Positions of ``attributes`` and ``crc`` in a message; the payload starts at ``HEADER_SIZE`` (10)."""

CRC_SEED = tuple(zlib.crc32(bytes([a])) for a in range(256))
"""CRC-32 of the single attributes byte, indexed by its value."""

HEADER_MA = struct.Struct(">iHI")
"""The header with magic and attributes read as one ``uint16`` (hot validation loops)."""
MA_MIN = MAGIC << 8 | 0
MA_MAX = MAGIC << 8 | 2
"""Valid magic+attributes values: magic 1, codec 0..2, other attribute bits 0."""
CRC_SEED_MA = tuple(CRC_SEED[ma & 0xFF] if MA_MIN <= ma <= MA_MAX else 0 for ma in range(MA_MAX + 1))
"""CRC seed indexed by the magic+attributes ``uint16``."""


def message_crc(attributes: int, payload: bytes | memoryview) -> int:
    """CRC-32 over the attributes byte and the payload."""
    return zlib.crc32(payload, CRC_SEED[attributes & 0xFF])


def encode_message(payload: bytes, codec: int = CODEC_NONE) -> bytes:
    """Encode one message; ``codec`` only labels the payload (compress it first)."""
    if codec not in CODEC_NAMES:
        raise InvalidMessageError(f"unknown codec {codec}; allowed are {sorted(CODEC_NAMES)}")
    return HEADER.pack(OVERHEAD + len(payload), MAGIC, codec, zlib.crc32(payload, CRC_SEED[codec])) + payload


class Message(NamedTuple):
    """A decoded message (payload still compressed if ``codec`` is not none)."""

    attributes: int
    crc: int
    payload: bytes

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def size(self) -> int:
        """Bytes on disk, header included."""
        return HEADER_SIZE + len(self.payload)


def check_header(magic: int, attributes: int) -> str | None:
    """Why a header is invalid, or None when magic and codec are known."""
    if magic != MAGIC:
        return f"unknown magic {magic} (expected {MAGIC})"
    if attributes & ~CODEC_MASK & 0xFF or (attributes & CODEC_MASK) not in CODEC_NAMES:
        return f"unknown attributes 0x{attributes & 0xFF:02x} (codec must be one of {sorted(CODEC_NAMES)}, other bits 0)"
    return None


def decode_message(buf: bytes | memoryview, pos: int = 0) -> Message:
    """Decode and validate the message at ``pos``.

    Raises:
        BufferUnderrunError: the buffer ends inside the message.
        InvalidMessageError: bad length, magic, attributes or CRC.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise BufferUnderrunError(
            f"buffer underrun decoding message header at {pos}: need {HEADER_SIZE} bytes, have {len(buf) - pos}"
        )
    length, magic, attributes, crc = HEADER.unpack_from(buf, pos)
    if length < OVERHEAD:
        raise InvalidMessageError(f"message at {pos}: length {length} is below the minimum {OVERHEAD}")
    end = pos + LENGTH_SIZE + length
    if end > len(buf):
        raise BufferUnderrunError(
            f"buffer underrun decoding message at {pos}: length says {length} bytes follow, have {len(buf) - pos - LENGTH_SIZE}"
        )
    why = check_header(magic, attributes)
    if why:
        raise InvalidMessageError(f"message at {pos}: {why}")
    payload = bytes(memoryview(buf)[pos + HEADER_SIZE:end])
    actual = zlib.crc32(payload, CRC_SEED[attributes & 0xFF])
    if actual != crc:
        raise InvalidMessageError(f"message at {pos}: CRC mismatch (stored 0x{crc:08x}, computed 0x{actual:08x})")
    return Message(attributes & 0xFF, crc, payload)
