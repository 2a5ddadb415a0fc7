"""Records of a v2 batch, read: every record's offset, timestamp, key, value and headers.

For the loader, consumers and tools. Keys, values and header values are
memoryviews into the batch (or into its inflated records, for a compressed
batch): nothing is copied per record; ``bytes(record.value)`` copies one out.
Every length is checked against the bytes it claims (Kafka's
``DefaultRecord.readFrom``): a record that is cut off, a length that runs past
its record, a malformed varint, a negative header count or bytes left over
after the last record raise :class:`~ingest.errors.InvalidRecordError` naming
the record.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

from ingest.errors import InvalidRecordError
from ingest.records.batch import LOG_APPEND_TIME, RECORDS_OFFSET, BatchHeader, read_header
from ingest.records.compression import NONE, decompress
from ingest.records.varint import read_varint, read_varlong

DEFAULT_INFLATE_LIMIT = 100 * 1024 * 1024
"""What a compressed batch may inflate to when the caller names no limit (the broker's
``socket.request.max.bytes`` default)."""


class Record(NamedTuple):
    """One record of a batch, its offset and timestamp resolved against the batch header."""

    offset: int
    timestamp: int
    key: memoryview | None
    value: memoryview | None
    headers: tuple[tuple[str, memoryview | None], ...]


def records_body(buf, pos: int, header: BatchHeader, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT):
    """The records' bytes of the batch at ``pos``: a memoryview of ``buf``, or the inflated bytes."""
    body = memoryview(buf)[pos + RECORDS_OFFSET:pos + header.size]
    if header.codec == NONE:
        return body
    return memoryview(decompress(header.codec, body, limit=inflate_limit))


def iter_records(buf, pos: int = 0, *, inflate_limit: int = DEFAULT_INFLATE_LIMIT) -> Iterator[Record]:
    """Every record of the batch at ``pos`` of ``buf``, in order.

    Raises:
        InvalidRecordError: a record's structure lies (see the module docstring).
        CorruptRecordError / RecordTooLargeError: the records do not inflate (within ``inflate_limit``).
    """
    h = read_header(buf, pos)
    if h.records_count <= 0:
        return
    body = records_body(buf, pos, h, inflate_limit=inflate_limit)
    base_offset, base_ts = h.base_offset, h.base_timestamp
    append_time = h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else None
    end = len(body)
    p = 0
    i = 0
    new = tuple.__new__  # Record(...) through its Python-level __new__ costs ~150 ns more per record
    try:
        for i in range(h.records_count):
            # length (varint): one or two bytes for records under 8 KB
            b = body[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif body[p + 1] < 0x80:
                v = (b & 0x7F) | (body[p + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                p += 2
            else:
                length, p = read_varint(body, p)
            stop = p + length
            if length < 6 or stop > end:
                raise InvalidRecordError(f"record {i} claims {length} bytes; {end - p} are left in the batch")
            # attributes (no bits defined), then the timestamp delta (varlong)
            b = body[p + 1]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                ts_delta, p = read_varlong(body, p + 1)
            b = body[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = read_varint(body, p)
            b = body[p]
            if b == 1:
                key = None
                p += 1
            else:
                key, p = _nullable(body, p, stop, "key")
            b = body[p]
            if b < 0x80 and not b & 1:
                q = p + 1 + (b >> 1)
                value = body[p + 1:q]
                p = q
            elif b >= 0x80 and body[p + 1] < 0x80 and not b & 1:
                q = p + 2 + (((b & 0x7F) | (body[p + 1] << 7)) >> 1)
                value = body[p + 2:q]
                p = q
            else:
                value, p = _nullable(body, p, stop, "value")
            if body[p] == 0:
                headers = ()
                p += 1
            else:
                headers, p = _headers(body, p, stop, i)
            if p != stop:
                raise InvalidRecordError(f"record {i} claims {length} bytes but its fields take "
                                         f"{p - stop + length}")
            yield new(Record, (base_offset + offset_delta,
                               append_time if append_time is not None else base_ts + ts_delta, key, value, headers))
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"batch at offset {base_offset}: record {i}: {exc}") from None
    except IndexError:
        raise InvalidRecordError(f"batch at offset {base_offset}: record {i} is cut off at the end of the "
                                 "records") from None
    if p != end:
        raise InvalidRecordError(f"batch at offset {base_offset}: {end - p} bytes are left after its "
                                 f"{h.records_count} records")


def _headers(body: memoryview, p: int, stop: int, i: int):
    n, p = read_varint(body, p)
    if n < 0 or n > stop - p:
        raise InvalidRecordError(f"record {i} has {n} headers in {stop - p} bytes")
    out = []
    for _ in range(n):
        klen, p = read_varint(body, p)
        if klen < 0 or p + klen > stop:
            raise InvalidRecordError(f"a header key of record {i} claims {klen} bytes")
        try:
            hkey = str(body[p:p + klen], "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRecordError(f"record {i} has a header key that is not UTF-8 ({exc.reason})") from None
        p += klen
        hval, p = _nullable(body, p, stop, "header value")
        out.append((hkey, hval))
    return tuple(out), p


def _nullable(body: memoryview, p: int, stop: int, what: str) -> tuple[memoryview | None, int]:
    n, p = read_varint(body, p)
    if n < 0:
        if n != -1:
            raise InvalidRecordError(f"{what} length {n} is negative and not -1 (null)")
        return None, p
    if p + n > stop:
        raise InvalidRecordError(f"{what} claims {n} bytes; {stop - p} are left in its record")
    return body[p:p + n], p + n
