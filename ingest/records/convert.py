"""Conversion between legacy message sets (magic 0/1) and record batch v2.

Up: a producer's magic 0/1 message set (Produce v0-v2) becomes ONE v2 batch, as
Kafka 3.x stores only v2 (``LogValidator`` converting to ``toMagic`` 2): the
records in order, offset deltas 0..n-1 (the log assigns the base offset), the
producer's codec kept (compressed again as v2's records section), magic 1
timestamps kept, magic 0 records stamped NO_TIMESTAMP (-1), no producer id.
A magic 1 set with LOG_APPEND_TIME is stamped by the broker anyway.

Down: v2 batches served to a Fetch v0-v3 reader become magic 0 (Fetch v0-v1) or
magic 1 (v2-v3) sets, batch by batch, as Kafka's ``RecordsUtil.downConvert``:
an uncompressed batch becomes one message per record with its absolute
offset; a compressed batch ONE wrapper of the same codec. Headers are dropped
(those formats have none), control batches are skipped, zstd cannot be
expressed (UnsupportedCompressionError: Kafka answers UNSUPPORTED_COMPRESSION_TYPE).
A batch cut off at the end of the input (a fetch's size limit) is dropped;
legacy readers handle the partial message that a v2 reader would.
"""
from __future__ import annotations

from ingest.errors import UnsupportedCompressionError
from ingest.records.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, batch_size_at, read_header
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import NONE, ZSTD
from ingest.records.legacy import MAGIC_V0, LegacyRecord, encode_message_set, read_entry, validate_legacy_produced
from ingest.records.record import iter_records


def up_convert(buf, *, max_message_size: int, inflate_limit: int, now_ms: int | None = None,
               timestamp_type: int = CREATE_TIME) -> bytearray:
    """A producer's magic 0/1 set, validated (:func:`~ingest.records.legacy.validate_legacy_produced`),
    as one v2 batch at base offset 0. ``timestamp_type`` LOG_APPEND_TIME stamps it with ``now_ms``."""
    records = validate_legacy_produced(buf, max_message_size=max_message_size, inflate_limit=inflate_limit)
    return legacy_records_to_batch(records, codec=_codec_of(buf), now_ms=now_ms, timestamp_type=timestamp_type)


def _codec_of(buf) -> int:
    """The codec of the set's first message (Kafka keeps the producer's codec: compression.type=producer)."""
    return read_entry(buf, 0).codec


def legacy_records_to_batch(records: list[LegacyRecord], *, codec: int = NONE, now_ms: int | None = None,
                            timestamp_type: int = CREATE_TIME) -> bytearray:
    """``records`` as one v2 batch (offset deltas by position; magic 0 timestamps become -1)."""
    simple = [SimpleRecord(r.value, r.key, (), r.timestamp if r.magic > MAGIC_V0 else NO_TIMESTAMP)
              for r in records]
    return build_batch(simple, codec=codec, timestamp_type=timestamp_type, now_ms=now_ms)


def down_convert(buf, magic: int, *, inflate_limit: int) -> bytearray:
    """The v2 batches of ``buf`` as a magic ``magic`` (0 or 1) message set; see the module docstring.

    Raises:
        UnsupportedCompressionError: a zstd batch.
        CorruptRecordError / InvalidRecordError: a batch that does not read.
    """
    out = bytearray()
    pos, end = 0, len(buf)
    while pos < end:
        size = batch_size_at(buf, pos)
        if size is None or pos + size > end:
            break  # cut off by the fetch size
        h = read_header(buf, pos)
        if not h.is_control and h.records_count > 0:
            if h.codec == ZSTD:
                raise UnsupportedCompressionError(
                    f"batch at offset {h.base_offset} is zstd-compressed; magic {magic} message sets cannot hold "
                    "zstd (fetch with Fetch v10 or later)")
            recs = [(r.offset, r.timestamp if magic > MAGIC_V0 else NO_TIMESTAMP, r.key, r.value)
                    for r in iter_records(buf, pos, inflate_limit=inflate_limit)]
            append = h.timestamp_type == LOG_APPEND_TIME
            out += encode_message_set(recs, magic, h.codec,
                                      timestamp_type=LOG_APPEND_TIME if append else CREATE_TIME,
                                      wrapper_timestamp=h.max_timestamp if magic > MAGIC_V0 else None)
        pos += size
    return out
