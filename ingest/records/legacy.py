"""Kafka's legacy message sets (magic 0 and 1, Kafka 0.8-0.10): decode, validate, encode.

Field grammar (big-endian; Kafka's ``LegacyRecord`` and ``AbstractLegacyRecordBatch``)::

    MessageSet => (offset:int64 size:int32 Message)*
    Message    => crc:uint32 magic:int8 attributes:int8 [timestamp:int64 (magic 1)]
                  key_length:int32 key value_length:int32 value      (a length of -1 is null)

``size`` counts the message (crc .. value); the CRC-32 (IEEE) covers magic ..
value. Attributes: bits 0-2 compression (gzip 1, snappy 2, lz4 3; zstd never
exists below magic 2), bit 3 (magic 1) timestamp type. A compressed message is
a *wrapper*: its value is a whole message set, compressed, of the same magic,
never compressed again. Wrapper offsets: the wrapper carries the offset of its
last inner message; inner offsets are absolute for magic 0 and relative
(0 .. n-1) for magic 1, so the absolute offset of an inner message is
``wrapper offset - last inner offset + inner offset``. A magic 1 wrapper with
LOG_APPEND_TIME gives every inner message the wrapper's timestamp. Magic 0
messages have no timestamp: they read as NO_TIMESTAMP (-1).

These formats are not stored: produced message sets are converted to record
batch v2 (:mod:`ingest.records.convert`) and old fetch versions get v2 batches
converted down.
"""
from __future__ import annotations

import struct
from typing import Iterator, NamedTuple, Sequence

from ingest.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from ingest.records.compression import NONE, check_codec, codec_name, compress, decompress
from ingest.records.crc import crc32

MAGIC_V0, MAGIC_V1 = 0, 1
ENTRY = struct.Struct(">qi")                 # offset, size
LOG_OVERHEAD = ENTRY.size                    # 12
HEADER_V0 = struct.Struct(">qiIbb")          # offset, size, crc, magic, attributes
HEADER_V1 = struct.Struct(">qiIbbq")         # ... timestamp
CRC_OFFSET = LOG_OVERHEAD
MAGIC_OFFSET = LOG_OVERHEAD + 4
LENGTH = struct.Struct(">i")
RECORD_OVERHEAD = {MAGIC_V0: 14, MAGIC_V1: 22}  # crc magic attributes [timestamp] key_length value_length
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP = -1
CREATE_TIME, LOG_APPEND_TIME = 0, 1


class LegacyEntry(NamedTuple):
    """One message of a set as written (a wrapper's value is still compressed)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: memoryview | None
    value: memoryview | None
    size: int                                  # LOG_OVERHEAD + size field: bytes in the set

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.magic >= MAGIC_V1 and self.attributes & TIMESTAMP_TYPE_MASK else 0


class LegacyRecord(NamedTuple):
    """One application message, compression undone and its offset absolute."""

    offset: int
    timestamp: int
    key: memoryview | None
    value: memoryview | None
    magic: int
    timestamp_type: int


def read_entry(buf, pos: int, end: int | None = None) -> LegacyEntry:
    """The message at ``pos``, checked: size inside ``end``, magic 0 or 1, CRC-32, key and value lengths.

    Raises:
        CorruptRecordError: a size that does not fit, or a CRC mismatch.
        InvalidRecordError: an unknown magic, or key/value lengths that contradict the size.
    """
    if end is None:
        end = len(buf)
    if end - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"message at byte {pos} is cut off: {end - pos} bytes left, its offset and "
                                 f"size take {LOG_OVERHEAD}")
    offset, size = ENTRY.unpack_from(buf, pos)
    if size < RECORD_OVERHEAD[MAGIC_V0]:
        raise CorruptRecordError(f"message at offset {offset} has size {size}; the smallest message takes "
                                 f"{RECORD_OVERHEAD[MAGIC_V0]}")
    stop = pos + LOG_OVERHEAD + size
    if stop > end:
        raise CorruptRecordError(f"message at offset {offset} claims {size} bytes but only "
                                 f"{end - pos - LOG_OVERHEAD} are there")
    magic = buf[pos + MAGIC_OFFSET]
    if magic not in RECORD_OVERHEAD:
        raise InvalidRecordError(f"message at offset {offset} has magic {magic}; a message set holds magic 0 or 1")
    if size < RECORD_OVERHEAD[magic]:
        raise CorruptRecordError(f"magic {magic} message at offset {offset} has size {size}; it takes at least "
                                 f"{RECORD_OVERHEAD[magic]}")
    stored = struct.unpack_from(">I", buf, pos + CRC_OFFSET)[0]
    computed = crc32(memoryview(buf)[pos + MAGIC_OFFSET:stop])
    if stored != computed:
        raise CorruptRecordError(f"message at offset {offset} is corrupt: stored CRC-32 {stored:#010x}, "
                                 f"computed {computed:#010x}")
    attributes = buf[pos + MAGIC_OFFSET + 1]
    p = pos + MAGIC_OFFSET + 2
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        timestamp = struct.unpack_from(">q", buf, p)[0]
        p += 8
    key, p = _bytes(buf, p, stop, offset, "key")
    value, p = _bytes(buf, p, stop, offset, "value")
    if p != stop:
        raise InvalidRecordError(f"message at offset {offset}: key and value take {p - pos} bytes of its "
                                 f"{stop - pos}")
    return LegacyEntry(offset, magic, attributes, timestamp, key, value, stop - pos)


def _bytes(buf, p: int, stop: int, offset: int, what: str) -> tuple[memoryview | None, int]:
    if p + 4 > stop:
        raise InvalidRecordError(f"message at offset {offset}: its {what} length is cut off")
    (n,) = LENGTH.unpack_from(buf, p)
    p += 4
    if n == -1:
        return None, p
    if n < 0 or p + n > stop:
        raise InvalidRecordError(f"message at offset {offset}: {what} length {n} does not fit its message")
    return memoryview(buf)[p:p + n], p + n


def iter_entries(buf, pos: int = 0, end: int | None = None) -> Iterator[LegacyEntry]:
    """Every message of ``buf[pos:end]``, which they must fill exactly (see :func:`read_entry`)."""
    if end is None:
        end = len(buf)
    while pos < end:
        e = read_entry(buf, pos, end)
        yield e
        pos += e.size


def iter_legacy_records(buf, *, inflate_limit: int, pos: int = 0, end: int | None = None) -> Iterator[LegacyRecord]:
    """Every application message of the set ``buf[pos:end]``, wrappers opened (bounded by
    ``inflate_limit`` bytes each), with absolute offsets and resolved timestamps.

    Raises:
        CorruptRecordError / InvalidRecordError: see :func:`read_entry`; also an inner message whose
            magic differs from its wrapper's, or a wrapper inside a wrapper.
        RecordTooLargeError: a wrapper inflates to more than ``inflate_limit``.
        UnsupportedCompressionError: a codec that does not exist for magic 0/1.
    """
    for e in iter_entries(buf, pos, end):
        if e.codec == NONE:
            yield LegacyRecord(e.offset, e.timestamp, e.key, e.value, e.magic, e.timestamp_type)
            continue
        yield from _open_wrapper(e, inflate_limit)


def _open_wrapper(w: LegacyEntry, inflate_limit: int) -> Iterator[LegacyRecord]:
    check_codec(w.codec, w.magic)
    if w.value is None:
        raise InvalidRecordError(f"compressed message at offset {w.offset} has a null value")
    inner_set = decompress(w.codec, w.value, limit=inflate_limit, magic=w.magic)
    inner = list(iter_entries(inner_set))
    if not inner:
        raise InvalidRecordError(f"compressed message at offset {w.offset} holds no messages")
    for e in inner:
        if e.magic != w.magic:
            raise InvalidRecordError(f"compressed message at offset {w.offset} (magic {w.magic}) holds a magic "
                                     f"{e.magic} message")
        if e.codec != NONE:
            raise InvalidRecordError(f"compressed message at offset {w.offset} holds a compressed message "
                                     f"({codec_name(e.codec)}); one level of compression only")
    shift = w.offset - inner[-1].offset if w.magic == MAGIC_V1 else 0
    append_time = w.timestamp_type == LOG_APPEND_TIME
    for e in inner:
        yield LegacyRecord(e.offset + shift, w.timestamp if append_time else e.timestamp, e.key, e.value,
                           e.magic, w.timestamp_type)


def validate_legacy_produced(buf, *, max_message_size: int, inflate_limit: int) -> list[LegacyRecord]:
    """A producer's magic 0/1 message set (Produce v0-v2), validated whole; its application messages.

    One magic throughout; every message at most ``max_message_size`` bytes (wrappers included);
    every CRC, inner CRC and length checked.

    Raises:
        see :func:`iter_legacy_records`; RecordTooLargeError for a message above ``max_message_size``;
        InvalidRecordError for mixed magics or an empty set.
    """
    magic = None
    out: list[LegacyRecord] = []
    for e in iter_entries(buf):
        if e.size > max_message_size:
            raise RecordTooLargeError(f"message at offset {e.offset} is {e.size} bytes, more than "
                                      f"max.message.bytes {max_message_size}")
        if magic is None:
            magic = e.magic
        elif e.magic != magic:
            raise InvalidRecordError(f"message set mixes magic {magic} and {e.magic}")
        if e.codec == NONE:
            out.append(LegacyRecord(e.offset, e.timestamp, e.key, e.value, e.magic, e.timestamp_type))
        else:
            out.extend(_open_wrapper(e, inflate_limit))
    if not out:
        raise InvalidRecordError("the message set holds no message")
    return out


def encode_message(out: bytearray, offset: int, magic: int, key, value, *, timestamp: int = NO_TIMESTAMP,
                   attributes: int = 0) -> None:
    """Append one message (offset and size included) to ``out``."""
    start = len(out)
    head = HEADER_V1 if magic == MAGIC_V1 else HEADER_V0
    out += bytes(head.size)
    for field in (key, value):
        if field is None:
            out += LENGTH.pack(-1)
        else:
            out += LENGTH.pack(len(field))
            out += field
    size = len(out) - start - LOG_OVERHEAD
    if magic == MAGIC_V1:
        HEADER_V1.pack_into(out, start, offset, size, 0, magic, attributes, timestamp)
    else:
        HEADER_V0.pack_into(out, start, offset, size, 0, magic, attributes)
    struct.pack_into(">I", out, start + CRC_OFFSET, crc32(memoryview(out)[start + MAGIC_OFFSET:]))


def encode_message_set(records: Sequence[tuple[int, int, object, object]], magic: int, codec: int = NONE, *,
                       timestamp_type: int = CREATE_TIME, wrapper_timestamp: int | None = None) -> bytearray:
    """A magic 0/1 message set of ``records`` ``(offset, timestamp, key, value)``, absolute offsets.

    With a codec: ONE wrapper holding them, as Kafka writes it (inner offsets relative for
    magic 1, absolute for magic 0; the wrapper carries the last offset and, for magic 1, the
    largest timestamp or ``wrapper_timestamp`` with LOG_APPEND_TIME).
    """
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"a legacy message set has magic 0 or 1, not {magic}")
    out = bytearray()
    ts_bit = TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and timestamp_type == LOG_APPEND_TIME else 0
    if codec == NONE:
        for offset, ts, key, value in records:
            encode_message(out, offset, magic, key, value, timestamp=ts, attributes=ts_bit)
        return out
    check_codec(codec, magic)
    if not records:
        return out
    first = records[0][0]
    inner = bytearray()
    for offset, ts, key, value in records:
        encode_message(inner, offset - first if magic == MAGIC_V1 else offset, magic, key, value, timestamp=ts)
    if wrapper_timestamp is None:
        wrapper_timestamp = max(r[1] for r in records)
    encode_message(out, records[-1][0], magic, None, compress(codec, inner, magic=magic),
                   timestamp=wrapper_timestamp, attributes=codec | ts_bit)
    return out
