"""Message sets: encode (optionally compressed), iterate, validate, valid prefix.

A message set is messages (see :mod:`ingest.broker.message`) back to back,
nothing else. A compressed set is ONE wrapper message whose attributes name
the codec and whose payload is the compressed bytes of a plain message set;
nested compression is invalid.

:func:`scan` is the one validation loop used by append, recovery and the index
builder. It keeps no per-message Python objects: one ``struct.unpack_from``
and one ``zlib.crc32`` over a memoryview slice per message.
"""
from __future__ import annotations

import zlib
from typing import Iterator, NamedTuple, Sequence

from ingest.broker import compression
from ingest.broker.message import (
    CODEC_MASK,
    CODEC_NONE,
    CRC_SEED_MA,
    HEADER,
    HEADER_MA,
    HEADER_SIZE,
    LENGTH,
    LENGTH_SIZE,
    MA_MAX,
    MA_MIN,
    OVERHEAD,
    check_header,
    encode_message,
)
from ingest.errors import InvalidMessageError, MessageTooLargeError

_UNLIMITED = 1 << 62


class MessageAndOffset(NamedTuple):
    """One application message and where it sits in the partition log.

    ``offset`` is the byte position of the (outer) message; ``next_offset``
    the offset after it. Messages inside a compressed wrapper at O of size S
    all carry O and O+S: a compressed set is consumed as a unit.
    """

    offset: int
    next_offset: int
    payload: bytes


class ScanResult(NamedTuple):
    """Outcome of :func:`scan`.

    ``end``: position after the last whole valid message. ``count``: messages
    (outer) validated. ``error``: why scanning stopped before the buffer end
    (None when it reached it). ``cut_off``: the stop is a message whose length
    runs past the buffer (a torn tail / a fetch cut by max bytes), not a bad
    byte. ``too_large``: the stop is a message above ``max_message_size``.
    """

    end: int
    count: int
    error: str | None
    cut_off: bool
    too_large: bool = False


def encode_message_set(payloads: Sequence[bytes], codec: int = CODEC_NONE) -> bytes:
    """Encode payloads as a set; with a codec, as one compressed wrapper message."""
    plain = b"".join([encode_message(p) for p in payloads])
    if codec == CODEC_NONE:
        return plain
    return encode_message(compression.compress(codec, plain), codec)


def scan(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    end: int | None = None,
    *,
    max_message_size: int = _UNLIMITED,
    deep: bool = False,
    index: list[int] | None = None,
    index_base: int = 0,
    index_mark: int = 0,
    index_interval: int = 4096,
    origin: int = 0,
) -> ScanResult:
    """Validate messages in ``buf[pos:end]`` until the end or the first bad one.

    Checks per message: length >= 6, message fits in the buffer, magic 1,
    known codec with other attribute bits 0, CRC over attributes + payload,
    payload <= ``max_message_size``; with ``deep``, a compressed wrapper's
    inner set is decompressed and validated too.

    Args:
        index: when given, ``index_base + p`` is appended for the first message
            at or after ``index_mark`` and then every ``index_interval`` bytes
            (the sparse position index of a segment).
        origin: added to positions in error texts (file position of ``buf``).

    Returns:
        ScanResult; never raises for bad data.
    """
    if end is None:
        end = len(buf)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    # Hot loop: magic and attributes are read as one uint16 (0x0100 | codec), so
    # one chained comparison checks magic, codec and the reserved bits; any
    # failure drops to _diagnose() for the precise reason.
    unpack = HEADER_MA.unpack_from
    crc32 = zlib.crc32
    seed = CRC_SEED_MA
    top = max_message_size + OVERHEAD
    count = 0
    mark = index_mark
    add = index.append if index is not None else None
    limit = end - HEADER_SIZE
    while pos <= limit:
        length, ma, crc = unpack(mv, pos)
        nxt = pos + LENGTH_SIZE + length
        if not (OVERHEAD <= length <= top and nxt <= end and MA_MIN <= ma <= MA_MAX):
            break
        if crc32(mv[pos + HEADER_SIZE:nxt], seed[ma]) != crc:
            break
        if ma != MA_MIN and deep:
            why = _inner_error(ma - MA_MIN, mv[pos + HEADER_SIZE:nxt])
            if why:
                return ScanResult(pos, count, f"compressed message at {origin + pos}: {why}", False)
        if add is not None and pos >= mark:
            add(index_base + pos)
            mark = pos + index_interval
        pos = nxt
        count += 1
    if pos >= end:
        return ScanResult(pos, count, None, False)
    return _diagnose(mv, pos, end, count, max_message_size, origin)


def _diagnose(mv: memoryview, pos: int, end: int, count: int, max_message_size: int, origin: int) -> ScanResult:
    """The precise reason the message at ``pos`` stopped :func:`scan`."""
    at = origin + pos
    if end - pos < HEADER_SIZE:
        if end - pos >= LENGTH_SIZE and LENGTH.unpack_from(mv, pos)[0] < OVERHEAD:
            return ScanResult(pos, count, f"message at {at}: length below the minimum {OVERHEAD}", False)
        return ScanResult(pos, count, f"message at {at}: header cut off ({end - pos} of {HEADER_SIZE} bytes)", True)
    length, magic, attributes, crc = HEADER.unpack_from(mv, pos)
    nxt = pos + LENGTH_SIZE + length
    if length < OVERHEAD:
        return ScanResult(pos, count, f"message at {at}: length {length} below the minimum {OVERHEAD}", False)
    if length - OVERHEAD > max_message_size:
        return ScanResult(
            pos, count,
            f"message at {at}: payload of {length - OVERHEAD} bytes exceeds max.message.size {max_message_size}",
            False, True,
        )
    if nxt > end:
        return ScanResult(pos, count, f"message at {at}: length {length} runs past the end by {nxt - end} bytes", True)
    why = check_header(magic, attributes)
    if why:
        return ScanResult(pos, count, f"message at {at}: {why}", False)
    return ScanResult(pos, count, f"message at {at}: CRC mismatch (stored 0x{crc:08x})", False)


def _inner_error(codec: int, payload: memoryview) -> str | None:
    try:
        inner = compression.decompress(codec, payload)
    except InvalidMessageError as exc:
        return str(exc)
    r = scan(inner)
    if r.error:
        return "inner set: " + r.error
    for m in _headers(inner):
        if m & CODEC_MASK:
            return "nested compression is not allowed"
    return None


def _headers(buf: bytes) -> Iterator[int]:
    """Attributes of each message of a buffer already validated by scan()."""
    pos = 0
    while pos < len(buf):
        length, _magic, attributes, _crc = HEADER.unpack_from(buf, pos)
        yield attributes
        pos += LENGTH_SIZE + length


def validate_message_set(buf: bytes | memoryview, *, max_message_size: int = _UNLIMITED) -> int:
    """Validate a whole set as received for append; returns its message count.

    Raises:
        MessageTooLargeError: a message's payload exceeds ``max_message_size``.
        InvalidMessageError: any bad or cut-off message (names the position).
    """
    r = scan(buf, max_message_size=max_message_size, deep=True)
    if r.error:
        cls = MessageTooLargeError if r.too_large else InvalidMessageError
        raise cls(f"invalid message set of {len(buf)} bytes: {r.error}")
    return r.count


def valid_prefix(buf: bytes | memoryview) -> int:
    """Bytes of whole valid messages at the start of ``buf``."""
    return scan(buf).end


def first_message_size(buf: bytes | memoryview) -> int | None:
    """4 + length of the first message, if its length field is readable."""
    if len(buf) < LENGTH_SIZE:
        return None
    return LENGTH_SIZE + LENGTH.unpack_from(buf, 0)[0]


def iter_messages(buf: bytes | memoryview, base_offset: int = 0) -> Iterator[MessageAndOffset]:
    """Every message of ``buf`` (decompressing wrappers), with log offsets.

    Stops quietly at a cut-off last message (a fetch cut by max bytes).

    Raises:
        InvalidMessageError: naming the offset, on bad length, magic, codec or
            CRC, or an undecompressable / nested compressed set.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    unpack = HEADER_MA.unpack_from
    crc32 = zlib.crc32
    seed = CRC_SEED_MA
    make = tuple.__new__  # MessageAndOffset without the Python-level __new__ call
    cls = MessageAndOffset
    pos = 0
    limit = end - HEADER_SIZE
    while pos <= limit:
        length, ma, crc = unpack(mv, pos)
        nxt = pos + LENGTH_SIZE + length
        if nxt > end and length >= OVERHEAD:
            return  # cut off by the fetch size: the client retries from this offset
        if not (OVERHEAD <= length and MA_MIN <= ma <= MA_MAX):
            raise InvalidMessageError(str(_diagnose(mv, pos, end, 0, _UNLIMITED, base_offset).error))
        payload = mv[pos + HEADER_SIZE:nxt]
        if crc32(payload, seed[ma]) != crc:
            raise InvalidMessageError(f"message at offset {base_offset + pos}: CRC mismatch (stored 0x{crc:08x})")
        if ma == MA_MIN:
            yield make(cls, (base_offset + pos, base_offset + nxt, payload.tobytes()))
        else:
            yield from _iter_wrapper(ma - MA_MIN, payload, base_offset + pos, base_offset + nxt)
        pos = nxt
    if end - pos >= LENGTH_SIZE and LENGTH.unpack_from(mv, pos)[0] < OVERHEAD:
        raise InvalidMessageError(f"message at offset {base_offset + pos}: length below the minimum {OVERHEAD}")


def _iter_wrapper(codec: int, payload: memoryview, offset: int, next_offset: int) -> Iterator[MessageAndOffset]:
    try:
        inner = compression.decompress(codec, payload)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"compressed message at offset {offset}: {exc}") from exc
    r = scan(inner)
    if r.error:
        raise InvalidMessageError(f"compressed message at offset {offset}: inner set: {r.error}")
    mv = memoryview(inner)
    pos = 0
    while pos < len(inner):
        length, _magic, attributes, _crc = HEADER.unpack_from(inner, pos)
        if attributes:
            raise InvalidMessageError(f"compressed message at offset {offset}: nested compression is not allowed")
        nxt = pos + LENGTH_SIZE + length
        yield MessageAndOffset(offset, next_offset, mv[pos + HEADER_SIZE:nxt].tobytes())
        pos = nxt
