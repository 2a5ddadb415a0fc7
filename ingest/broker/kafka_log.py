"""A Kafka-format partition log: logical offsets, record batches v2 as produced, offset and time indexes.

The log is the sorted list of its :class:`~ingest.broker.kafka_segment.KafkaSegment` s and owns the
next offset: a leader's append validates a producer's batch before the lock and gives it the log end as
base offset; a replica's append keeps its offsets and must continue the log. Reads return whole batches
(:class:`~ingest.broker.kafka_slice.KafkaLogSlice`, for sendfile), at least one (KIP-74). Files, indexes,
recovery, retention and every decision: docs/log-format.md, "Kafka-format logs".

The public interface is :class:`ingest.broker.log.Log`'s where the meaning carries over. It differs in:
offsets number records, not bytes; a batch is visible once appended (``end_offset == log_end``, Kafka's
rule; ``limit`` bounds a replicated partition's readers) and flushing is about durability only;
``append`` returns an :class:`AppendInfo`; ``truncate_to`` takes a batch's base offset. Durability rules
are the 0.7 log's: a failed write is cut back (nothing appended); a failed cut or fsync takes the log
offline until the broker restarts.

What both formats share (the view, flush, roll, the rules after an I/O error, close, the 0.7 OFFSETS
answer) is :class:`~ingest.broker.segmented_log.SegmentedLog`'s, retention
:mod:`ingest.broker.log_retention`'s and truncation :mod:`ingest.broker.log_replica`'s; this module adds
the format's append, :mod:`ingest.broker.kafka_log_read` its reads and
:mod:`ingest.broker.kafka_log_offsets` its look-ups by time.

Concurrency contract: :mod:`ingest.broker.segmented_log`'s (writers serialise on the log's lock and
publish an immutable view, here with the visible end's position in the last segment; readers take no
lock, take a reference on the segment they read and retry on a new view when retention deleted it).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

from ingest.broker.kafka_log_offsets import KafkaLogOffsets
from ingest.broker.kafka_log_producers import KafkaLogProducers
from ingest.broker.kafka_log_read import KafkaLogReads
from ingest.broker.kafka_log_settings import KafkaLogSettings
from ingest.broker.kafka_segment import KafkaSegment
from ingest.broker.log_replica import ReplicaLogOps
from ingest.broker.log_retention import LogRetention
from ingest.broker.offset_index import MAX_RELATIVE_OFFSET
from ingest.broker.segmented_log import LogView, SegmentedLog
from ingest.errors import InvalidRecordError, OffsetMismatchError, RecordListTooLargeError, RecordTooLargeError
from ingest.records.batch import (ATTRIBUTES_OFFSET, CRC, CRC_OFFSET, LOG_APPEND_TIME, NO_TIMESTAMP,
                                  TIMESTAMP_TYPE_MASK, BatchHeader, compute_crc, set_partition_leader_epoch)
from ingest.records.validation import check_batches, default_inflate_limit, validate_produced

log = logging.getLogger(__name__)

__all__ = ["AppendInfo", "KafkaLog", "KafkaLogSettings", "ProducedBatch"]

_HEAD = 17  # base_offset, batch_length, partition_leader_epoch, magic: what a leader's append rewrites


class AppendInfo(NamedTuple):
    """What an append wrote: offsets ``first_offset .. last_offset``, ``records`` of them (a leader's
    count; a replica append counts offsets), the largest batch timestamp, and the log append time
    (NO_TIMESTAMP unless the topic uses LogAppendTime)."""

    first_offset: int
    last_offset: int
    records: int
    max_timestamp: int
    log_append_time: int
    size: int


class ProducedBatch(NamedTuple):
    """A producer's batch that :meth:`KafkaLog.validate` accepted under ``settings`` (a log trusts it
    only with its own settings object: a changed config validates again)."""

    data: object
    header: BatchHeader
    settings: KafkaLogSettings


class KafkaLog(KafkaLogReads, KafkaLogOffsets, KafkaLogProducers, ReplicaLogOps, LogRetention, SegmentedLog):
    """One Kafka-format topic-partition log; see the module docstring for the contract.

    ``KafkaLog(directory, settings, clock, *, name=None, files=UNLIMITED)`` opens (recovers) or
    creates the log (:class:`~ingest.broker.segmented_log.SegmentedLog`).
    """

    SEGMENT = KafkaSegment
    settings: KafkaLogSettings

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._load_producers_locked()   # not shared yet: no lock needed

    # --- the format's segments and settings -------------------------------------------------

    def _open_segment(self, path: Path, base_offset: int) -> KafkaSegment:
        return KafkaSegment.open(path, base_offset, self._clock, self.settings.index_interval_bytes, self._files,
                                 self._plausible_batch)

    def _create_segment(self, base_offset: int) -> KafkaSegment:
        return KafkaSegment.create(self.directory, base_offset, self._clock, self.settings.index_interval_bytes,
                                   self._files, self._plausible_batch)

    def _recover(self, segments: list[KafkaSegment]) -> None:
        for a, b in zip(segments, segments[1:]):
            a.next_offset = b.base_offset
        for seg in segments[:-1]:
            seg.ensure_indexed()  # sealed without sane saved indexes: scanned now, as Kafka rebuilds them
        dropped = segments[-1].recover()
        if dropped:
            log.warning("log %s: recovery dropped %d bytes from the newest segment", self.name, dropped)
        for a, b in zip(segments, segments[1:]):
            if a.indexed and a.next_offset != b.base_offset:
                log.warning("log %s: segment %s ends at offset %d and the next starts at %d; reads skip the gap",
                            self.name, a.path.name, a.next_offset, b.base_offset)
                a.next_offset = b.base_offset

    @property
    def _plausible_batch(self) -> int:
        """The largest batch recovery believes a length field about (``max.message.bytes`` with a margin:
        a replica may hold batches its leader accepted under a larger limit)."""
        return max(2 * self.settings.max_message_bytes, 16 << 20)

    def _unsynced_from(self) -> int:
        return self._write_end - self._unflushed

    def _flush_interval_ms(self) -> int:
        return self.settings.flush_ms

    def _retention_limits(self) -> tuple[int, int]:
        return self.settings.retention_ms, self.settings.retention_bytes

    def cleanup(self, now_ms: int) -> tuple[int, int]:
        """Retention (:meth:`~ingest.broker.log_retention.LogRetention.cleanup`), then idle producer ids expire."""
        out = super().cleanup(now_ms)
        self.expire_producers(now_ms)
        return out

    # --- writing ----------------------------------------------------------------------------

    def validate(self, records) -> ProducedBatch:
        """A producer's batch validated against this log's settings (``max.message.bytes``, timestamps),
        for a caller that must answer per partition before appending: :meth:`append` then trusts it.

        Raises:
            the validation errors of :meth:`append`.
        """
        s = self.settings
        info = validate_produced(records, max_batch_size=s.max_message_bytes,
                                 inflate_limit=default_inflate_limit(s.max_message_bytes),
                                 now_ms=self._clock.time_ms(), timestamp_before_ms=s.timestamp_before_max_ms,
                                 timestamp_after_ms=s.timestamp_after_max_ms)
        return ProducedBatch(records, info.header, s)

    def append(self, records, *, assign_offsets: bool = True, leader_epoch: int | None = None,
               expected: int | None = None) -> AppendInfo:
        """Append record batches v2; see the module docstring.

        Args:
            records: bytes, bytearray or memoryview, or a :class:`ProducedBatch` from :meth:`validate`.
                A leader's append (``assign_offsets``): one producer batch, validated here before the
                lock unless it is a ProducedBatch validated under these settings. A replica's: whole
                batches carrying their offsets, CRC-checked here, the first starting at the log end.
            leader_epoch: written into a leader's batch as its partition leader epoch (kept as is when None).
            expected: append only if the log end equals it (checked under the lock).

        A leader's batch of an idempotent producer is checked against the partition's producer state
        (:mod:`ingest.broker.producer_state`) under the lock: a duplicate of one of the producer's last
        batches is not written, and its stored offsets are returned with ``records`` and ``size`` 0.

        Raises:
            CorruptRecordError, InvalidRecordError, InvalidTimestampError, UnsupportedCompressionError,
                RecordTooLargeError: the batch is refused (nothing is written).
            RecordListTooLargeError: the records exceed ``segment.bytes``.
            OffsetMismatchError: ``expected`` (or a replica batch's base offset) is not the log end.
            OutOfOrderSequenceError / InvalidProducerEpochError: a leader's batch breaks its producer's
                sequence or carries a fenced epoch (nothing is written).
            DiskFullError / LogWriteError: the write failed (ENOSPC / another I/O error) and was cut
                back (nothing appended).
            LogOfflineError: the log is offline, or went offline during this append.
        """
        s = self.settings
        pb = None
        if isinstance(records, ProducedBatch):
            pb = records if records.settings is s else None  # validated under other settings: again
            records = records.data
        n = len(records)
        if n > s.segment_bytes:
            raise RecordListTooLargeError(f"log {self.name}: {n} bytes of records exceed segment.bytes "
                                          f"{s.segment_bytes}")
        if assign_offsets:
            headers = [(pb or self.validate(records)).header]
        else:
            headers = check_batches(records)
            if not headers:
                return AppendInfo(self._write_end, self._write_end - 1, 0, NO_TIMESTAMP, NO_TIMESTAMP, 0)
        with self._lock:
            self._check_open()
            end = self._write_end
            if expected is not None and expected != end:
                raise OffsetMismatchError(f"log {self.name}: log end is {end}, not the expected {expected}; "
                                          "nothing appended", log_end=end)
            now = self._clock.time_ms()
            append_time = NO_TIMESTAMP
            head = None
            data = records
            if assign_offsets:
                h = headers[0]
                dup = self.producers.check(h)
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, 0, dup.max_timestamp, NO_TIMESTAMP, 0)
                last = end + h.last_offset_delta
                max_ts = h.max_timestamp
                if s.timestamp_type == LOG_APPEND_TIME:
                    data, append_time, max_ts = self._stamp(records, now), now, now
                head = bytearray(memoryview(data)[:_HEAD])
                head[0:8] = end.to_bytes(8, "big", signed=True)
                if leader_epoch is not None:
                    head[12:16] = leader_epoch.to_bytes(4, "big", signed=True)
                batches = [(0, last, max_ts)]
                count = h.records_count
            else:
                if headers[0].base_offset != end:
                    raise OffsetMismatchError(f"log {self.name}: replica batches start at offset "
                                              f"{headers[0].base_offset}, the log end is {end}; nothing appended",
                                              log_end=end)
                batches, pos = [], 0
                for h in headers:
                    batches.append((pos, h.last_offset, h.max_timestamp))
                    pos += h.size
                last = headers[-1].last_offset
                max_ts = max(h.max_timestamp for h in headers)
                count = last + 1 - end
            self._write_locked(data, head, batches, last, count, now)
            if assign_offsets:
                self.producers.update(headers[0], end)
            else:
                for h in headers:
                    self.producers.update(h, h.base_offset)
            return AppendInfo(end, last, count, max_ts, append_time, n)

    def append_copied(self, records, expected: int, leader_epoch: int | None) -> AppendInfo:
        """Append another log's batches keeping their offsets (the mirror's AppendAt), only if the log
        end is ``expected`` (checked under the lock). The first batch starts at or after ``expected``;
        after it, the source lost those offsets (retention) and this log gets the same gap: a new
        segment starts at the batch's base offset (the log starts there when it holds nothing yet), as
        a follower starts again at its leader's log start. Each batch is CRC-checked and no larger than
        ``max.message.bytes``; ``leader_epoch`` (this partition's) replaces each batch's partition
        leader epoch, which lies outside the CRC.

        Raises:
            OffsetMismatchError: the log end is not ``expected``; nothing appended.
            InvalidRecordError: no batch, or the first starts before ``expected``.
            CorruptRecordError / RecordTooLargeError / RecordListTooLargeError: a bad or too large batch.
            DiskFullError / LogWriteError / LogOfflineError: as :meth:`append`.
        """
        s = self.settings
        n = len(records)
        if n > s.segment_bytes:
            raise RecordListTooLargeError(f"log {self.name}: {n} bytes of records exceed segment.bytes "
                                          f"{s.segment_bytes}")
        headers = check_batches(records)
        if not headers:
            raise InvalidRecordError(f"log {self.name}: an append of copied batches holds no record batch")
        for h in headers:
            if h.size > s.max_message_bytes:
                raise RecordTooLargeError(f"log {self.name}: the batch at offset {h.base_offset} is {h.size} bytes, "
                                          f"above max.message.bytes {s.max_message_bytes}")
        data = records
        if leader_epoch is not None:
            data, pos = bytearray(records), 0
            for h in headers:
                set_partition_leader_epoch(data, pos, leader_epoch)
                pos += h.size
        with self._lock:
            self._check_open()
            end = self._write_end
            if expected != end:
                raise OffsetMismatchError(f"log {self.name}: log end is {end}, not the expected {expected}; "
                                          "nothing appended", log_end=end)
            base = headers[0].base_offset
            if base < end:
                raise InvalidRecordError(f"log {self.name}: copied batches start at offset {base}, before the "
                                         f"expected offset {expected}")
            if base > end:
                self._skip_to_locked(base)
            batches, pos = [], 0
            for h in headers:
                batches.append((pos, h.last_offset, h.max_timestamp))
                pos += h.size
            last = headers[-1].last_offset
            now = self._clock.time_ms()
            self._write_locked(data, None, batches, last, last + 1 - base, now)
            return AppendInfo(base, last, sum(h.records_count for h in headers),
                              max(h.max_timestamp for h in headers), NO_TIMESTAMP, n)

    def _skip_to_locked(self, offset: int) -> None:
        """Leave the offsets from the log end to ``offset`` unused: the next batch goes into a new segment
        based at ``offset`` (the only one when the log holds nothing)."""
        log.warning("log %s: offsets %d..%d are absent from the copied source; the log continues at %d",
                    self.name, self._write_end, offset, offset)
        if self.size == 0:
            self._reset_locked(offset)
            return
        self._write_end = offset
        self._roll_locked()

    @staticmethod
    def _stamp(records, now: int) -> bytearray:
        """A copy of a producer's batch stamped with the log append time (attributes, max timestamp, CRC)."""
        data = bytearray(records)
        attrs = int.from_bytes(data[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2], "big") | TIMESTAMP_TYPE_MASK
        data[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2] = attrs.to_bytes(2, "big")
        data[35:43] = now.to_bytes(8, "big", signed=True)   # max_timestamp
        CRC.pack_into(data, CRC_OFFSET, compute_crc(data, 0, len(data)))
        return data

    def _write_locked(self, data, head, batches, last: int, count: int, now: int) -> None:
        s = self.settings
        seg = self._active
        n = len(data)
        if seg.size > 0 and (seg.size + n > s.segment_bytes or now - seg.created_ms >= s.segment_ms
                             or last - seg.base_offset > MAX_RELATIVE_OFFSET):
            seg = self._roll_locked()
        try:
            seg.append(data, head, batches, last + 1, now)
        except OSError as exc:
            self._cut_back_locked(seg, n, exc)
        self._write_end = last + 1
        v = self._view
        self._view = LogView(v.segments, v.bases, self._write_end, seg.size)
        self._unflushed += count
        if self._unflushed >= s.flush_messages:
            self._flush_locked()
