"""A partition log: ordered segments, append, read, offsets-before, flush, retention.

The log is the sorted list of its segments (base offsets kept in memory,
binary search to find the segment of an offset). Appends go to the last
(active) segment, which is rolled at ``log.file.size`` bytes or after
``log.roll.hours``. Offsets are byte positions: next offset = offset + size.

Visibility: only flushed (fsynced) messages are readable. ``end_offset`` is
the offset after the last flushed message; a flush happens after
``log.flush.interval`` messages, or when the manager's flusher finds the
log's flush interval elapsed, or on roll and close.

Durability: a failed fsync is never retried. After one the kernel may have
dropped the unwritten pages while a later fsync succeeds, so the log goes
*offline* (as Kafka 0.7 halts the broker on an I/O error during a flush, but
only this partition): it logs one ERROR line, keeps ``end_offset`` where the
last successful flush left it, and refuses appends, flushes, rolls and reads
with :class:`~ingest.errors.LogOfflineError` until the broker restarts and
recovery decides what is on disk. A failed write is cut back to the append's
start (nothing is appended, no hole is left for the next append to cover);
if even that fails, the log goes offline too. A failed write is logged at
ERROR once a minute per log and cause, the repeats counted (a full disk
refuses every write, and its log lines would land on the same disk).

Segment files are not held open: their descriptors come from an
:class:`~ingest.broker.open_files.OpenFiles` pool (the broker's, shared by
every log and bounded by ``log.max.open.files``; unbounded for a Log used on
its own).

Validation happens before the lock: :meth:`Log.append` takes a
:class:`~ingest.records.message_batch.MessageBatch` made for append (what the
request handlers make, once per produced set) or validates raw bytes itself.

Concurrency contract: writers (append, flush, roll, retention, close)
serialise on the log's lock. Readers take no lock: they read one immutable
:class:`_View` (segments tuple, their base offsets, visible end) published by
writers with a single attribute store (copy-on-write), then take a reference
on the segment they read (see :mod:`ingest.broker.segment`). A deletion
publishes a view without the segment before unlinking it, and a reader that
lost the race retries on the new view.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from threading import Lock
from typing import Callable, NamedTuple

from ingest.broker.deletion_log import record_deletion
from ingest.broker.log_replica import ReplicaLogOps
from ingest.broker.open_files import UNLIMITED, OpenFiles
from ingest.broker.segment import SUFFIX, LogSlice, Segment, parse_segment_name, storage_error
from ingest.broker.segment_damage import DAMAGED_SUFFIX
from ingest.broker.segment_index import SUFFIX as INDEX_SUFFIX
from ingest.clock import Clock
from ingest.errors import (
    DiskFullError,
    InvalidFetchSizeError,
    LogWriteError,
    LogCorruptionError,
    LogOfflineError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    StorageError,
)
from ingest.ratelimited_log import RateLimitedLog
from ingest.records.message_batch import MessageBatch

log = logging.getLogger(__name__)

_write_failures = RateLimitedLog(log, interval_s=60.0)

LATEST_TIME = -1
EARLIEST_TIME = -2
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
    retention_ms: int = 168 * _HOUR_MS
    retention_size: int = -1


class _View(NamedTuple):
    segments: tuple[Segment, ...]
    bases: tuple[int, ...]
    end: int


class Log(ReplicaLogOps):
    """One topic-partition's log; see the module docstring for the contract."""

    on_flush: Callable[[float], None] | None = None
    """Called (under the log's lock) with the seconds each fsync took; set by the LogManager for metrics."""

    def __init__(self, directory: Path, settings: LogSettings, clock: Clock, *, name: str | None = None,
                 files: OpenFiles = UNLIMITED) -> None:
        """Open (recover) or create the log in ``directory``; segment descriptors come from ``files``.

        Raises:
            StorageError: the directory or a segment cannot be read or created
                (DiskFullError on ENOSPC).
        """
        self.directory = Path(directory)
        self.name = name or self.directory.name
        self.settings = settings
        self._clock = clock
        self._files = files
        self._lock = Lock()
        self._closed = False
        self._offline: str | None = None  # why the log stopped serving; None while it serves
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            segments = self._load()
        except OSError as exc:  # e.g. a failed directory fsync while creating the first segment
            raise storage_error(f"cannot open log {self.name} in {self.directory}", exc) from exc
        last = segments[-1]
        self._active = last
        self._write_end = last.end_offset
        self._unflushed = 0
        self._last_flush_ms = clock.time_ms()
        self._view = _View(tuple(segments), tuple(s.base_offset for s in segments), self._write_end)

    # --- start-up ---------------------------------------------------------------

    def _load(self) -> list[Segment]:
        found: list[tuple[int, Path]] = []
        indexes: list[Path] = []
        for entry in os.scandir(self.directory):
            base = parse_segment_name(entry.name)
            if base is not None:
                found.append((base, Path(entry.path)))
            elif entry.name.endswith((INDEX_SUFFIX, INDEX_SUFFIX + ".tmp", DAMAGED_SUFFIX, DAMAGED_SUFFIX + ".tmp")):
                indexes.append(Path(entry.path))  # sidecars: kept only next to their segment
            elif entry.name.endswith(SUFFIX):
                log.warning("log %s: ignoring file %s (not <20 digits>%s)", self.name, entry.name, SUFFIX)
        found.sort()
        names = {p.name for _, p in found}
        for p in indexes:  # leftovers of a crash while saving or deleting
            if p.name.endswith(".tmp") or p.with_suffix(SUFFIX).name not in names:
                p.unlink(missing_ok=True)
        s = self.settings
        segments = [Segment.open(p, base, self._clock, s.index_interval, self._files, s.max_message_size)
                    for base, p in found]
        # A trailing empty segment carries nothing; dropping it lets the recovery
        # of the previous one truncate without leaving a hole before the new base.
        while len(segments) > 1 and segments[-1].size == 0:
            segments.pop().delete()
        if not segments:
            return [Segment.create(self.directory, 0, self._clock, s.index_interval, self._files)]
        dropped = segments[-1].recover()
        if dropped:
            log.warning("log %s: recovery dropped %d bytes from the newest segment", self.name, dropped)
        for a, b in zip(segments, segments[1:]):
            if a.end_offset < b.base_offset:
                # a sealed segment cut short: its valid messages are served, the missing bytes are a
                # damaged range whose next valid offset is the next segment's base
                log.error("log %s: segment %s ends at %d but the next starts at %d: %d bytes are missing; "
                          "they are recorded as a damaged range when the segment is verified, and fetches "
                          "there answer CORRUPT_RANGE with next offset %d", self.name, a.path.name,
                          a.end_offset, b.base_offset, b.base_offset - a.end_offset, b.base_offset)
                a.note_gap(b.base_offset - a.base_offset)
            elif a.end_offset > b.base_offset:
                log.error("log %s: segment %s ends at %d but the next starts at %d: they overlap; reads past "
                          "%d in it fail", self.name, a.path.name, a.end_offset, b.base_offset, b.base_offset)
        return segments

    # --- state ------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """Earliest retained offset."""
        return self._view.bases[0]

    @property
    def end_offset(self) -> int:
        """Offset after the last flushed (visible) message."""
        return self._view.end

    @property
    def log_end(self) -> int:
        """Offset after the last written message, flushed or not (a replica's log end offset)."""
        return self._write_end

    @property
    def size(self) -> int:
        """Bytes in all segments, unflushed included."""
        return sum(seg.size for seg in self._view.segments)

    @property
    def offline(self) -> bool:
        """True once an I/O error took the log offline (until the broker restarts)."""
        return self._offline is not None

    def segment_bases(self) -> list[int]:
        return list(self._view.bases)

    def segments(self) -> tuple[Segment, ...]:
        """An immutable snapshot of the segment list."""
        return self._view.segments

    # --- writing ----------------------------------------------------------------

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
                self._cut_back_locked(seg, offset, n, exc)
            self._write_end += n
            self._unflushed += vs.count
            if self._unflushed >= s.flush_interval_messages:
                self._flush_locked()
            return offset

    def flush(self) -> None:
        """fsync unflushed messages and make them visible.

        Raises:
            LogOfflineError: the log is offline or the fsync failed (it is offline now).
        """
        with self._lock:
            if self._offline is not None:
                raise self._offline_error()
            if not self._closed:
                self._flush_locked()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if there are unflushed messages older than the flush interval (never when offline)."""
        if self._offline is not None or self._unflushed == 0 \
                or now_ms - self._last_flush_ms < self.settings.flush_interval_ms:
            return False
        self.flush()
        return True

    def roll(self) -> None:
        """Start a new active segment (flushing the current one)."""
        with self._lock:
            self._check_open()
            if self._active.size > 0:
                self._roll_locked()

    def _flush_locked(self) -> None:
        if self._write_end != self._view.end:
            began = time.perf_counter()
            try:
                self._active.flush()
            except OSError as exc:
                raise self._go_offline_locked(f"fsync of {self._active.path} failed: {exc.strerror}") from exc
            if self.on_flush is not None:
                self.on_flush(time.perf_counter() - began)
            v = self._view
            self._view = _View(v.segments, v.bases, self._write_end)
        self._unflushed = 0
        self._last_flush_ms = self._clock.time_ms()

    def _cut_back_locked(self, seg: Segment, offset: int, n: int, exc: OSError) -> None:
        """After a failed write: truncate its partial bytes, then raise. Never returns."""
        what = f"write of {n} bytes at offset {offset} to {seg.path.name} failed: {exc.strerror}"
        try:
            seg.truncate_to(seg.size)
        except OSError as exc2:
            raise self._go_offline_locked(f"{what}, and cutting its partial bytes off failed: {exc2.strerror}") from exc2
        _write_failures.log(logging.ERROR, self.name, errno.errorcode.get(exc.errno, "write failed"),
                            "log %s: %s; the partial write was cut back, nothing was appended", self.name, what)
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(f"log {self.name}: {what} (disk full); nothing was appended") from exc
        raise LogWriteError(f"log {self.name}: {what}; nothing was appended") from exc

    def _go_offline_locked(self, why: str) -> LogOfflineError:
        """Stop serving this log after an I/O error; returns the error for the caller to raise."""
        self._offline = why
        log.error("log %s is OFFLINE: %s. Its appends and reads fail until the broker restarts; recovery "
                  "then keeps what is on disk. Offsets %d..%d (unflushed) may be lost.",
                  self.name, why, self._view.end, self._write_end)
        return self._offline_error()

    def _offline_error(self) -> LogOfflineError:
        return LogOfflineError(f"log {self.name} is offline after an I/O error ({self._offline}); "
                               "it serves again after a broker restart")

    def _roll_locked(self) -> Segment:
        self._flush_locked()
        self._active.seal()
        try:
            seg = Segment.create(self.directory, self._write_end, self._clock, self.settings.index_interval,
                                 self._files)
        except OSError as exc:  # the directory fsync failed
            raise self._go_offline_locked(f"fsync of directory {self.directory} failed: {exc.strerror}") from exc
        v = self._view
        self._view = _View(v.segments + (seg,), v.bases + (seg.base_offset,), v.end)
        self._active = seg
        log.info("log %s: rolled to new segment %s", self.name, seg.path.name)
        return seg

    # --- reading ----------------------------------------------------------------

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
        if max_bytes < 0:
            raise InvalidFetchSizeError(f"fetch size {max_bytes} is negative; it must be >= 0")
        if self._offline is not None:
            raise self._offline_error()
        while True:
            v = self._view
            if limit is not None:
                end = min(limit, self._write_end)
                top = max(end, self._write_end)
                if v.bases[0] <= offset <= top and offset >= end:
                    return LogSlice.empty(offset)
                v = _View(v.segments, v.bases, end)
            if offset < v.bases[0] or offset > v.end:
                raise OffsetOutOfRangeError(
                    f"offset {offset} of log {self.name} is out of range: valid offsets are {v.bases[0]}..{v.end}"
                )
            i = bisect_right(v.bases, offset) - 1
            seg = v.segments[i]
            if not seg.acquire():
                if self._closed:
                    raise StorageError(f"log {self.name} is closed")
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

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """Convenience: ``read`` then copy the bytes out and release."""
        with self.read(offset, max_bytes) as sl:
            return sl.read_bytes()

    def offsets_before(self, time_ms: int, max_offsets: int) -> list[int]:
        """Segment start offsets last modified at or before ``time_ms``, newest first.

        As in Kafka 0.7: candidates are every segment's base offset with its
        last-modified time, plus the end offset with "now" when the active
        segment is not empty. ``-1`` (latest) starts from the end offset,
        ``-2`` (earliest) returns the start offset.
        """
        if max_offsets <= 0:
            return []
        v = self._view
        pairs = [(seg.base_offset, seg.last_modified_ms) for seg in v.segments]
        if v.segments[-1].size > 0 and v.end > v.segments[-1].base_offset:
            pairs.append((v.end, self._clock.time_ms()))
        if time_ms == LATEST_TIME:
            start = len(pairs) - 1
        elif time_ms == EARLIEST_TIME:
            start = 0
        else:
            start = len(pairs) - 1
            while start >= 0 and pairs[start][1] > time_ms:
                start -= 1
        out: list[int] = []
        while start >= 0 and len(out) < max_offsets:
            off = pairs[start][0]
            if not out or out[-1] != off:
                out.append(off)
            start -= 1
        return out

    # --- retention --------------------------------------------------------------

    def delete_segments(self, predicate: Callable[[Segment], bool]) -> tuple[int, int]:
        """Delete the oldest segments while ``predicate`` holds; returns (segments, bytes).

        Retention's deletion: each segment is recorded (fsynced) in the partition's
        ``deleted-segments`` file before its file is unlinked (:mod:`ingest.broker.deletion_log`).

        The active segment is never deleted under an append: if every segment
        matches, the log rolls first (when the active one holds data) and the
        new empty segment stays.
        """
        with self._lock:
            if self._closed or self._offline is not None:  # recovery decides at the next start
                return 0, 0
            segs = self._view.segments
            k = 0
            while k < len(segs) and predicate(segs[k]):
                k += 1
            if k == 0:
                return 0, 0
            if k == len(segs):
                if self._active.size == 0:
                    k -= 1
                else:
                    self._roll_locked()
                if k == 0:
                    return 0, 0
            victims = self._view.segments[:k]
            v = self._view
            self._view = _View(v.segments[k:], v.bases[k:], v.end)
        freed = 0
        for seg in victims:
            freed += seg.size
            if record_deletion(self.directory, seg, self._clock.time_ms(), log_name=self.name):  # before the unlink
                seg.delete()
            else:   # unrecorded: the file stays (out of the view) for the next start's retention to record
                seg.close()
        log.info("log %s: retention deleted %d segment(s), %d bytes; start offset now %d",
                 self.name, len(victims), freed, self.start_offset)
        return len(victims), freed

    def cleanup(self, now_ms: int) -> tuple[int, int]:
        """Apply retention by age then by size; returns (segments, bytes) deleted."""
        s = self.settings
        n, b = self.delete_segments(lambda seg: now_ms - seg.last_modified_ms > s.retention_ms)
        if s.retention_size >= 0:
            excess = self.size - s.retention_size
            if excess > 0:
                budget = [excess]

                def over(seg: Segment) -> bool:
                    if budget[0] - seg.size < 0:
                        return False
                    budget[0] -= seg.size
                    return True

                n2, b2 = self.delete_segments(over)
                n, b = n + n2, b + b2
        return n, b

    # --- close ------------------------------------------------------------------

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
