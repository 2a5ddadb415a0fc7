"""One Kafka 0.7 message's byte layout by magic (0, 1 and this product's 2): encode, decode, CRC rule.

Three formats; the magic byte says which (all integers big-endian; identical
on disk and on the wire)::

    magic 0 (Kafka 0.6/0.7)  length:int32 magic:int8=0 crc:uint32 payload
    magic 1 (Kafka 0.7)      length:int32 magic:int8=1 attributes:int8 crc:uint32 payload
    magic 2 (ingest v2)      length:int32 magic:int8=2 attributes:int8 crc:uint32 payload

``length`` counts the bytes that follow (magic [+ attributes] + crc +
payload): the header is 9 bytes for magic 0 (overhead 5), 10 for magic 1 and
2 (overhead 6). ``attributes`` bits 0-1 are the codec (0 none, 1 gzip,
2 snappy), every other bit 0; magic 0 has no attributes, so it is never
compressed.

CRC rules (CRC-32 IEEE, ``zlib.crc32``):

* magic 0 and magic 1: over the payload only, as Kafka 0.7's ``Message``
  computes it. A flipped attributes bit is NOT caught (0.7's weakness).
* magic 2: over the attributes byte followed by the payload, computed as
  ``crc32(payload, CRC_SEED[attributes])`` where
  ``CRC_SEED[a] = crc32(bytes([a]))`` (no copy). 0.7 never used magic 2.
* legacy magic 1: logs written by this product before magic 2 existed hold
  magic 1 with the attributes+payload rule. A magic-1 message is valid when
  its CRC matches either rule; the second CRC is computed only on a mismatch
  of the first.
"""
from __future__ import annotations

import struct
import zlib
from itertools import repeat
from operator import add
from typing import NamedTuple, Sequence

from ingest.errors import BufferUnderrunError, InvalidMessageError
from ingest.records.crc import crc32 as _crc32  # ISA-L's CRC-32 when installed (same values as zlib's)

MAGIC_V0, MAGIC_V1, MAGIC_V2 = 0, 1, 2
MAGIC = MAGIC_V2
"""The magic this product writes by default."""
MAGICS = (MAGIC_V0, MAGIC_V1, MAGIC_V2)
MAGIC_NAMES = {MAGIC_V0: "kafka-0.6", MAGIC_V1: "kafka-0.7", MAGIC_V2: "ingest-v2"}

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY = 0, 1, 2
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy"}
CODEC_MASK = 0x03
"""Attribute bits carrying the codec; every other attribute bit must be 0."""

RULE_PAYLOAD = "crc(payload)"
"""The CRC rule of magic 0 and magic 1 (Kafka 0.7)."""
RULE_ATTRIBUTES_PAYLOAD = "crc(attributes+payload)"
"""The CRC rule of magic 2 (and of legacy magic 1, written by this product before magic 2)."""

LENGTH = struct.Struct(">i")
"""The leading ``length:int32``."""
HEADER = struct.Struct(">ibbI")
"""Magic 1/2: ``length:int32 magic:int8 attributes:int8 crc:uint32``."""
HEADER_V0 = struct.Struct(">ibI")
"""Magic 0: ``length:int32 magic:int8 crc:uint32``."""
HEADER_SIZE = HEADER.size  # 10
HEADER_SIZE_V0 = HEADER_V0.size  # 9
LENGTH_SIZE = LENGTH.size  # 4
MAGIC_OFFSET = 4
OVERHEAD = HEADER_SIZE - LENGTH_SIZE
"""Bytes counted by ``length`` besides the payload for magic 1/2 (magic, attributes, crc): 6."""
OVERHEAD_V0 = HEADER_SIZE_V0 - LENGTH_SIZE
"""The same for magic 0 (magic, crc): 5. The smallest valid ``length`` of any message."""
MIN_MESSAGE_SIZE = HEADER_SIZE_V0
"""Bytes of the smallest possible message (magic 0, empty payload): 9."""
ATTRIBUTES_OFFSET = 5
CRC_OFFSET = 6
"""Positions of ``attributes`` and ``crc`` in a magic-1/2 message; the payload starts at ``HEADER_SIZE`` (10)."""
CRC_OFFSET_V0 = 5
"""Position of ``crc`` in a magic-0 message; the payload starts at ``HEADER_SIZE_V0`` (9)."""

CRC_SEED = tuple(zlib.crc32(bytes([a])) for a in range(256))
"""CRC-32 of the single attributes byte, indexed by its value."""

HEADER_MA = struct.Struct(">iHI")
"""The header with magic and attributes read as one ``uint16`` (hot validation loops)."""
MA_MIN = MAGIC_V2 << 8 | 0
MA_MAX = MAGIC_V2 << 8 | 2
"""Valid magic+attributes values of magic 2 (the hot path): codec 0..2, other attribute bits 0."""
CRC_SEED_MA = tuple(CRC_SEED[ma & 0xFF] if MA_MIN <= ma <= MA_MAX else 0 for ma in range(MA_MAX + 1))
"""CRC seed indexed by the magic+attributes ``uint16`` (magic 2)."""
MA1_MIN = MAGIC_V1 << 8 | 0
MA1_MAX = MAGIC_V1 << 8 | 2
"""Valid magic+attributes values of magic 1: codec 0..2, other attribute bits 0."""
CRC_SEED_MA1 = tuple(CRC_SEED[ma & 0xFF] if MA1_MIN <= ma <= MA1_MAX else 0 for ma in range(MA1_MAX + 1))
"""The legacy magic-1 rule's CRC seed indexed by the magic+attributes ``uint16``."""


def header_size(magic: int) -> int:
    """Bytes before the payload: 9 for magic 0, 10 for magic 1 and 2."""
    return HEADER_SIZE_V0 if magic == MAGIC_V0 else HEADER_SIZE


def message_crc(attributes: int, payload: bytes | memoryview, magic: int = MAGIC) -> int:
    """The CRC a message of ``magic`` must carry (magic 0/1: payload; magic 2: attributes + payload)."""
    if magic == MAGIC_V2:
        return zlib.crc32(payload, CRC_SEED[attributes & 0xFF])
    return zlib.crc32(payload)


def crc_rule(magic: int, attributes: int, crc: int, payload: bytes | memoryview) -> str | None:
    """Which CRC rule ``crc`` satisfies for this message (:data:`RULE_PAYLOAD` or
    :data:`RULE_ATTRIBUTES_PAYLOAD`), or None when it matches none its magic allows."""
    if magic == MAGIC_V2:
        return RULE_ATTRIBUTES_PAYLOAD if zlib.crc32(payload, CRC_SEED[attributes & 0xFF]) == crc else None
    if zlib.crc32(payload) == crc:
        return RULE_PAYLOAD
    if magic == MAGIC_V1 and zlib.crc32(payload, CRC_SEED[attributes & 0xFF]) == crc:
        return RULE_ATTRIBUTES_PAYLOAD  # legacy magic 1
    return None


def encode_message(payload: bytes, codec: int = CODEC_NONE, magic: int = MAGIC) -> bytes:
    """Encode one message; ``codec`` only labels the payload (compress it first).

    Raises:
        InvalidMessageError: unknown magic or codec, or a codec with magic 0 (no attributes).
    """
    if codec not in CODEC_NAMES:
        raise InvalidMessageError(f"unknown codec {codec}; allowed are {sorted(CODEC_NAMES)}")
    if magic == MAGIC_V2:
        return HEADER.pack(OVERHEAD + len(payload), MAGIC_V2, codec, zlib.crc32(payload, CRC_SEED[codec])) + payload
    if magic == MAGIC_V1:
        return HEADER.pack(OVERHEAD + len(payload), MAGIC_V1, codec, zlib.crc32(payload)) + payload
    if magic == MAGIC_V0:
        if codec != CODEC_NONE:
            raise InvalidMessageError(
                f"codec {CODEC_NAMES[codec]} is impossible with magic 0 (it has no attributes byte); "
                f"compressed messages need magic 1 or 2")
        return HEADER_V0.pack(OVERHEAD_V0 + len(payload), MAGIC_V0, zlib.crc32(payload)) + payload
    raise InvalidMessageError(f"unknown magic {magic}; allowed are {list(MAGICS)}")


_SET_STRUCTS: dict[tuple[int, int, int], struct.Struct] = {}
"""(magic, payload size, count) -> the Struct of a whole set of equal-size messages (see encode_messages)."""
_SET_STRUCTS_MAX = 256
_SET_STRUCT_MAX_COUNT = 1024
"""Larger sets take the join path (a cached Struct holds a few words per field)."""


def encode_messages(payloads: Sequence[bytes], magic: int = MAGIC) -> bytes:
    """Uncompressed messages of ``magic`` back to back: the bytes of ``encode_message(p, CODEC_NONE,
    magic)`` for every payload, joined, in one pass with no Python bytecode per message.

    CRCs (and lengths) are computed by C-level ``map`` loops. A set of up to 1,024 equal-size ``bytes``
    payloads (fixed-size records) is laid into one argument list by slice assignment and written by one cached
    ``struct.Struct`` (headers and payloads in one buffer); any other set is one ``bytes.join`` of
    the headers (packed by a ``map``) interleaved with the payloads by slice assignment.

    Raises:
        InvalidMessageError: unknown magic.
    """
    if magic not in MAGICS:
        raise InvalidMessageError(f"unknown magic {magic}; allowed are {list(MAGICS)}")
    n = len(payloads)
    if n == 0:
        return b""
    sizes = list(map(len, payloads))
    if magic == MAGIC_V0:   # length:int32 magic:int8 crc:uint32 payload
        head, overhead, piece = HEADER_V0, OVERHEAD_V0, "ibI%ds"
        crcs = map(_crc32, payloads)
    else:                   # length:int32 (magic << 8 | attributes 0):uint16 crc:uint32 payload
        head, overhead, piece = HEADER_MA, OVERHEAD, "iHI%ds"
        crcs = map(_crc32, payloads, repeat(CRC_SEED[CODEC_NONE], n)) if magic == MAGIC_V2 \
            else map(_crc32, payloads)
    middle = magic if magic == MAGIC_V0 else magic << 8
    size = sizes[0]
    if n <= _SET_STRUCT_MAX_COUNT and sizes.count(size) == n and all(map(bytes.__instancecheck__, payloads)):
        # one Struct for the whole set (struct's "s" takes bytes only, not memoryview)
        args: list = [middle] * (4 * n)   # (length, magic[+attributes], crc, payload) per message
        args[0::4] = repeat(size + overhead, n)
        args[2::4] = crcs
        args[3::4] = payloads
        key = (magic, size, n)
        whole = _SET_STRUCTS.get(key)
        if whole is None:
            if len(_SET_STRUCTS) >= _SET_STRUCTS_MAX:
                _SET_STRUCTS.clear()
            whole = _SET_STRUCTS[key] = struct.Struct(">" + piece % size * n)
        return whole.pack(*args)
    parts: list = [None] * (2 * n)
    parts[0::2] = map(head.pack, map(add, sizes, repeat(overhead, n)), repeat(middle, n), crcs)
    parts[1::2] = payloads
    return b"".join(parts)


class Message(NamedTuple):
    """A decoded message (payload still compressed if ``codec`` is not none)."""

    attributes: int
    crc: int
    payload: bytes
    magic: int = MAGIC
    rule: str = RULE_ATTRIBUTES_PAYLOAD

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def size(self) -> int:
        """Bytes on disk, header included."""
        return header_size(self.magic) + len(self.payload)


class Header(NamedTuple):
    """A message header read by :func:`read_header` (``attributes`` is 0 for magic 0)."""

    length: int
    magic: int
    attributes: int
    crc: int
    size: int
    """Header bytes (9 or 10): the payload starts at ``pos + size``."""


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> Header | None:
    """The header at ``pos`` read by its magic, or None when the buffer holds too little of it.

    Does not validate (see :func:`check_header`); an unknown magic is read with the magic-1/2 layout.
    """
    n = len(buf) - pos
    if n < HEADER_SIZE_V0:
        return None
    if buf[pos + MAGIC_OFFSET] == MAGIC_V0:
        length, magic, crc = HEADER_V0.unpack_from(buf, pos)
        return Header(length, magic, 0, crc, HEADER_SIZE_V0)
    if n < HEADER_SIZE:
        return None
    length, magic, attributes, crc = HEADER.unpack_from(buf, pos)
    return Header(length, magic, attributes & 0xFF, crc, HEADER_SIZE)


def min_length(magic: int) -> int:
    """The smallest valid ``length`` of a message of ``magic`` (5 for magic 0, else 6)."""
    return OVERHEAD_V0 if magic == MAGIC_V0 else OVERHEAD


def check_header(magic: int, attributes: int) -> str | None:
    """Why a header is invalid, or None when magic and codec are known (``attributes`` 0 for magic 0)."""
    if magic not in MAGICS:
        return f"unknown magic {magic} (allowed are {list(MAGICS)})"
    if attributes & ~CODEC_MASK & 0xFF or (attributes & CODEC_MASK) not in CODEC_NAMES:
        return f"unknown attributes 0x{attributes & 0xFF:02x} (codec must be one of {sorted(CODEC_NAMES)}, other bits 0)"
    return None


def decode_message(buf: bytes | memoryview, pos: int = 0) -> Message:
    """Decode and validate the message at ``pos`` by its magic's rule.

    Raises:
        BufferUnderrunError: the buffer ends inside the message.
        InvalidMessageError: bad length, magic, attributes or CRC.
    """
    h = read_header(buf, pos)
    if h is None:
        need = HEADER_SIZE_V0 if len(buf) - pos < HEADER_SIZE_V0 else HEADER_SIZE
        raise BufferUnderrunError(
            f"buffer underrun decoding message header at {pos}: need {need} bytes, have {len(buf) - pos}"
        )
    why = check_header(h.magic, h.attributes)
    if why:
        raise InvalidMessageError(f"message at {pos}: {why}")
    if h.length < h.size - LENGTH_SIZE:
        raise InvalidMessageError(
            f"message at {pos}: length {h.length} is below the minimum {h.size - LENGTH_SIZE} of magic {h.magic}")
    end = pos + LENGTH_SIZE + h.length
    if end > len(buf):
        raise BufferUnderrunError(
            f"buffer underrun decoding message at {pos}: length says {h.length} bytes follow, have {len(buf) - pos - LENGTH_SIZE}"
        )
    payload = bytes(memoryview(buf)[pos + h.size:end])
    rule = crc_rule(h.magic, h.attributes, h.crc, payload)
    if rule is None:
        expected = message_crc(h.attributes, payload, h.magic)
        raise InvalidMessageError(
            f"message at {pos}: CRC mismatch for magic {h.magic} (stored 0x{h.crc:08x}, computed 0x{expected:08x} "
            f"by {RULE_ATTRIBUTES_PAYLOAD if h.magic == MAGIC_V2 else RULE_PAYLOAD})")
    return Message(h.attributes, h.crc, payload, h.magic, rule)


def other_magic(mv: memoryview, pos: int, end: int, max_message_size: int) -> tuple[int, int] | None:
    """A valid magic-0 or magic-1 message in ``mv[pos:end]``: (its end, its codec as a magic-2
    ``ma`` (``MA_MIN + codec``), or -1 for magic 0); None when there is none (bad or cut off:
    see :func:`why_invalid`). The slow path of :func:`ingest.records.message_set.scan`, whose hot loop is magic 2."""
    if end - pos < HEADER_SIZE_V0:
        return None
    magic = mv[pos + MAGIC_OFFSET]
    if magic == MAGIC_V0:
        length, _magic, crc = HEADER_V0.unpack_from(mv, pos)
        nxt = pos + LENGTH_SIZE + length
        if OVERHEAD_V0 <= length <= max_message_size + OVERHEAD_V0 and nxt <= end \
                and zlib.crc32(mv[pos + HEADER_SIZE_V0:nxt]) == crc:
            return nxt, -1
        return None
    if magic != MAGIC_V1 or end - pos < HEADER_SIZE:
        return None
    length, _magic, attributes, crc = HEADER.unpack_from(mv, pos)
    attributes &= 0xFF
    nxt = pos + LENGTH_SIZE + length
    if not (OVERHEAD <= length <= max_message_size + OVERHEAD and nxt <= end and attributes in CODEC_NAMES):
        return None
    payload = mv[pos + HEADER_SIZE:nxt]
    # Kafka 0.7's rule first; then the legacy rule of this product's magic-1 logs
    if zlib.crc32(payload) != crc and zlib.crc32(payload, CRC_SEED[attributes]) != crc:
        return None
    return nxt, MA_MIN + attributes


def why_invalid(mv: memoryview, pos: int, end: int, max_message_size: int, origin: int = 0) -> tuple[str, bool, bool]:
    """(the precise reason the message in ``mv[pos:end]`` is not valid, whether it is cut off by
    ``end``, whether it is too large); ``origin`` is added to the position in the text."""
    at = origin + pos
    h = read_header(mv[:end], pos)
    if h is None:
        if end - pos >= LENGTH_SIZE and LENGTH.unpack_from(mv, pos)[0] < OVERHEAD_V0:
            return f"message at {at}: length below the minimum {OVERHEAD_V0}", False, False
        need = HEADER_SIZE_V0 if end - pos <= MAGIC_OFFSET or mv[pos + MAGIC_OFFSET] == MAGIC_V0 else HEADER_SIZE
        return f"message at {at}: header cut off ({end - pos} of {need} bytes)", True, False
    length, magic, attributes, crc, size = h
    overhead = min_length(magic)
    nxt = pos + LENGTH_SIZE + length
    if length < overhead:
        of = f" of magic {magic}" if magic != MAGIC_V2 else ""
        return f"message at {at}: length {length} below the minimum {overhead}{of}", False, False
    if length - overhead > max_message_size:
        return (f"message at {at}: payload of {length - overhead} bytes exceeds max.message.size {max_message_size}",
                False, True)
    if nxt > end:
        return f"message at {at}: length {length} runs past the end by {nxt - end} bytes", True, False
    why = check_header(magic, attributes)
    if why:
        return f"message at {at}: {why}", False, False
    rule = RULE_ATTRIBUTES_PAYLOAD if magic == MAGIC_V2 else RULE_PAYLOAD
    legacy = f" or {RULE_ATTRIBUTES_PAYLOAD} (legacy)" if magic == MAGIC_V1 else ""
    return f"message at {at}: CRC mismatch (stored 0x{crc:08x}; magic {magic} requires {rule}{legacy})", False, False
