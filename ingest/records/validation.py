"""Validation of record batches v2 for append: framing and CRC-32C of every batch, a producer's rules,
and a walk of the record lengths that refuses a batch whose counts or lengths lie.

Three levels, each a superset of the one before:

- :func:`check_batch`: one batch's framing (``batch_length`` at least 49 and
  inside the buffer, magic 2) and its CRC-32C (one call over the whole batch).
  What recovery, reads of unverified segments and replica appends need.
- :func:`check_batches`: every batch of a buffer of back-to-back batches (a
  follower's or mirror's append, a fetch response), offsets increasing.
- :func:`validate_produced`: what a leader checks in a producer's batch before
  assigning it offsets (Kafka's ``UnifiedLog.analyzeAndValidateRecords`` and
  ``LogValidator.validateBatch`` for ``AppendOrigin.CLIENT``): exactly one
  batch filling the request's record set, base offset 0, a record count > 0
  that matches ``last_offset_delta + 1``, no control batch, a base sequence
  with every producer id, a Kafka codec, CREATE_TIME timestamps within the
  configured bounds, at most ``max.message.bytes``; and then the records
  themselves (:func:`walk_records`), inflated first for a compressed batch
  (bounded, so a decompression bomb is refused).

The walk (:func:`walk_records`) reads each record's length varint and jumps
over the rest: the records must be exactly ``records_count`` long, fill the
batch to its last byte, and be at least 6 bytes each. Keys, values, headers
and offset deltas are not parsed for an uncompressed batch, as Kafka does not
check the inner offsets of an uncompressed v2 batch either (the CRC covers
them, and :mod:`ingest.records.record` checks every field when records are
read). A compressed batch is inflated anyway, so its records' offset deltas are
checked too (:func:`check_offset_deltas`): Kafka rewrites such a batch with
correct offsets, this broker refuses it (INVALID_RECORD). Measured: see
docs/performance.md, "Kafka record batches".

Errors (Kafka codes in :data:`ingest.wire.errors.KAFKA`): CorruptRecordError
(CORRUPT_MESSAGE: CRC, sizes), InvalidRecordError (INVALID_RECORD: counts,
offsets, lengths, varints, control batches), InvalidTimestampError
(INVALID_TIMESTAMP), UnsupportedCompressionError (UNSUPPORTED_COMPRESSION_TYPE),
RecordTooLargeError (MESSAGE_TOO_LARGE: the batch, or what it inflates to).
Each names the bad value and what is allowed.
"""
from __future__ import annotations

from typing import NamedTuple

from ingest.errors import (CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError)
from ingest.records.batch import (CRC, CRC_OFFSET, LENGTH, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC, MAGIC_OFFSET,
                                  MIN_LENGTH, NO_TIMESTAMP, RECORDS_OFFSET, BatchHeader, batch_size_at, compute_crc,
                                  read_header)
from ingest.records.compression import NONE, check_codec, codec_name, decompress
from ingest.records.varint import read_uvarint, read_varint, read_varlong

MIN_RECORD_BODY = 6
"""attributes, timestamp delta, offset delta, key length, value length, header count: one byte each at least."""
UNBOUNDED = 1 << 62


class BatchInfo(NamedTuple):
    """What validation learnt of a produced batch: its header and its size on disk."""

    header: BatchHeader
    size: int


def check_batch(buf, pos: int = 0, end: int | None = None) -> BatchHeader:
    """Framing and CRC-32C of the batch at ``pos`` (which must end by ``end``, default the buffer's end).

    Raises:
        CorruptRecordError: fewer than 61 bytes, ``batch_length`` below 49 or past ``end``, or a CRC mismatch.
        InvalidRecordError: the magic is not 2.
    """
    if end is None:
        end = len(buf)
    if end - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch at byte {pos} is cut off: {end - pos} bytes, its size field "
                                 f"needs {LOG_OVERHEAD}")
    length = LENGTH.unpack_from(buf, pos + LENGTH_OFFSET)[0]
    if length < MIN_LENGTH:
        raise CorruptRecordError(f"record batch at byte {pos} has batch_length {length}; the smallest batch "
                                 f"has {MIN_LENGTH}")
    size = LOG_OVERHEAD + length
    if pos + size > end:
        raise CorruptRecordError(f"record batch at byte {pos} claims {size} bytes but only {end - pos} are there")
    magic = buf[pos + MAGIC_OFFSET]
    if magic != MAGIC:
        raise InvalidRecordError(f"record batch at byte {pos} has magic {magic}; only record batch v2 "
                                 f"(magic {MAGIC}) is stored")
    stored = CRC.unpack_from(buf, pos + CRC_OFFSET)[0]
    computed = compute_crc(buf, pos, size)
    if stored != computed:
        raise CorruptRecordError(f"record batch at byte {pos} is corrupt: stored CRC-32C {stored:#010x}, "
                                 f"computed {computed:#010x}")
    return read_header(buf, pos)


def check_batches(buf, pos: int = 0, end: int | None = None) -> list[BatchHeader]:
    """:func:`check_batch` for every batch of ``buf[pos:end]``, which they must fill exactly, with
    offsets increasing (each base offset at or after the previous batch's next offset).

    Raises:
        CorruptRecordError / InvalidRecordError: as check_batch, naming the bad batch;
        InvalidRecordError also for offsets that do not increase or a record count that
        contradicts ``last_offset_delta``.
    """
    if end is None:
        end = len(buf)
    out: list[BatchHeader] = []
    nxt = None
    while pos < end:
        h = check_batch(buf, pos, end)
        if h.last_offset_delta < 0 or (h.records_count and h.records_count > h.last_offset_delta + 1):
            raise InvalidRecordError(f"record batch at offset {h.base_offset} has last_offset_delta "
                                     f"{h.last_offset_delta} and {h.records_count} records")
        if nxt is not None and h.base_offset < nxt:
            raise InvalidRecordError(f"record batch at byte {pos} starts at offset {h.base_offset}, before the "
                                     f"previous batch's next offset {nxt}: offsets must increase")
        nxt = h.next_offset
        out.append(h)
        pos += h.size
    return out


def validate_produced(buf, *, max_batch_size: int = UNBOUNDED, inflate_limit: int | None = None,
                      now_ms: int | None = None, timestamp_before_ms: int | None = None,
                      timestamp_after_ms: int | None = None) -> BatchInfo:
    """Validate a producer's record set (one v2 batch) for append; see the module docstring.

    Args:
        buf: the record set as the request carried it (bytes, bytearray or memoryview).
        max_batch_size: ``max.message.bytes``: the largest batch accepted, in bytes.
        inflate_limit: most bytes a compressed batch may inflate to (default
            :func:`default_inflate_limit` of ``max_batch_size``).
        now_ms, timestamp_before_ms, timestamp_after_ms: the broker's clock and
            ``message.timestamp.before.max.ms`` / ``after.max.ms``; None skips that bound.

    Raises:
        see the module docstring.
    """
    end = len(buf)
    claimed = batch_size_at(buf, 0)
    if claimed is not None and claimed != end and claimed >= RECORDS_OFFSET:
        raise CorruptRecordError(f"the record set holds {end} bytes but its batch claims {claimed}; a produce "
                                 "request carries exactly one record batch v2")
    h = check_batch(buf, 0, end)
    if h.size > max_batch_size:
        raise RecordTooLargeError(f"the record batch is {h.size} bytes, more than max.message.bytes "
                                  f"{max_batch_size}")
    if h.base_offset != 0:
        raise InvalidRecordError(f"a produced batch must have base offset 0, not {h.base_offset}")
    if h.records_count <= 0:
        raise InvalidRecordError(f"a produced batch must hold at least one record; it says {h.records_count}")
    if h.last_offset_delta != h.records_count - 1:
        raise InvalidRecordError(f"inconsistent batch: last_offset_delta {h.last_offset_delta} but "
                                 f"{h.records_count} records (the delta must be the count - 1)")
    if h.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(f"batch of producer id {h.producer_id} has invalid base sequence {h.base_sequence}")
    check_codec(h.codec)
    _check_timestamps(h, now_ms, timestamp_before_ms, timestamp_after_ms)
    if h.codec == NONE:
        walk_records(buf, RECORDS_OFFSET, end, h.records_count)
    else:
        limit = inflate_limit if inflate_limit is not None else default_inflate_limit(max_batch_size)
        body = decompress(h.codec, memoryview(buf)[RECORDS_OFFSET:end], limit=limit)
        try:
            walk_records(body, 0, len(body), h.records_count)
            check_offset_deltas(body, 0, len(body))
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"{codec_name(h.codec)} batch, inflated: {exc}") from None
    return BatchInfo(h, h.size)


def default_inflate_limit(max_batch_size: int) -> int:
    """What a compressed batch of at most ``max_batch_size`` bytes may inflate to by default:
    64 times its limit (ordinary log lines compress 5-20x), between 16 MB and 100 MB."""
    return max(16 << 20, min(100 << 20, max_batch_size * 64 if max_batch_size < UNBOUNDED else 100 << 20))


def _check_timestamps(h: BatchHeader, now_ms, before, after) -> None:
    if h.timestamp_type != 0:
        raise InvalidTimestampError("a producer may not set the timestamp type LOG_APPEND_TIME; the broker sets it")
    first, top = h.base_timestamp, h.max_timestamp
    if top == NO_TIMESTAMP:
        return
    if first != NO_TIMESTAMP and first > top:
        raise InvalidTimestampError(f"batch base timestamp {first} is after its max timestamp {top}")
    if now_ms is None:
        return
    for ts in (first, top):
        if ts == NO_TIMESTAMP:
            continue
        if before is not None and now_ms - ts > before:
            raise InvalidTimestampError(f"timestamp {ts} is more than message.timestamp.before.max.ms={before} "
                                        f"before the broker's time {now_ms}")
        if after is not None and ts - now_ms > after:
            raise InvalidTimestampError(f"timestamp {ts} is more than message.timestamp.after.max.ms={after} "
                                        f"after the broker's time {now_ms}")


def walk_records(buf, pos: int, end: int, count: int) -> None:
    """Walk the record lengths of ``buf[pos:end]``: exactly ``count`` records of at least 6 bytes
    that tile it to its last byte (what the produce path checks of an uncompressed batch).

    Runs of equally long records (two in a row are enough to look) are stepped over by
    :func:`_run`, which compares each length prefix of the run with C-speed strided slices: a batch
    of equal-sized records costs a few nanoseconds a record, any other batch one loop step a record.

    Raises:
        InvalidRecordError: naming the first record that lies, and how.
    """
    i = 0
    prev = -1
    try:
        while pos < end:
            b = buf[pos]
            if b < 0x80:
                v, k = b, 1
            else:
                b2 = buf[pos + 1]
                if b2 < 0x80:
                    v, k = (b & 0x7F) | (b2 << 7), 2
                else:
                    try:
                        v, q = read_uvarint(buf, pos)
                    except InvalidRecordError as exc:    # name the record whose length is not a varint
                        raise InvalidRecordError(f"record {i}'s length: {exc}") from None
                    k = q - pos
            length = (v >> 1) ^ -(v & 1)
            if length < MIN_RECORD_BODY:
                raise InvalidRecordError(f"record {i} at byte {pos} claims {length} bytes; a record has at "
                                         f"least {MIN_RECORD_BODY}")
            size = k + length
            if size == prev:
                run = _run(buf, pos, end, size, k)
                pos += run * size
                i += run
            else:
                pos += size
                i += 1
            prev = size
    except IndexError:
        raise InvalidRecordError(f"record {i} is cut off at the end of the batch (byte {end})") from None
    if pos != end:
        raise InvalidRecordError(f"record {i - 1} runs {pos - end} bytes past the end of its batch")
    if i != count:
        raise InvalidRecordError(f"the batch says {count} records but holds {i}")


def _run(buf, pos: int, end: int, size: int, k: int) -> int:
    """How many records from ``pos`` on (at least 1) have the same ``k``-byte length prefix as the
    one at ``pos``, each ``size`` bytes and inside ``end``: the length bytes of the run, read with one
    strided slice per prefix byte, galloping (8, 16, 32 ... records per probe) so that the work
    stays proportional to the run."""
    avail = (end - pos) // size
    if avail <= 1:
        return 1
    prefix = bytes(buf[pos:pos + k])
    run, probe = 0, 8
    while run < avail:
        m = min(probe, avail - run)
        start = pos + run * size
        matched = m
        for j in range(k):
            col = bytes(buf[start + j:start + m * size:size])
            same = m - len(col.lstrip(prefix[j:j + 1]))
            if same < matched:
                matched = same
        run += matched
        if matched < m:
            break
        probe *= 2
    return max(run, 1)


def check_offset_deltas(buf, pos: int, end: int) -> None:
    """Record i of ``buf[pos:end]`` (records already walked) has offset delta i.

    Raises:
        InvalidRecordError: naming the first record whose delta is not its index.
    """
    i = 0
    while pos < end:
        length, body = read_varint(buf, pos)
        p = read_varlong(buf, body + 1)[1]      # after attributes and timestamp delta
        od = read_varint(buf, p)[0]
        if od != i:
            raise InvalidRecordError(f"record {i} has offset delta {od}; record i must have offset delta i")
        pos = body + length
        i += 1
