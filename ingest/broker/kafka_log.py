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

Concurrency contract (the 0.7 log's): writers (append, flush, roll, retention, truncation, close)
serialise on the log's lock and publish an immutable :class:`_View` (segments, base offsets, visible end
offset and position) with one attribute store; readers take no lock, read one view and take a reference
on the segment they read; a deletion publishes a view without the segment before unlinking it, and a
reader that lost the race retries on the new view.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path
from threading import Lock
from typing import Callable, NamedTuple

from ingest.broker.kafka_log_offsets import KafkaLogOffsets
from ingest.broker.kafka_log_read import KafkaLogReads
from ingest.broker.kafka_log_replica import KafkaReplicaLogOps
from ingest.broker.kafka_log_retention import KafkaLogRetention
from ingest.broker.kafka_log_settings import KafkaLogSettings
from ingest.broker.kafka_segment import SUFFIX, KafkaSegment, parse_segment_name
from ingest.broker.offset_index import MAX_RELATIVE_OFFSET
from ingest.broker.open_files import UNLIMITED, OpenFiles
from ingest.broker.segment import storage_error
from ingest.clock import Clock
from ingest.errors import (DiskFullError, LogOfflineError, LogWriteError, OffsetMismatchError,
                           RecordListTooLargeError, StorageError)
from ingest.ratelimited_log import RateLimitedLog
from ingest.records.batch import (ATTRIBUTES_OFFSET, CRC, CRC_OFFSET, LOG_APPEND_TIME, NO_TIMESTAMP,
                                  TIMESTAMP_TYPE_MASK, BatchHeader, compute_crc)
from ingest.records.validation import check_batches, default_inflate_limit, validate_produced

log = logging.getLogger(__name__)

_write_failures = RateLimitedLog(log, interval_s=60.0)
"""A full disk refuses every write: logged once a minute per log and cause, the repeats counted."""

_HEAD = 17  # base_offset, batch_length, partition_leader_epoch, magic: what a leader's append rewrites
_SIDECARS = (".index", ".timeindex", ".damaged")


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


class _View(NamedTuple):
    segments: tuple[KafkaSegment, ...]
    bases: tuple[int, ...]
    end: int            # visible end offset (the log end: Kafka exposes what is appended)
    end_position: int   # its position in the last segment


class KafkaLog(KafkaLogReads, KafkaReplicaLogOps, KafkaLogOffsets, KafkaLogRetention):
    """One Kafka-format topic-partition log; see the module docstring for the contract."""

    on_flush: Callable[[float], None] | None = None
    """Called (under the log's lock) with the seconds each fsync took; set by a manager for metrics."""

    def __init__(self, directory: Path, settings: KafkaLogSettings, clock: Clock, *, name: str | None = None,
                 files: OpenFiles = UNLIMITED) -> None:
        """Open (recover) or create the log in ``directory``; segment descriptors come from ``files``.

        Raises:
            StorageError: the directory or a segment cannot be read or created (DiskFullError on ENOSPC).
        """
        self.directory = Path(directory)
        self.name = name or self.directory.name
        self.settings = settings
        self._clock = clock
        self._files = files
        self._lock = Lock()
        self._closed = False
        self._offline: str | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            segments = self._load()
        except OSError as exc:
            raise storage_error(f"cannot open log {self.name} in {self.directory}", exc) from exc
        self._active = segments[-1]
        self._write_end = self._active.next_offset
        self._unflushed = 0
        self._last_flush_ms = clock.time_ms()
        self._view = _View(tuple(segments), tuple(s.base_offset for s in segments), self._write_end,
                           self._active.size)

    # --- start-up -------------------------------------------------------------------------

    def _load(self) -> list[KafkaSegment]:
        found: list[tuple[int, Path]] = []
        sidecars: list[Path] = []
        for entry in os.scandir(self.directory):
            base = parse_segment_name(entry.name)
            if base is not None:
                found.append((base, Path(entry.path)))
            elif entry.name.endswith(".tmp") or entry.name.endswith(_SIDECARS):
                sidecars.append(Path(entry.path))
            elif entry.name.endswith(SUFFIX):
                log.warning("log %s: ignoring file %s (not <20 digits>%s)", self.name, entry.name, SUFFIX)
        found.sort()
        names = {p.name for _, p in found}
        for p in sidecars:  # leftovers of a crash while saving or deleting
            if p.name.endswith(".tmp") or p.with_suffix(SUFFIX).name not in names:
                p.unlink(missing_ok=True)
        s = self.settings
        segments = [KafkaSegment.open(p, base, self._clock, s.index_interval_bytes, self._files,
                                      self._plausible_batch) for base, p in found]
        while len(segments) > 1 and segments[-1].size == 0:
            segments.pop().delete()
        if not segments:
            return [KafkaSegment.create(self.directory, 0, self._clock, s.index_interval_bytes, self._files,
                                        self._plausible_batch)]
        for a, b in zip(segments, segments[1:]):
            a.next_offset = b.base_offset
        for seg in segments[:-1]:
            seg.ensure_indexed()  # sealed without sane saved indexes: scanned now, as Kafka rebuilds them
        newest = segments[-1]
        dropped = newest.recover()
        if dropped:
            log.warning("log %s: recovery dropped %d bytes from the newest segment", self.name, dropped)
        for a, b in zip(segments, segments[1:]):
            if a.indexed and a.next_offset != b.base_offset:
                log.warning("log %s: segment %s ends at offset %d and the next starts at %d; reads skip the gap",
                            self.name, a.path.name, a.next_offset, b.base_offset)
                a.next_offset = b.base_offset
        return segments

    @property
    def _plausible_batch(self) -> int:
        """The largest batch recovery believes a length field about (``max.message.bytes`` with a margin:
        a replica may hold batches its leader accepted under a larger limit)."""
        return max(2 * self.settings.max_message_bytes, 16 << 20)

    # --- state ------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The log start offset: the first segment's base offset."""
        return self._view.bases[0]

    @property
    def end_offset(self) -> int:
        """The offset after the last visible record: every appended one (Kafka's log end offset)."""
        return self._view.end

    @property
    def log_end(self) -> int:
        """The offset the next appended record gets (a replica's log end offset)."""
        return self._write_end

    @property
    def size(self) -> int:
        """Bytes in all segments."""
        return sum(seg.size for seg in self._view.segments)

    @property
    def offline(self) -> bool:
        """True once an I/O error took the log offline (until the broker restarts)."""
        return self._offline is not None

    def segment_bases(self) -> list[int]:
        return list(self._view.bases)

    def segments(self) -> tuple[KafkaSegment, ...]:
        """An immutable snapshot of the segment list."""
        return self._view.segments

    def damaged_ranges(self) -> list[tuple[int, int]]:
        """``(first offset, next offset)`` of every damaged range of the log."""
        segs = self._view.segments
        out = []
        for i, seg in enumerate(segs):
            end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
            out += [(d.first_offset, end if d.next_offset is None else d.next_offset) for d in seg.damaged]
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

        Raises:
            CorruptRecordError, InvalidRecordError, InvalidTimestampError, UnsupportedCompressionError,
                RecordTooLargeError: the batch is refused (nothing is written).
            RecordListTooLargeError: the records exceed ``segment.bytes``.
            OffsetMismatchError: ``expected`` (or a replica batch's base offset) is not the log end.
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
            return AppendInfo(end, last, count, max_ts, append_time, n)

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
        start = seg.size
        try:
            seg.append(data, head, batches, last + 1, now)
        except OSError as exc:
            self._cut_back_locked(seg, start, n, exc)
        self._write_end = last + 1
        v = self._view
        self._view = _View(v.segments, v.bases, self._write_end, seg.size)
        self._unflushed += count
        if self._unflushed >= s.flush_messages:
            self._flush_locked()

    def flush(self) -> None:
        """fsync what was appended since the last flush.

        Raises:
            LogOfflineError: the log is offline or the fsync failed (it is offline now).
        """
        with self._lock:
            if self._offline is not None:
                raise self._offline_error()
            if not self._closed:
                self._flush_locked()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if unflushed records are older than ``flush.ms`` (never when offline)."""
        if self._offline is not None or self._unflushed == 0 \
                or now_ms - self._last_flush_ms < self.settings.flush_ms:
            return False
        self.flush()
        return True

    def roll(self) -> None:
        """Start a new active segment (flushing and sealing the current one)."""
        with self._lock:
            self._check_open()
            if self._active.size > 0:
                self._roll_locked()

    def _flush_locked(self) -> None:
        if self._unflushed:
            began = time.perf_counter()
            try:
                self._active.flush()
            except OSError as exc:
                raise self._go_offline_locked(f"fsync of {self._active.path} failed: {exc.strerror}") from exc
            if self.on_flush is not None:
                self.on_flush(time.perf_counter() - began)
        self._unflushed = 0
        self._last_flush_ms = self._clock.time_ms()

    def _cut_back_locked(self, seg: KafkaSegment, start: int, n: int, exc: OSError) -> None:
        """After a failed write: truncate its partial bytes, then raise. Never returns."""
        what = f"write of {n} bytes at offset {self._write_end} to {seg.path.name} failed: {exc.strerror}"
        try:
            seg.cut_to(start)
        except OSError as exc2:
            raise self._go_offline_locked(f"{what}, and cutting its partial bytes off failed: {exc2.strerror}") from exc2
        _write_failures.log(logging.ERROR, self.name, errno.errorcode.get(exc.errno, "write failed"),
                            "log %s: %s; the partial write was cut back, nothing was appended", self.name, what)
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(f"log {self.name}: {what} (disk full); nothing was appended") from exc
        raise LogWriteError(f"log {self.name}: {what}; nothing was appended") from exc

    def _go_offline_locked(self, why: str) -> LogOfflineError:
        self._offline = why
        log.error("log %s is OFFLINE: %s. Its appends and reads fail until the broker restarts; recovery "
                  "then keeps what is on disk. Offsets from %d may be lost.", self.name, why,
                  self._write_end - self._unflushed)
        return self._offline_error()

    def _offline_error(self) -> LogOfflineError:
        return LogOfflineError(f"log {self.name} is offline after an I/O error ({self._offline}); "
                               "it serves again after a broker restart")

    def _roll_locked(self) -> KafkaSegment:
        self._flush_locked()
        self._active.seal()
        try:
            seg = KafkaSegment.create(self.directory, self._write_end, self._clock,
                                      self.settings.index_interval_bytes, self._files, self._plausible_batch)
        except OSError as exc:
            raise self._go_offline_locked(f"fsync of directory {self.directory} failed: {exc.strerror}") from exc
        seg.next_offset = self._write_end
        v = self._view
        self._view = _View(v.segments + (seg,), v.bases + (seg.base_offset,), v.end, 0)
        self._active = seg
        log.info("log %s: rolled to new segment %s", self.name, seg.path.name)
        return seg

    # --- close ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush (unless offline) and close; readers holding slices keep them until release.

        Raises:
            LogOfflineError: the final flush failed (the log is closed all the same).
        """
        failed: LogOfflineError | None = None
        with self._lock:
            if self._closed:
                return
            if self._offline is None:
                try:
                    self._flush_locked()
                except LogOfflineError as exc:
                    failed = exc
            self._closed = True
            segs = self._view.segments
        for seg in segs:
            seg.close()
        if failed is not None:
            raise failed

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.name} is closed")
        if self._offline is not None:
            raise self._offline_error()
