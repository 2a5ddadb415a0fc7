"""Message sets: the one loop that validates messages (:func:`scan`), bounded wrapper opening, encoding.

A message set is messages (see :mod:`ingest.records.message`) back to back,
nothing else. A compressed set is ONE wrapper message whose attributes name
the codec and whose payload is the compressed bytes of a plain message set;
nested compression is invalid.

:func:`scan` is the one loop that walks a buffer of messages and validates
each (size, magic, codec, CRC, and with ``deep`` the set inside a wrapper,
through :func:`inner_messages`). Append validation and reading
(:class:`ingest.records.message_batch.MessageBatch`), recovery, the index
builder, the read-time checks and ``ingest log dump`` all call it; they walk
only what it has validated. It keeps no per-message Python objects: one
``struct.unpack_from`` and one CRC-32 (:mod:`ingest.records.crc`: ISA-L's,
zlib's values) over a memoryview slice per message. (The batch's fast paths
for plain magic-2 sets record boundaries as they validate and hand anything
else to this loop; tests/broker/test_message_batch.py and
tests/broker/test_produce_fast_paths.py hold them equal to it.)

A wrapper is opened with bounds (:func:`inner_messages`): every inner message
is held to the same ``max_message_size`` as an outer one, and the inner set to
``max_inflated_size`` bytes in total (:data:`MAX_INFLATED_SIZE` by default).
Decompression streams (:func:`ingest.records.message_codecs.inflate`) and is
checked as it goes, so it stops at the first inner message above the limit,
after at most one chunk of it; validation alone (the broker's) keeps only the
message being checked, never the whole inner set.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from ingest.errors import InvalidMessageError, MessageTooLargeError
from ingest.records import message_codecs
from ingest.records.crc import crc32 as fast_crc32
from ingest.records.message import (
    CODEC_NONE,
    CRC_SEED_MA,
    CRC_SEED_MA1,
    HEADER_MA,
    HEADER_SIZE,
    LENGTH,
    LENGTH_SIZE,
    MA1_MAX,
    MA1_MIN,
    MA_MAX,
    MA_MIN,
    MAGIC,
    MAGIC_V0,
    OVERHEAD,
    encode_message,
    encode_messages,
    other_magic,
    why_invalid,
)
from ingest.records.message_codecs import MAX_INFLATED_SIZE

UNLIMITED = 1 << 62
"""The default ``max_message_size``: no bound."""
_UNLIMITED = UNLIMITED


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
    allow_compressed: bool = True,
    max_inflated_size: int = MAX_INFLATED_SIZE,
    wrappers: list[int] | None = None,
    short: list[int] | None = None,
) -> ScanResult:
    """Validate messages in ``buf[pos:end]`` until the end or the first bad one.

    Checks per message, by its magic (:mod:`ingest.records.message`): length
    at least the magic's overhead (5 for magic 0, else 6), message fits in the
    buffer, magic 0, 1 or 2, known codec with other attribute bits 0, the
    magic's CRC rule (magic 0/1: payload, or for magic 1 the legacy
    attributes + payload; magic 2: attributes + payload), payload <=
    ``max_message_size``; with ``deep``, a compressed wrapper's
    inner set is decompressed and validated too, each inner message against
    ``max_message_size`` and the inner set against ``max_inflated_size``
    (either bound crossed: ``too_large``).

    Args:
        index: when given, ``index_base + p`` is appended for the first message
            at or after ``index_mark`` and then every ``index_interval`` bytes
            (the sparse position index of a segment; interval 0: every message).
        origin: added to positions in error texts (file position of ``buf``).
        allow_compressed: False for the set inside a wrapper (nested
            compression is invalid).
        wrappers: when given, the position of every compressed wrapper is
            appended (readers skip a per-message codec check when it stays empty).
        short: when given, the position of every magic-0 message (9-byte
            header) is appended (readers skip a per-message magic check when
            it stays empty).

    Returns:
        ScanResult; never raises for bad data.
    """
    if end is None:
        end = len(buf)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    # Hot loop (magic 2): magic and attributes are read as one uint16 (0x0200 | codec),
    # so one chained comparison checks magic, codec and the reserved bits. Magic 1 is
    # the second branch, the same way (0x0100 | codec). Anything else (magic 0, or a
    # bad message) goes to message.other_magic(), which validates magic 0 and hands
    # back -1; when it refuses, message.why_invalid() finds the precise reason.
    unpack = HEADER_MA.unpack_from
    crc32 = fast_crc32
    seed = CRC_SEED_MA
    seed1 = CRC_SEED_MA1
    top = max_message_size + OVERHEAD
    count = 0
    mark = index_mark
    add = index.append if index is not None else None
    limit = end - HEADER_SIZE
    while pos <= limit:
        length, ma, crc = unpack(mv, pos)
        nxt = pos + LENGTH_SIZE + length
        if OVERHEAD <= length <= top and nxt <= end and MA_MIN <= ma <= MA_MAX:
            if crc32(mv[pos + HEADER_SIZE:nxt], seed[ma]) != crc:
                break
        elif OVERHEAD <= length <= top and nxt <= end and MA1_MIN <= ma <= MA1_MAX:
            # magic 1: Kafka 0.7's rule (payload), else the legacy rule (attributes + payload)
            payload = mv[pos + HEADER_SIZE:nxt]
            if crc32(payload) != crc and crc32(payload, seed1[ma]) != crc:
                break
            ma += MA_MIN - MA1_MIN  # its codec, as a magic-2 value
        else:
            other = other_magic(mv, pos, end, max_message_size)
            if other is None:
                break
            nxt, ma = other
            if short is not None and ma < 0:
                short.append(pos)
        if ma > MA_MIN:
            if wrappers is not None:
                wrappers.append(pos)
            if not allow_compressed:
                return ScanResult(pos, count, f"message at {origin + pos}: nested compression is not allowed", False)
            if deep:
                why, too_large = _inner_error(ma - MA_MIN, mv[pos + HEADER_SIZE:nxt],
                                              max_message_size, max_inflated_size)
                if why:
                    return ScanResult(pos, count, f"compressed message at {origin + pos}: {why}", False, too_large)
        if add is not None and pos >= mark:
            add(index_base + pos)
            mark = pos + index_interval
        pos = nxt
        count += 1
    if limit < pos < end and (other := other_magic(mv, pos, end, max_message_size)) is not None:
        # the last 9 bytes: only an empty magic-0 message fits (never a wrapper)
        if short is not None:
            short.append(pos)
        if add is not None and pos >= mark:
            add(index_base + pos)
        pos = other[0]
        count += 1
    if pos >= end:
        return ScanResult(pos, count, None, False)
    return _diagnose(mv, pos, end, count, max_message_size, origin)


def _diagnose(mv: memoryview, pos: int, end: int, count: int, max_message_size: int, origin: int) -> ScanResult:
    """The precise reason the message at ``pos`` stopped :func:`scan`."""
    error, cut_off, too_large = why_invalid(mv, pos, end, max_message_size, origin)
    return ScanResult(pos, count, error, cut_off, too_large)


def inner_messages(codec: int, payload: bytes | memoryview, *, max_message_size: int = _UNLIMITED,
                   max_inflated_size: int = MAX_INFLATED_SIZE) -> tuple[bytearray, list[int]]:
    """Decompress a wrapper's payload and validate the plain set inside it, within bounds.

    Returns:
        (the inner set, the position of each of its messages).

    Raises:
        MessageTooLargeError: an inner message's payload exceeds
            ``max_message_size``, or the inner set exceeds ``max_inflated_size``
            bytes; decompression stops there.
        InvalidMessageError: the payload does not decompress, or the inner set
            has a bad, cut-off or compressed message (the text does not name
            the wrapper's offset; callers add it).
    """
    positions: list[int] = []
    inner = _inflate_and_scan(codec, payload, max_message_size, max_inflated_size, positions)
    return inner, positions


def _inflate_and_scan(codec: int, payload: bytes | memoryview, max_message_size: int,
                      max_inflated_size: int, positions: list[int] | None) -> bytearray:
    """Inflate chunk by chunk, validating each inner message as soon as it is whole.

    A message's length is checked against ``max_message_size`` as soon as its
    header arrives (scan's diagnosis puts "too large" before "cut off"), so a
    bomb of one huge message stops after its first chunk. Without
    ``positions`` the validated bytes are dropped as it goes: memory is one
    message plus one chunk.
    """
    buf = bytearray()
    base = 0  # bytes of the inner set dropped from the front of buf
    pos = 0   # start of the first message of buf not yet validated
    keep = positions is not None
    chunks = None
    while True:
        try:
            if chunks is None:
                chunks = message_codecs.inflate(codec, payload, limit=max_inflated_size)
            chunk = next(chunks, None)
        except MessageTooLargeError as exc:  # the inflated total crossed max_inflated_size
            raise MessageTooLargeError(
                f"inner set: {exc} (the bound on a compressed set's inflated size: "
                f"max.socket.request.bytes on a broker)") from exc
        if chunk is None:
            break
        if not buf and isinstance(chunk, bytearray):
            buf = chunk  # snappy's one chunk: no copy
        else:
            buf += chunk
        del chunk
        r = scan(buf, pos, max_message_size=max_message_size, allow_compressed=False,
                 index=positions, index_base=base, index_interval=0, origin=base)
        if r.error is not None and not r.cut_off:
            _raise_inner(r)
        pos = r.end
        if not keep and pos:
            del buf[:pos]
            base += pos
            pos = 0
    r = scan(buf, pos, max_message_size=max_message_size, allow_compressed=False, origin=base)
    if r.error is not None:  # the last inner message is cut off
        _raise_inner(r)
    return buf


def _raise_inner(r: ScanResult) -> None:
    kind = MessageTooLargeError if r.too_large else InvalidMessageError
    raise kind("inner set: " + r.error)


def _inner_error(codec: int, payload: memoryview, max_message_size: int,
                 max_inflated_size: int) -> tuple[str | None, bool]:
    """(why the wrapper's inner set is refused, whether for size), or (None, False)."""
    try:
        _inflate_and_scan(codec, payload, max_message_size, max_inflated_size, None)
    except MessageTooLargeError as exc:
        return str(exc), True
    except InvalidMessageError as exc:
        return str(exc), False
    return None, False


def first_message_size(buf: bytes | memoryview) -> int | None:
    """4 + length of the first message, if its length field is readable."""
    if len(buf) < LENGTH_SIZE:
        return None
    return LENGTH_SIZE + LENGTH.unpack_from(buf, 0)[0]


def encode_message_set(payloads: Sequence[bytes], codec: int = CODEC_NONE, magic: int = MAGIC) -> bytes:
    """Encode payloads as a set of messages of ``magic``; with a codec, as one compressed
    wrapper message of ``magic`` holding messages of ``magic`` (what Kafka 0.7's producer
    does with magic 1).

    Raises:
        InvalidMessageError: unknown magic or codec, or a codec with magic 0.
    """
    if codec != CODEC_NONE and magic == MAGIC_V0:
        encode_message(b"", codec, magic)  # raises: magic 0 has no attributes
    plain = encode_messages(payloads, magic)  # one pass, no Python bytecode per message
    if codec == CODEC_NONE:
        return plain
    return encode_message(message_codecs.compress(codec, plain), codec, magic)


def valid_prefix(buf: bytes | memoryview) -> int:
    """Bytes of whole valid messages at the start of ``buf``."""
    return scan(buf).end


def message_bounds(buf: bytes | memoryview, pos: int = 0, *, origin: int = 0) -> tuple[list[tuple[int, int]], ScanResult]:
    """(start, end) of each valid message of ``buf`` from ``pos``, and how :func:`scan` stopped.

    Wrappers are CRC-checked but not opened (see :func:`inner_messages`).
    """
    starts: list[int] = []
    r = scan(buf, pos, index=starts, index_interval=0, origin=origin)
    return list(zip(starts, starts[1:] + [r.end])), r
