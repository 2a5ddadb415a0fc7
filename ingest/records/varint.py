"""Varints: unsigned LEB128 (the protocol's compact lengths) and zigzag (the record fields).

Kafka (and protobuf) write an integer 7 bits at a time, least significant
group first, the high bit of each byte saying "more follows". Record fields
are signed and zigzag-encoded first (``(n << 1) ^ (n >> 63)``), so that small
negative numbers (-1 for a null key) stay one byte; the flexible protocol
versions (KIP-482) use the unsigned form for compact lengths and tag numbers.

Widths as Kafka's ``ByteUtils``: a *varint* holds 32 bits and takes at most 5
bytes, a *varlong* 64 bits and at most 10. A longer run of continuation bits,
or a buffer that ends inside a varint, raises
:class:`~ingest.errors.InvalidRecordError` naming the position (Kafka answers
INVALID_RECORD for "Varint is too long").

Decoders take any buffer (bytes, bytearray, memoryview) and a position, and
return ``(value, next position)``; they never copy.
"""
from __future__ import annotations

from ingest.errors import InvalidRecordError

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def _fail(buf, pos: int, start: int, max_bytes: int, what: str) -> InvalidRecordError:
    if pos >= len(buf):
        return InvalidRecordError(f"{what} at byte {start} is cut off: the buffer ends at byte {len(buf)}")
    return InvalidRecordError(f"{what} at byte {start} is too long: more than {max_bytes} bytes have "
                              f"the continuation bit set")


def read_uvarint(buf, pos: int, max_bytes: int = VARINT_MAX_BYTES) -> tuple[int, int]:
    """An unsigned varint at ``pos`` (at most ``max_bytes`` bytes): ``(value, next position)``."""
    start = pos
    value = shift = 0
    end = min(len(buf), pos + max_bytes)
    while pos < end:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise _fail(buf, pos, start, max_bytes, "unsigned varint")


def read_varint(buf, pos: int) -> tuple[int, int]:
    """A zigzag varint (32 bits, at most 5 bytes) at ``pos``: ``(value, next position)``."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:  # one byte: the common case of small lengths and deltas
        return (b >> 1) ^ -(b & 1), pos + 1
    v, nxt = read_uvarint(buf, pos, VARINT_MAX_BYTES)
    if v > 0xFFFFFFFF:
        raise InvalidRecordError(f"varint at byte {pos} does not fit 32 bits ({v:#x})")
    return (v >> 1) ^ -(v & 1), nxt


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """A zigzag varlong (64 bits, at most 10 bytes) at ``pos``: ``(value, next position)``."""
    v, nxt = read_uvarint(buf, pos, VARLONG_MAX_BYTES)
    if v > 0xFFFFFFFFFFFFFFFF:
        raise InvalidRecordError(f"varlong at byte {pos} does not fit 64 bits ({v:#x})")
    return (v >> 1) ^ -(v & 1), nxt


def write_uvarint(value: int, out: bytearray) -> None:
    """Append ``value`` (>= 0) as an unsigned varint."""
    if value < 0:
        raise ValueError(f"an unsigned varint cannot hold {value}")
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def zigzag(value: int) -> int:
    """The zigzag form of a signed 64-bit ``value`` (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return (value << 1) ^ (value >> 63)


def write_varint(value: int, out: bytearray) -> None:
    """Append a signed ``value`` as a zigzag varint/varlong (same bytes; the width is the reader's)."""
    v = (value << 1) ^ (value >> 63)
    if v < 0x80:
        out.append(v)
        return
    write_uvarint(v, out)


def encode_varint(value: int) -> bytes:
    """``value`` as a zigzag varint, as new bytes."""
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


def encode_uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint, as new bytes."""
    out = bytearray()
    write_uvarint(value, out)
    return bytes(out)


def size_of_uvarint(value: int) -> int:
    """Bytes the unsigned varint of ``value`` takes."""
    n = 1
    while value > 0x7F:
        value >>= 7
        n += 1
    return n


def size_of_varint(value: int) -> int:
    """Bytes the zigzag varint of ``value`` takes."""
    return size_of_uvarint((value << 1) ^ (value >> 63))
