"""A partition log in Kafka 0.7's format: offsets are byte positions, a message is visible once flushed.

The log is the sorted list of its :class:`~ingest.broker.segment.Segment` s; what both log formats
share (the view, flush, roll, the rules after an I/O error, close) is
:class:`~ingest.broker.segmented_log.SegmentedLog`'s, retention is
:mod:`ingest.broker.log_retention`'s and a replica's truncation :mod:`ingest.broker.log_replica`'s.
Appends go to the last (active) segment, which is rolled at ``log.file.size`` bytes or after
``log.roll.hours``. Offsets are byte positions: next offset = offset + size.

Visibility: only flushed (fsynced) messages are readable. ``end_offset`` is
the offset after the last flushed message; a flush happens after
``log.flush.interval`` messages, or when the manager's flusher finds the
log's flush interval elapsed, or on roll and close. After a failed fsync the log is offline and
``end_offset`` stays where the last successful flush left it.

Validation happens before the lock: :meth:`Log.append` takes a
:class:`~ingest.records.message_batch.MessageBatch` made for append (what the
request handlers make, once per produced set) or validates raw bytes itself.

Concurrency contract: :mod:`ingest.broker.segmented_log`'s (writers serialise on the log's lock
and publish an immutable view; readers take none, take a reference on the segment they read and
retry on a new view when retention deleted it meanwhile).
"""
from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from ingest.broker.log_replica import ReplicaLogOps
from ingest.broker.log_retention import LogRetention
from ingest.broker.segment import LogSlice, Segment
from ingest.broker.segment_file import storage_error
from ingest.broker.segmented_log import EARLIEST_TIME, LATEST_TIME, LogView, SegmentedLog
from ingest.errors import LogCorruptionError, OffsetMismatchError, OffsetOutOfRangeError
from ingest.records.message_batch import MessageBatch

log = logging.getLogger(__name__)

__all__ = ["EARLIEST_TIME", "LATEST_TIME", "Log", "LogSettings"]

_HOUR_MS = 3_600_000


@dataclass(frozen=True)
class LogSettings:
    """The per-log knobs, resolved from the config for one topic."""

    file_size: int = 1024 * 1024 * 1024
    roll_ms: int = 168 * _HOUR_MS
    flush_interval_messages: int = 500
    flush_interval_ms: int = 3000
    max_message_size: int = 1_000_000
    index_interval: int = 4096
    retention_ms: int = 168 * _HOUR_MS   # -1: no limit (the configuration allows 1 hour at least)
    retention_size: int = -1


class Log(ReplicaLogOps, LogRetention, SegmentedLog):
    """One topic-partition's log in the 0.7 format; see the module docstring for the contract.

    ``Log(directory, settings, clock, *, name=None, files=UNLIMITED)`` opens (recovers) or creates
    the log (:class:`~ingest.broker.segmented_log.SegmentedLog`).
    """

    SEGMENT = Segment
    settings: LogSettings

    # --- the format's segments and settings -------------------------------------------------

    def _open_segment(self, path: Path, base_offset: int) -> Segment:
        s = self.settings
        return Segment.open(path, base_offset, self._clock, s.index_interval, self._files, s.max_message_size)

    def _create_segment(self, base_offset: int) -> Segment:
        return Segment.create(self.directory, base_offset, self._clock, self.settings.index_interval, self._files)

    def _recover(self, segments: list[Segment]) -> None:
        dropped = segments[-1].recover()
        if dropped:
            log.warning("log %s: recovery dropped %d bytes from the newest segment", self.name, dropped)
        for a, b in zip(segments, segments[1:]):
            if a.next_offset < b.base_offset:
                # a sealed segment cut short: its valid messages are served, the missing bytes are a
                # damaged range whose next valid offset is the next segment's base
                log.error("log %s: segment %s ends at %d but the next starts at %d: %d bytes are missing; "
                          "they are recorded as a damaged range when the segment is verified, and fetches "
                          "there answer CORRUPT_RANGE with next offset %d", self.name, a.path.name,
                          a.next_offset, b.base_offset, b.base_offset - a.next_offset, b.base_offset)
                a.note_gap(b.base_offset - a.base_offset)
            elif a.next_offset > b.base_offset:
                log.error("log %s: segment %s ends at %d but the next starts at %d: they overlap; reads past "
                          "%d in it fail", self.name, a.path.name, a.next_offset, b.base_offset, b.base_offset)

    def _unsynced_from(self) -> int:
        return self._view.end  # what is visible was flushed

    def _synced_locked(self) -> None:
        v = self._view
        self._view = LogView(v.segments, v.bases, self._write_end, self._active.size)

    def _flush_interval_ms(self) -> int:
        return self.settings.flush_interval_ms

    def _retention_limits(self) -> tuple[int, int]:
        return self.settings.retention_ms, self.settings.retention_size

    # --- writing ----------------------------------------------------------------------------

    def append(self, message_set: MessageBatch | bytes | memoryview, expected: int | None = None) -> int:
        """Append a message set; returns the offset of its first message.

        With ``expected`` (APPEND_AT), append only if :attr:`log_end` equals it, checked under
        the log's lock with the append itself; otherwise raise OffsetMismatchError naming the
        log end, nothing appended.

        Raw bytes are validated here, before the lock; a :class:`MessageBatch` made
        for append is trusted unless it was checked against a larger
        ``max.message.size`` than this log's (a batch made for reading is validated again).

        Raises:
            InvalidMessageError: a bad or cut-off message (nothing is written).
            MessageTooLargeError: a message above ``max.message.size``.
            DiskFullError / LogWriteError: the write failed (ENOSPC / another I/O error) and was
                cut back (nothing is appended).
            StorageError: no descriptor to open the segment with, or the log is closed.
            LogOfflineError: the log is offline, or went offline during this
                append (its write could not be cut back, or its flush failed).
        """
        s = self.settings
        vs = message_set
        if not isinstance(vs, MessageBatch) or vs.max_message_size is None \
                or vs.max_message_size > s.max_message_size:
            data = vs.raw if isinstance(vs, MessageBatch) else vs
            vs = MessageBatch.for_append(data, max_message_size=s.max_message_size, destination=f"log {self.name}")
        n = vs.size
        with self._lock:
            self._check_open()
            if expected is not None and expected != self._write_end:
                raise OffsetMismatchError(f"log {self.name}: log end is {self._write_end}, not the expected "
                                          f"{expected}; nothing appended", log_end=self._write_end)
            if n == 0:
                return self._write_end
            seg = self._active
            now = self._clock.time_ms()
            if seg.size > 0 and (seg.size + n > s.file_size or now - seg.created_ms >= s.roll_ms):
                seg = self._roll_locked()
            offset = self._write_end
            try:
                seg.append(vs.raw, vs.index_entries(seg.size, seg.next_index_mark(), s.index_interval), now)
            except OSError as exc:
                self._cut_back_locked(seg, n, exc)
            self._write_end += n
            self._unflushed += vs.count
            if self._unflushed >= s.flush_interval_messages:
                self._flush_locked()
            return offset

    # --- reading ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, limit: int | None = None, *, check_first: bool = False) -> LogSlice:
        """Whole visible messages from ``offset``, at most ``max_bytes`` (the last may be cut).

        A read never crosses a segment end; reading at ``end_offset`` gives an
        empty slice. The caller must ``release()`` the slice. ``limit`` replaces
        the flushed end as the upper bound (a replicated partition's high
        watermark for consumers, its log end for followers); it is capped at
        :attr:`log_end`, and a read between ``limit`` and the log end is empty.
        ``check_first`` (a follower's fetch): CRC-check the first message served even from a
        verified segment (:meth:`Segment.check_first <ingest.broker.segment.Segment.check_first>`),
        so that bytes damaged on disk since are never handed to a replica as valid.

        Raises:
            OffsetOutOfRangeError: ``offset`` is before the start, after the
                end, or not a message boundary.
            LogOfflineError: the log is offline.
            CorruptRangeError: ``offset`` lies in a damaged range (its ``next_offset``
                is the next valid message; docs/log-format.md, "Damaged ranges").
            LogCorruptionError: ``offset`` falls in a gap between segments.
            InvalidFetchSizeError: ``max_bytes`` is negative.
        """
        self._check_read(max_bytes)
        while True:
            v = self._view
            if limit is not None:
                end = min(limit, self._write_end)
                top = max(end, self._write_end)
                if v.bases[0] <= offset <= top and offset >= end:
                    return LogSlice.empty(offset)
                v = LogView(v.segments, v.bases, end)
            if offset < v.bases[0] or offset > v.end:
                raise self._out_of_range(offset, v)
            i = bisect_right(v.bases, offset) - 1
            seg = v.segments[i]
            if not self._acquire(seg):
                continue  # deleted by retention after we took the view: look again
            try:
                pos = offset - seg.base_offset
                avail = seg.check_boundary(pos, min(seg.size, v.end - seg.base_offset))
                if avail == 0 and i != len(v.segments) - 1:
                    raise LogCorruptionError(
                        f"offset {offset} of log {self.name} falls in a gap after segment {seg.path.name}"
                    )
                length = min(avail, max_bytes)
                if not seg.verified and length:
                    # A saved index let us skip the start-up scan; check what we serve instead.
                    length = seg.validate_range(pos, length, pos + avail)
                elif check_first and length:
                    length = seg.check_first(pos, length, pos + avail)
            except BaseException:
                seg.release()
                raise
            return LogSlice(seg, offset, pos, length)

    # --- a replica's repair -----------------------------------------------------------------

    def repair(self, offset: int, data: bytes) -> bool:
        """Overwrite a damaged range starting at ``offset`` with ``data``, the same bytes from a
        healthy replica; True when that segment has no damage left (docs/replication.md).

        Raises:
            OffsetOutOfRangeError: ``offset`` is not in a segment, or ``data`` crosses its end.
            StorageError: the write failed.
        """
        with self._lock:
            self._check_open()
            v = self._view
            i = bisect_right(v.bases, offset) - 1
            if i < 0:
                raise OffsetOutOfRangeError(f"offset {offset} is before log {self.name}")
            seg = v.segments[i]
            pos = offset - seg.base_offset
            if pos + len(data) > seg.size:
                raise OffsetOutOfRangeError(
                    f"repair of {len(data)} bytes at {offset} crosses the end of segment {seg.path.name}")
            try:
                healed = seg.repair(pos, data)
            except OSError as exc:
                raise storage_error(f"cannot repair {seg.path} at {offset}", exc) from exc
        log.warning("log %s: damaged range at %d overwritten with %d bytes from another replica; segment %s",
                    self.name, offset, len(data), "intact again" if healed else "still has damage")
        return healed
