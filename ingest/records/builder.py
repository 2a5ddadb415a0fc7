"""Building record batches v2: what a producer writes, and what conversion and tests need.

:func:`build_batch` lays records out as Kafka's ``MemoryRecordsBuilder`` does:
offset deltas 0..n-1, timestamp deltas against the first record's timestamp,
``max_timestamp`` the largest record timestamp (or the log append time), the
whole records section compressed as one payload when a codec is named, and the
CRC-32C computed last. No clock is read: a record without a timestamp gets
``now_ms`` when given, else NO_TIMESTAMP (-1), as Kafka's ``SimpleRecord``.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from ingest.records.batch import (CONTROL_MASK, CRC, CRC_OFFSET, CREATE_TIME, HEADER, LOG_APPEND_TIME,
                                  LOG_OVERHEAD, MAGIC, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH,
                                  NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, RECORDS_OFFSET, TIMESTAMP_TYPE_MASK,
                                  TRANSACTIONAL_MASK, compute_crc)
from ingest.records.compression import NONE, compress
from ingest.records.varint import encode_varint, size_of_varint


class SimpleRecord(NamedTuple):
    """What a producer hands over for one record (Kafka's ``SimpleRecord``)."""

    value: bytes | memoryview | None
    key: bytes | memoryview | None = None
    headers: Sequence[tuple[str, bytes | memoryview | None]] = ()
    timestamp: int | None = None


_SMALL = 1 << 14
_VARINTS = [encode_varint(i) for i in range(_SMALL)]
"""The varints of 0 .. 16383, encoded once: offset deltas, timestamp deltas and lengths of ordinary
records take them from here instead of encoding each (half the cost of building a batch)."""


def _varint(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < _SMALL else encode_varint(value)


def _headers_bytes(headers: Sequence[tuple[str, bytes | memoryview | None]]) -> bytes:
    out = bytearray(_varint(len(headers)))
    for hkey, hval in headers:
        k = hkey.encode("utf-8")
        out += _varint(len(k))
        out += k
        if hval is None:
            out.append(1)  # varint -1
        else:
            out += _varint(len(hval))
            out += hval
    return bytes(out)


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, rec: SimpleRecord) -> None:
    """Append one record (length prefix included) to ``out``."""
    out += encode_records([rec], [timestamp_delta], offset_delta)


def encode_records(records: Sequence[SimpleRecord], timestamp_deltas: Sequence[int], first_offset_delta: int = 0
                   ) -> bytes:
    """The records section of a batch: record i with offset delta ``first_offset_delta + i`` and
    timestamp delta ``timestamp_deltas[i]``, each with its length prefix.

    One pass that collects byte pieces and joins them once; small varints come from a table. A
    record without key or headers (the common case) costs one concatenation of its fixed head.
    """
    pieces: list = []
    put = pieces.append
    table, small = _VARINTS, _SMALL
    i = first_offset_delta
    for (value, key, headers, _ts), d in zip(records, timestamp_deltas):
        head = b"\x00" + (table[d] if 0 <= d < small else encode_varint(d)) \
            + (table[i] if i < small else encode_varint(i))
        if key is None:
            head += b"\x01"  # varint -1
        else:
            head += _varint(len(key))
            head += key
        if value is None:
            head += b"\x01"
            size = 0
        else:
            size = len(value)
            head += table[size] if size < small else encode_varint(size)
        tail = _headers_bytes(headers) if headers else b"\x00"
        n = len(head) + size + len(tail)
        put((table[n] if n < small else encode_varint(n)) + head)
        if size:
            put(value)
        put(tail)
        i += 1
    return b"".join(pieces)


def build_batch(records: Iterable[SimpleRecord | bytes], *, codec: int = NONE, base_offset: int = 0,
                timestamp_type: int = CREATE_TIME, now_ms: int | None = None,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                transactional: bool = False, control: bool = False) -> bytearray:
    """One record batch v2 holding ``records`` (bare bytes are values without key or headers).

    ``timestamp_type`` LOG_APPEND_TIME stamps the batch with ``now_ms`` (required then).

    Raises:
        ValueError: no records, or LOG_APPEND_TIME without ``now_ms``.
        UnsupportedCompressionError: ``codec`` is not one of Kafka's.
    """
    recs = [r if isinstance(r, SimpleRecord) else SimpleRecord(r) for r in records]
    if not recs:
        raise ValueError("a record batch holds at least one record")
    if timestamp_type == LOG_APPEND_TIME and now_ms is None:
        raise ValueError("a LOG_APPEND_TIME batch needs now_ms, the log append time")
    default_ts = NO_TIMESTAMP if now_ms is None else now_ms
    stamps = [default_ts if r.timestamp is None else r.timestamp for r in recs]
    base_ts = stamps[0]
    max_ts = now_ms if timestamp_type == LOG_APPEND_TIME else max(stamps)
    body = encode_records(recs, [ts - base_ts for ts in stamps])
    if codec != NONE:
        body = compress(codec, body)
    attributes = codec | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0) \
        | (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    out = bytearray(RECORDS_OFFSET)
    out += body
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, attributes,
                     len(recs) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(recs))
    CRC.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return out


def record_size(rec: SimpleRecord, offset_delta: int = 0, timestamp_delta: int = 0) -> int:
    """Bytes :func:`encode_record` writes for ``rec`` (length prefix included)."""
    n = 1 + size_of_varint(timestamp_delta) + size_of_varint(offset_delta)
    for field in (rec.key, rec.value):
        n += 1 if field is None else size_of_varint(len(field)) + len(field)
    n += size_of_varint(len(rec.headers))
    for hkey, hval in rec.headers:
        k = len(hkey.encode("utf-8"))
        n += size_of_varint(k) + k + (1 if hval is None else size_of_varint(len(hval)) + len(hval))
    return size_of_varint(n) + n
