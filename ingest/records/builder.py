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
from ingest.records.varint import size_of_varint, write_varint


class SimpleRecord(NamedTuple):
    """What a producer hands over for one record (Kafka's ``SimpleRecord``)."""

    value: bytes | memoryview | None
    key: bytes | memoryview | None = None
    headers: Sequence[tuple[str, bytes | memoryview | None]] = ()
    timestamp: int | None = None


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, rec: SimpleRecord) -> None:
    """Append one record (length prefix included) to ``out``."""
    body = bytearray(b"\x00")  # attributes
    write_varint(timestamp_delta, body)
    write_varint(offset_delta, body)
    for field in (rec.key, rec.value):
        if field is None:
            body.append(1)  # varint -1
        else:
            write_varint(len(field), body)
            body += field
    write_varint(len(rec.headers), body)
    for hkey, hval in rec.headers:
        k = hkey.encode("utf-8")
        write_varint(len(k), body)
        body += k
        if hval is None:
            body.append(1)
        else:
            write_varint(len(hval), body)
            body += hval
    write_varint(len(body), out)
    out += body


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
    body = bytearray()
    for i, (r, ts) in enumerate(zip(recs, stamps)):
        encode_record(body, i, ts - base_ts, r)
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
