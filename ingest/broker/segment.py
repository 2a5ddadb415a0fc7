"""A segment: one file of a partition log plus its base offset (its validation: ``segment_recovery.py``).

A segment file ``<log.dir>/<topic>-<partition>/<base offset, 20 digits>.kafka``
holds a message set (see :mod:`ingest.records.message`) whose first message
sits at log offset ``base``; the message at byte ``p`` of the file has offset
``base + p``.

The segment keeps a sparse in-memory index (``array('q')`` of file positions
of the first message at or after every ``log.index.interval.bytes``), filled
while appending and, for segments found on disk, by one validating scan: for
the newest segment at start-up (recovery), for older ones on first read. A
read checks that its position is a message boundary by walking message
headers forward from the nearest index entry: cost bounded by the index
interval, whatever the log size.

Damage costs only the damaged bytes: the validating scan
(:mod:`ingest.broker.segment_scan`) steps over a bad range to the next valid
message. Recovery truncates only a tail from which nothing valid follows (a
torn write); a sealed segment is never truncated. Damaged ranges
(:mod:`ingest.broker.segment_damage`) are kept in memory (reads at or inside one raise
:class:`~ingest.errors.CorruptRangeError` naming the next valid offset),
logged at ERROR once, and saved in a sidecar ``<base>.damaged`` (JSON lines,
see docs/log-format.md) so that they survive restarts.

File descriptors: a segment does not hold its file open. Its descriptor is
opened on use and kept in the broker's bounded pool of open files
(:mod:`ingest.broker.open_files`, ``log.max.open.files``), which closes the
least recently used idle descriptors; a descriptor stays open while it is
pinned (by a reader's reference or a write in progress) and while the file has
unflushed bytes.

Concurrency contract: ``append``/``truncate_to``/``flush`` are called by the
owning :class:`~ingest.broker.log.Log` under its lock. Readers call
``acquire()`` (False once the segment is deleted or closed; it pins the
descriptor open), then read by ``pread`` and ``release()``; the file
descriptor is closed for good only when the last holder releases, so a reader
keeps its bytes after the file was unlinked.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
from array import array
from bisect import bisect_right
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from ingest.broker.open_files import UNLIMITED, FileHandle, OpenFiles
from ingest.broker.segment_damage import Damage, damaged_path, load_damaged, save_damaged
from ingest.broker.segment_index import delete_index, load_index, save_index
from ingest.broker.segment_recovery import SegmentRecovery
from ingest.broker.segment_scan import UNLIMITED_SIZE
from ingest.clock import Clock
from ingest.errors import DiskFullError, StorageError
from ingest.records.message_set import scan

log = logging.getLogger(__name__)

SUFFIX = ".kafka"
NAME_DIGITS = 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:0{NAME_DIGITS}d}{SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """Base offset of a segment file name, or None if the name is not one."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
    if len(stem) != NAME_DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


class Segment(SegmentRecovery):
    """One segment file; see the module docstring for the concurrency contract."""

    def __init__(self, path: Path, base_offset: int, size: int, clock: Clock, index_interval: int,
                 *, indexed: bool, mtime_ms: int, index: array | None = None,
                 files: OpenFiles = UNLIMITED, fd: int | None = None,
                 max_message_size: int = UNLIMITED_SIZE) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = size
        self.index = index if index is not None else array("q")
        self.indexed = indexed or index is not None
        self.verified = indexed
        """True once every message was CRC-checked (appended here, recovered, or verified)."""
        self.damaged: list[Damage] = []
        """Damaged ranges (file positions, sorted), from the last validating scan or a read-time check."""
        self._known_damage: set[tuple[int, int]] = set()  # recorded in the sidecar: logged at ERROR before
        self.extent: int | None = None
        """File position where the next segment starts, when that lies past this file's end (a sealed
        segment cut short: :meth:`note_gap`); None otherwise."""
        self.created_ms = clock.time_ms()
        self.last_modified_ms = mtime_ms
        self._file = FileHandle(path, fd)
        self._files = files
        self._clock = clock
        self._interval = index_interval
        self._max_message_size = max_message_size  # what a plausible header may claim (next_valid)
        self._refs = 1  # the owning log's reference
        self._ref_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._deleted = False

    # --- life cycle -----------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, clock: Clock, index_interval: int,
               files: OpenFiles = UNLIMITED) -> "Segment":
        """A new empty segment file (its directory fsynced); its descriptor joins ``files``.

        Raises:
            StorageError: the file cannot be created (DiskFullError on ENOSPC).
            OSError: the directory fsync failed (the caller takes the log offline).
        """
        path = directory / segment_name(base_offset)
        try:
            fd = files.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise storage_error(f"cannot create segment {path}", exc) from exc
        try:
            dir_fd = files.open(directory, os.O_RDONLY)
        except OSError as exc:  # no descriptor left: undo, so that a later roll can create it again
            os.close(fd)
            with suppress(OSError):  # a leftover empty file is dropped by recovery at the next start
                os.unlink(path)
            raise storage_error(f"cannot open directory {directory} to fsync the new segment", exc) from exc
        try:
            os.fsync(dir_fd)
        except OSError:  # a failed fsync: the caller takes the log offline
            os.close(fd)
            raise
        finally:
            os.close(dir_fd)
        seg = cls(path, base_offset, 0, clock, index_interval, indexed=True, mtime_ms=clock.time_ms(),
                  files=files, fd=fd)
        files.adopt(seg._file)
        return seg

    @classmethod
    def open(cls, path: Path, base_offset: int, clock: Clock, index_interval: int,
             files: OpenFiles = UNLIMITED, max_message_size: int = UNLIMITED_SIZE) -> "Segment":
        """A segment found on disk; its file is not opened until it is used."""
        try:
            st = os.stat(path)
        except OSError as exc:
            raise storage_error(f"cannot open segment {path}", exc) from exc
        saved = load_index(path, st.st_size, index_interval) if st.st_size else None
        seg = cls(path, base_offset, st.st_size, clock, index_interval, indexed=st.st_size == 0,
                  mtime_ms=st.st_mtime_ns // 1_000_000, index=saved, files=files,
                  max_message_size=max_message_size)
        seg._known_damage = {(d.start, d.end) for d in load_damaged(path, base_offset)}
        return seg

    def note_gap(self, extent: int) -> None:
        """The next segment starts at file position ``extent``, past this file's end: the bytes
        in between are lost. The next validating scan records ``[last valid message, extent)``
        as one damaged range, so reads there answer CORRUPT_RANGE with the next segment's base
        as the next valid offset; the saved index is not trusted (the file changed after it)."""
        self.extent = extent
        self.indexed = self.verified = False

    @property
    def corrupt_at(self) -> int | None:
        """File position of the first damaged byte, None while no damage is known."""
        return self.damaged[0].start if self.damaged else None

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    def acquire(self) -> bool:
        """Take a reader reference, its descriptor pinned open; False if the segment is deleted or closed.

        Raises:
            StorageError: the file cannot be opened (no descriptor left).
        """
        with self._ref_lock:
            if self._refs <= 0:
                return False
            self._refs += 1
        try:
            self._files.pin(self._file)
        except OSError as exc:
            self._drop_ref()
            if exc.errno in (errno.ENOENT, errno.EBADF):  # deleted after the reader took its view
                return False
            raise storage_error(f"cannot open segment {self.path}", exc) from exc
        return True

    def release(self) -> None:
        """Drop a reader reference taken by :meth:`acquire`."""
        self._files.unpin(self._file)
        self._drop_ref()

    def _drop_ref(self) -> None:
        with self._ref_lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._files.close(self._file)

    def fileno(self) -> int:
        """The open descriptor; only while the caller holds a reference from :meth:`acquire`."""
        fd = self._file.fd
        if fd is None:
            raise ValueError(f"segment {self.path.name} is not pinned open")
        return fd

    @contextmanager
    def _pinned(self) -> Iterator[int]:
        fd = self._files.pin(self._file)
        try:
            yield fd
        finally:
            self._files.unpin(self._file)

    def close(self) -> None:
        """Drop the owner's reference (fd closes once readers are done)."""
        if not self._deleted:
            self._deleted = True
            self._drop_ref()

    def delete(self) -> None:
        """Unlink the file now; open readers keep reading it until they release."""
        delete_index(self.path)
        damaged_path(self.path).unlink(missing_ok=True)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.close()

    def reopen_for_append(self) -> None:
        """After :meth:`truncate_to` of a replica's log: this segment becomes the active one again,
        so its saved index and the damaged ranges past its new end are dropped."""
        delete_index(self.path)
        self.extent = None
        kept = [d for d in self.damaged if d.end <= self.size]
        if len(kept) != len(self.damaged):
            self.damaged = kept
            damaged_path(self.path).unlink(missing_ok=True)
            if kept:
                save_damaged(self.path, self.base_offset, kept, self._clock.time_ms())
            self._known_damage = {(d.start, d.end) for d in kept}

    def repair(self, pos: int, data: bytes) -> bool:
        """Overwrite damaged bytes at file position ``pos`` with a healthy replica's copy of them
        (the same offsets hold the same bytes on every replica; the caller checked that ``data`` is
        whole valid messages), fsync, read them back, and drop the damaged ranges they cover. Only
        the rewritten bytes are checked again: a sealed segment is not rescanned under the log's
        lock. True when no damaged range is left. Raises OSError."""
        end = pos + len(data)
        with self._index_lock:
            with self._pinned() as fd:
                os.pwrite(fd, data, pos)
                os.fsync(fd)
                landed = os.pread(fd, len(data), pos)
            if landed != data or scan(landed).end != len(data):
                raise OSError(errno.EIO, f"the repaired bytes at {self.base_offset + pos} did not read back")
            kept = [d for d in self.damaged if not (pos <= d.start and d.end <= end)]
            if len(kept) != len(self.damaged):
                self.damaged = kept
                save_damaged(self.path, self.base_offset, kept, self._clock.time_ms())
                self._known_damage = {(d.start, d.end) for d in kept}
            return not self.damaged

    def seal(self) -> None:
        """Save the index of a segment that will not grow any more (after roll)."""
        if self.verified and not self.damaged and self.size:
            save_index(self.path, self.index, self.size, self._interval)

    # --- writing (caller holds the log lock) ------------------------------------

    def append(self, data: bytes | memoryview, index_positions: list[int], now_ms: int) -> None:
        """Write validated bytes at the end; ``index_positions`` are file positions.

        Raises:
            OSError: the write failed (ENOSPC, EIO). ``size`` still ends at the
                last whole set, but part of ``data`` may be in the file after it:
                the caller must ``truncate_to(size)`` or stop using the segment.
            StorageError: the file could not be opened (no descriptor left);
                nothing was written.
        """
        start = self.size
        try:
            fd = self._files.pin(self._file)
        except OSError as exc:
            raise storage_error(f"cannot open segment {self.path} to append", exc) from exc
        try:
            self._file.dirty = True  # kept open until flushed: see open_files
            n = os.pwrite(fd, data, start)
            while n < len(data):  # a short write (the disk filling up): finish it or get its error
                n += os.pwrite(fd, memoryview(data)[n:], start + n)
        finally:
            self._files.unpin(self._file)
        if index_positions:
            self.index.extend(index_positions)
        self.size = start + len(data)
        self.last_modified_ms = now_ms

    def next_index_mark(self) -> int:
        return self.index[-1] + self._interval if self.index else 0

    def flush(self) -> None:
        """fdatasync the file. Raises OSError; after a failure the kernel may have dropped the
        unwritten pages, so a later successful call proves nothing (the log goes offline)."""
        with self._pinned() as fd:
            os.fdatasync(fd)
            self._file.dirty = False

    def truncate_to(self, size: int) -> None:
        """Cut the file at ``size`` and fsync it. Raises OSError."""
        with self._pinned() as fd:
            os.ftruncate(fd, size)
            os.fsync(fd)
            self._file.dirty = False
        self.size = size
        cut = bisect_right(self.index, size - 1)
        del self.index[cut:]


class LogSlice:
    """Whole messages of one segment from ``offset`` (the last may be cut off).

    ``fileno()`` and ``position`` feed ``os.sendfile``; they stay valid until
    :meth:`release`, even if retention deletes the segment meanwhile. Use as a
    context manager or call ``release()`` exactly once.
    """

    __slots__ = ("offset", "position", "length", "_segment")

    def __init__(self, segment: Segment | None, offset: int, position: int, length: int) -> None:
        self._segment = segment
        self.offset = offset
        self.position = position
        self.length = length

    @classmethod
    def empty(cls, offset: int) -> "LogSlice":
        """A slice of no bytes at ``offset`` (a read at a limit below the log end)."""
        return cls(None, offset, 0, 0)

    def fileno(self) -> int:
        if self._segment is None:
            raise ValueError("LogSlice already released")
        return self._segment.fileno()

    @property
    def next_offset(self) -> int:
        """Offset right after the slice's bytes (a boundary only if nothing was cut off)."""
        return self.offset + self.length

    def read_bytes(self) -> bytes:
        if self.length == 0:
            return b""
        if self._segment is None:
            raise ValueError("LogSlice already released")
        return os.pread(self._segment.fileno(), self.length, self.position)

    def release(self) -> None:
        seg, self._segment = self._segment, None
        if seg is not None:
            seg.release()

    def __enter__(self) -> "LogSlice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # A forgotten release must not leak the fd of a deleted segment forever.
        if getattr(self, "_segment", None) is not None:
            self.release()


def storage_error(what: str, exc: OSError) -> StorageError:
    """``what`` failed with ``exc``: DiskFullError on ENOSPC, else StorageError (caller chains ``exc``)."""
    if exc.errno == errno.ENOSPC:
        return DiskFullError(f"{what}: {exc.strerror} (disk full)")
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return StorageError(f"{what}: {exc.strerror}; lower log.max.open.files or raise the descriptor limit")
    return StorageError(f"{what}: {exc.strerror}")


