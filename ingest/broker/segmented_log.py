"""What both log formats share: the ordered segments behind a copy-on-write view, flush, roll, offline, close.

A partition log is the sorted list of its segments (base offsets kept in memory, binary search to
find the segment of an offset); appends go to the last (active) segment. :class:`SegmentedLog` is
the base of :class:`~ingest.broker.log.Log` (Kafka 0.7's format: offsets are byte positions, a
message is visible once flushed) and :class:`~ingest.broker.kafka_log.KafkaLog` (Kafka's format:
offsets number records, a batch is visible once appended). Each format adds its append, its read and
its recovery; this class keeps what is the same in both: opening the directory (segment files by
name, leftover sidecars removed, trailing empty segments dropped), the state callers read, flush,
roll and close, the rules after an I/O error, the reader's side of the view and the 0.7 OFFSETS
answer. Retention (:mod:`ingest.broker.log_retention`) and the replica operations
(:mod:`ingest.broker.log_replica`) are mixins over the same state.

Durability: a failed fsync is never retried. After one the kernel may have dropped the unwritten
pages while a later fsync succeeds, so the log goes *offline* (as Kafka 0.7 halts the broker on an
I/O error during a flush, but only this partition): it logs one ERROR line and refuses appends,
flushes, rolls and reads with :class:`~ingest.errors.LogOfflineError` until the broker restarts and
recovery decides what is on disk. A failed write is cut back to the append's start (nothing is
appended, no hole is left for the next append to cover); if even that fails, the log goes offline
too. A failed write is logged at ERROR once a minute per log and cause, the repeats counted (a full
disk refuses every write, and its log lines would land on the same disk).

Segment files are not held open: their descriptors come from an
:class:`~ingest.broker.open_files.OpenFiles` pool (the broker's, shared by every log and bounded by
``log.max.open.files``; unbounded for a log used on its own).

Concurrency contract: writers (append, flush, roll, retention, truncation, close) serialise on the
log's lock and publish an immutable :class:`LogView` (segments, their base offsets, the visible end)
with a single attribute store (copy-on-write). Readers take no lock: they read one view, then take a
reference on the segment they read (:meth:`~ingest.broker.segment_file.SegmentFile.acquire`). A
deletion publishes a view without the segment before unlinking it, and a reader that lost the race
retries on the new view (:meth:`SegmentedLog._acquire`).
"""
from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path
from threading import Lock
from typing import Callable, ClassVar, NamedTuple

from ingest.broker.open_files import UNLIMITED, OpenFiles
from ingest.broker.segment_file import SegmentFile, storage_error
from ingest.clock import Clock
from ingest.errors import (DiskFullError, InvalidFetchSizeError, LogOfflineError, LogWriteError,
                           OffsetOutOfRangeError, StorageError)
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_write_failures = RateLimitedLog(log, interval_s=60.0)
"""A full disk refuses every write: logged once a minute per log and cause, the repeats counted."""

LATEST_TIME = -1
EARLIEST_TIME = -2


class LogView(NamedTuple):
    """What readers see of a log, published whole by its writers."""

    segments: tuple
    bases: tuple[int, ...]
    end: int
    """The visible end offset: the 0.7 log's flushed end, the Kafka format's log end."""
    end_position: int = 0
    """The position of ``end`` in the last segment's file, where the Kafka format's reads stop (its
    offsets are not positions); the 0.7 log does not read it."""


class SegmentedLog:
    """One topic-partition's segments; see the module docstring for the contract."""

    SEGMENT: ClassVar[type[SegmentFile]]
    """The format's segment class (its file suffix and sidecars)."""

    on_flush: Callable[[float], None] | None = None
    """Called (under the log's lock) with the seconds each fsync took; set by a manager for metrics."""

    def __init__(self, directory: Path, settings, clock: Clock, *, name: str | None = None,
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
        self._offline: str | None = None  # why the log stopped serving; None while it serves
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            segments = self._load()
        except OSError as exc:  # e.g. a failed directory fsync while creating the first segment
            raise storage_error(f"cannot open log {self.name} in {self.directory}", exc) from exc
        self._active = segments[-1]
        self._write_end = self._active.next_offset
        self._unflushed = 0
        self._last_flush_ms = clock.time_ms()
        self._view = LogView(tuple(segments), tuple(s.base_offset for s in segments), self._write_end,
                             self._active.size)

    # --- what a format provides -------------------------------------------------------------

    def _open_segment(self, path: Path, base_offset: int):
        """The format's segment found on disk at ``path``."""
        raise NotImplementedError

    def _create_segment(self, base_offset: int):
        """A new empty segment of the format. Raises StorageError, or OSError when the directory fsync failed."""
        raise NotImplementedError

    def _recover(self, segments: list) -> None:
        """Recover the segments found on disk, oldest first (the newest one holds the last appends)."""
        raise NotImplementedError

    def _unsynced_from(self) -> int:
        """The first offset written since the last fsync (``log_end`` when there is none); caller holds the lock."""
        raise NotImplementedError

    def _synced_locked(self) -> None:
        """Everything written is fsynced now: the 0.7 log makes it visible (the Kafka format already did)."""

    def _flush_interval_ms(self) -> int:
        """The format's setting: flush when unflushed messages are older than this."""
        raise NotImplementedError

    # --- start-up ---------------------------------------------------------------------------

    def _load(self) -> list:
        cls = self.SEGMENT
        sidecars = cls.SIDECARS + tuple(s + ".tmp" for s in cls.SIDECARS)
        found: list[tuple[int, Path]] = []
        leftovers: list[Path] = []
        for entry in os.scandir(self.directory):
            base = cls.parse_name(entry.name)
            if base is not None:
                found.append((base, Path(entry.path)))
            elif entry.name.endswith(sidecars):
                leftovers.append(Path(entry.path))  # sidecars: kept only next to their segment
            elif entry.name.endswith(cls.SUFFIX):
                log.warning("log %s: ignoring file %s (not <20 digits>%s)", self.name, entry.name, cls.SUFFIX)
        found.sort()
        names = {p.name for _, p in found}
        for p in leftovers:  # leftovers of a crash while saving or deleting
            if p.name.endswith(".tmp") or p.with_suffix(cls.SUFFIX).name not in names:
                p.unlink(missing_ok=True)
        segments = [self._open_segment(p, base) for base, p in found]
        # A trailing empty segment carries nothing; dropping it lets the recovery
        # of the previous one truncate without leaving a hole before the new base.
        while len(segments) > 1 and segments[-1].size == 0:
            segments.pop().delete()
        if not segments:
            return [self._create_segment(0)]
        self._recover(segments)
        return segments

    # --- state ------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The earliest retained offset: the first segment's base offset."""
        return self._view.bases[0]

    @property
    def end_offset(self) -> int:
        """The offset after the last visible message: the last flushed one in the 0.7 log, the last
        appended one in the Kafka format (Kafka's log end offset)."""
        return self._view.end

    @property
    def log_end(self) -> int:
        """The offset after the last written message, flushed or not (a replica's log end offset)."""
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

    def segments(self) -> tuple:
        """An immutable snapshot of the segment list."""
        return self._view.segments

    def damaged_ranges(self) -> list[tuple[int, int]]:
        """``(first offset, next valid offset)`` of every damaged range of the log (docs/log-format.md)."""
        segs = self._view.segments
        return [r for i, seg in enumerate(segs)
                for r in seg.damaged_offsets(segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset)]

    # --- flush, roll ------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync what was written since the last flush (in the 0.7 log: and make it visible).

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
                or now_ms - self._last_flush_ms < self._flush_interval_ms():
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
        if self._unsynced_from() != self._write_end:
            began = time.perf_counter()
            try:
                self._active.flush()
            except OSError as exc:
                raise self._go_offline_locked(f"fsync of {self._active.path} failed: {exc.strerror}") from exc
            if self.on_flush is not None:
                self.on_flush(time.perf_counter() - began)
            self._synced_locked()
        self._unflushed = 0
        self._last_flush_ms = self._clock.time_ms()

    def _roll_locked(self):
        self._flush_locked()
        self._active.seal()
        try:
            seg = self._create_segment(self._write_end)
        except OSError as exc:  # the directory fsync failed
            raise self._go_offline_locked(f"fsync of directory {self.directory} failed: {exc.strerror}") from exc
        v = self._view
        self._view = LogView(v.segments + (seg,), v.bases + (seg.base_offset,), v.end)
        self._active = seg
        log.info("log %s: rolled to new segment %s", self.name, seg.path.name)
        return seg

    # --- after an I/O error -----------------------------------------------------------------

    def _cut_back_locked(self, seg: SegmentFile, n: int, exc: OSError) -> None:
        """After a failed write of ``n`` bytes to ``seg``: cut its partial bytes off, then raise. Never returns."""
        what = f"write of {n} bytes at offset {self._write_end} to {seg.path.name} failed: {exc.strerror}"
        try:
            seg.cut_to(seg.size)
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
                  self.name, why, self._unsynced_from(), self._write_end)
        return self._offline_error()

    def _offline_error(self) -> LogOfflineError:
        return LogOfflineError(f"log {self.name} is offline after an I/O error ({self._offline}); "
                               "it serves again after a broker restart")

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.name} is closed")
        if self._offline is not None:
            raise self._offline_error()

    # --- reading ----------------------------------------------------------------------------

    def _check_read(self, max_bytes: int) -> None:
        """Refuse a read of a negative size, or from an offline log."""
        if max_bytes < 0:
            raise InvalidFetchSizeError(f"fetch size {max_bytes} is negative; it must be >= 0")
        if self._offline is not None:
            raise self._offline_error()

    def _out_of_range(self, offset: int, v: LogView) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(f"offset {offset} of log {self.name} is out of range: valid offsets "
                                     f"are {v.bases[0]}..{v.end}")

    def _acquire(self, seg: SegmentFile) -> bool:
        """A reader's reference on ``seg`` of the view it took; False when retention deleted the
        segment meanwhile: the reader takes the new view and looks again.

        Raises:
            StorageError: the log is closed.
        """
        if seg.acquire():
            return True
        if self._closed:
            raise StorageError(f"log {self.name} is closed")
        return False

    def read_bytes(self, offset: int, max_bytes: int, limit: int | None = None) -> bytes:
        """Convenience: ``read`` then copy the bytes out and release."""
        with self.read(offset, max_bytes, limit) as sl:
            return sl.read_bytes()

    def offsets_before(self, time_ms: int, max_offsets: int) -> list[int]:
        """The 0.7 OFFSETS answer (and Kafka's ListOffsets v0): segment start offsets last modified at
        or before ``time_ms``, newest first.

        As in Kafka 0.7: candidates are every segment's base offset with its last-modified time,
        plus the end offset with "now" when the active segment is not empty. ``-1`` (latest) starts
        from the end offset, ``-2`` (earliest) returns the start offset.
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

    # --- close ------------------------------------------------------------------------------

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
