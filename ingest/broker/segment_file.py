"""A segment's file, in either log format: its name, creation, descriptor, references, writes and deletion.

A segment is a file plus its base offset. The file is named after the base offset, 20 digits, and
the format's suffix (``.kafka`` for the 0.7 log, ``.log`` for the Kafka-format log); its sidecars
(saved indexes, damaged ranges) share the stem and go with it. :class:`SegmentFile` is the base of
:class:`~ingest.broker.segment.Segment` and :class:`~ingest.broker.kafka_segment.KafkaSegment`,
which add what their format stores in the file; :class:`SegmentSlice` is a reader's region of it.

File descriptors: a segment does not hold its file open. Its descriptor is opened on use and kept
in the broker's bounded pool of open files (:mod:`ingest.broker.open_files`,
``log.max.open.files``), which closes the least recently used idle descriptors; a descriptor stays
open while it is pinned (by a reader's reference or a write in progress) and while the file has
unflushed bytes.

Concurrency contract: writes (:meth:`SegmentFile.write`, :meth:`~SegmentFile.cut_to`,
:meth:`~SegmentFile.flush`) are called by the owning log under its lock. Readers call
:meth:`~SegmentFile.acquire` (False once the segment is deleted or closed; it pins the descriptor
open), read by ``pread`` or ``sendfile`` and :meth:`~SegmentFile.release`; the descriptor is
closed for good only when the last holder releases, so a reader keeps its bytes after retention
unlinked the file.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import ClassVar, Iterator

from ingest.broker.open_files import UNLIMITED, FileHandle, OpenFiles
from ingest.clock import Clock
from ingest.errors import DiskFullError, StorageError

log = logging.getLogger(__name__)

NAME_DIGITS = 20


def storage_error(what: str, exc: OSError) -> StorageError:
    """``what`` failed with ``exc``: DiskFullError on ENOSPC, else StorageError (caller chains ``exc``)."""
    if exc.errno == errno.ENOSPC:
        return DiskFullError(f"{what}: {exc.strerror} (disk full)")
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return StorageError(f"{what}: {exc.strerror}; lower log.max.open.files or raise the descriptor limit")
    return StorageError(f"{what}: {exc.strerror}")


def file_name(base_offset: int, suffix: str) -> str:
    """``<base offset, 20 digits><suffix>``: a directory listing sorts segments by offset."""
    return f"{base_offset:0{NAME_DIGITS}d}{suffix}"


def parse_file_name(name: str, suffix: str) -> int | None:
    """Base offset of a segment file name with ``suffix``, None if the name is not one."""
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    if len(stem) != NAME_DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


def read_sidecar(path: Path, what: str) -> bytes | None:
    """The bytes of a sidecar file (a saved index, the damaged ranges); None when it is absent or
    cannot be read (logged as ``what``: the segment is scanned instead)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s %s: %s; the segment is scanned", what, path, exc.strerror)
        return None


def write_sidecar(path: Path, data: bytes | bytearray) -> None:
    """Write a sidecar file atomically: ``<name>.tmp``, fsync, rename over ``path``. Raises OSError."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class SegmentFile:
    """One segment file's life cycle; see the module docstring for the concurrency contract."""

    SUFFIX: ClassVar[str]
    """The segment file's suffix."""
    SIDECARS: ClassVar[tuple[str, ...]]
    """Suffixes of the files kept next to the segment (same stem), deleted with it."""

    def __init__(self, path: Path, base_offset: int, size: int, clock: Clock, *, mtime_ms: int,
                 files: OpenFiles = UNLIMITED, fd: int | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = size
        self.created_ms = clock.time_ms()
        self.last_modified_ms = mtime_ms
        self._clock = clock
        self._file = FileHandle(path, fd)
        self._files = files
        self._refs = 1  # the owning log's reference
        self._ref_lock = threading.Lock()
        self._deleted = False

    @classmethod
    def name(cls, base_offset: int) -> str:
        return file_name(base_offset, cls.SUFFIX)

    @classmethod
    def parse_name(cls, name: str) -> int | None:
        return parse_file_name(name, cls.SUFFIX)

    @classmethod
    def _create(cls, directory: Path, base_offset: int, clock: Clock, files: OpenFiles, *args, **kwargs):
        """A new empty segment file, its directory fsynced, as ``cls(path, base_offset, 0, clock, *args,
        **kwargs)``; its open descriptor joins ``files``.

        Raises:
            StorageError: the file cannot be created (DiskFullError on ENOSPC).
            OSError: the directory fsync failed (the caller takes the log offline).
        """
        path = directory / cls.name(base_offset)
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
        seg = cls(path, base_offset, 0, clock, *args, mtime_ms=clock.time_ms(), files=files, fd=fd, **kwargs)
        files.adopt(seg._file)
        return seg

    @staticmethod
    def _stat(path: Path) -> os.stat_result:
        """The stat of a segment found on disk. Raises StorageError."""
        try:
            return os.stat(path)
        except OSError as exc:
            raise storage_error(f"cannot open segment {path}", exc) from exc

    # --- references -----------------------------------------------------------------------

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
    def pinned(self) -> Iterator[int]:
        """The descriptor, pinned open for the block. Raises OSError when it cannot be opened."""
        fd = self._files.pin(self._file)
        try:
            yield fd
        finally:
            self._files.unpin(self._file)

    def close(self) -> None:
        """Drop the owner's reference (the descriptor closes once readers are done)."""
        if not self._deleted:
            self._deleted = True
            self._drop_ref()

    def delete(self) -> None:
        """Unlink the file and its sidecars now; open readers keep reading it until they release."""
        for suffix in self.SIDECARS:
            with suppress(FileNotFoundError):
                os.unlink(self.path.with_suffix(suffix))
        with suppress(FileNotFoundError):
            os.unlink(self.path)
        self.close()

    # --- writing (caller holds the log lock) ------------------------------------------------

    def write(self, data, head: bytes | None = None) -> int:
        """Write ``data`` at the end of the file (``size`` is left to the caller); ``head`` replaces its
        first bytes when given (so that the caller's buffer needs no copy). Returns the length written.

        Raises:
            OSError: the write failed (ENOSPC, EIO); bytes after ``size`` may be in the file: the
                caller must :meth:`cut_to` ``size`` or stop using the segment.
            StorageError: the file could not be opened (no descriptor left); nothing was written.
        """
        start = self.size
        try:
            fd = self._files.pin(self._file)
        except OSError as exc:
            raise storage_error(f"cannot open segment {self.path} to append", exc) from exc
        try:
            self._file.dirty = True  # kept open until flushed: see open_files
            total = len(data)
            if head:
                n = os.pwritev(fd, [head, memoryview(data)[len(head):]], start)
            else:  # the 0.7 log's every append: no memoryview to make
                n = os.pwrite(fd, data, start)
            while n < total:  # a short write (the disk filling up): finish it or get its error
                mv = memoryview(data)
                rest = [bytes(head[n:]), mv[len(head):]] if head and n < len(head) else [mv[n:]]
                n += os.pwritev(fd, rest, start + n)
        finally:
            self._files.unpin(self._file)
        return total

    def flush(self) -> None:
        """fdatasync the file. Raises OSError; after a failure the kernel may have dropped the
        unwritten pages, so a later successful call proves nothing (the log goes offline)."""
        with self.pinned() as fd:
            os.fdatasync(fd)
            self._file.dirty = False

    def cut_to(self, size: int) -> None:
        """Cut the file at ``size`` bytes and fsync it. Raises OSError."""
        with self.pinned() as fd:
            os.ftruncate(fd, size)
            os.fsync(fd)
            self._file.dirty = False
        self.size = size

    @property
    def retention_time_ms(self) -> int:
        """What retention by time compares: the file's last modification (Kafka 0.7's rule)."""
        return self.last_modified_ms


class SegmentSlice:
    """A region of one segment file for a read: ``fileno()``, ``position`` and ``length`` feed
    ``os.sendfile``; they stay valid until :meth:`release`, also when retention deletes the segment
    meanwhile (the slice holds a reference). Use as a context manager or call ``release()`` exactly once.
    """

    __slots__ = ("offset", "position", "length", "_segment")

    def __init__(self, segment: SegmentFile | None, offset: int, position: int, length: int) -> None:
        self._segment = segment
        self.offset = offset
        self.position = position
        self.length = length

    def fileno(self) -> int:
        if self._segment is None:
            raise ValueError(f"{type(self).__name__} already released (or empty)")
        return self._segment.fileno()

    def read_bytes(self) -> bytes:
        if self.length == 0:
            return b""
        if self._segment is None:
            raise ValueError(f"{type(self).__name__} already released")
        return os.pread(self._segment.fileno(), self.length, self.position)

    def release(self) -> None:
        seg, self._segment = self._segment, None
        if seg is not None:
            seg.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # A forgotten release must not leak the descriptor of a deleted segment forever.
        if getattr(self, "_segment", None) is not None:
            self.release()
