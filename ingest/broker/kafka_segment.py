"""A Kafka-format segment: one ``.log`` file of record batches v2, its offset and time indexes, recovery.

Files (Kafka's names and layouts): ``<base offset, 20 digits>.log`` holds
record batches back to back exactly as produced (base offset and partition
leader epoch rewritten by the log); ``<base>.index`` (:mod:`ingest.broker.offset_index`)
and ``<base>.timeindex`` (:mod:`ingest.broker.time_index`) are saved when the
segment is sealed; ``<base>.damaged`` (:mod:`ingest.broker.kafka_damage`)
records damaged ranges.

Offsets are logical: the batch at file position ``p`` carries its base offset;
``next_offset`` is the offset after the segment's last batch. A read finds
the batch holding an offset by the offset index, then by batch headers
(:meth:`KafkaSegment.locate`): cost bounded by ``log.index.interval.bytes``.

Verification: batches appended here were validated before the append, and the
newest segment is scanned whole at start-up (:meth:`recover`: CRC of every
batch, indexes rebuilt, a torn tail truncated, damage followed by valid
batches kept and recorded). A sealed segment found with sane saved indexes is
trusted for offsets (as Kafka trusts segments below its recovery point) but its
bytes are CRC-checked before they are first served (:meth:`validate_served`,
extending ``checked_upto``); bad bytes trigger a full validating scan
(:meth:`verify`), which records the damaged ranges, never truncates, and never
strands the valid batches after them.

File descriptors and concurrency follow :mod:`ingest.broker.segment`: the
descriptor comes from the broker's :class:`~ingest.broker.open_files.OpenFiles`
pool; ``append``/``truncate``/``flush``/``seal`` run under the owning log's
lock; readers ``acquire()`` (False once deleted), read by ``pread`` or
``sendfile``, and ``release()``; the descriptor closes when the last holder
releases.
"""
from __future__ import annotations

import errno
import logging
import os
import struct
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator, NamedTuple

from ingest.broker.kafka_damage import KafkaDamage, load_damage
from ingest.broker.kafka_scan import UNBOUNDED, IndexBuilder
from ingest.broker.kafka_segment_recovery import KafkaSegmentRecovery
from ingest.broker.offset_index import SUFFIX as INDEX_SUFFIX
from ingest.broker.offset_index import OffsetIndex
from ingest.broker.open_files import UNLIMITED, FileHandle, OpenFiles
from ingest.broker.segment import storage_error
from ingest.broker.segment_damage import damaged_path
from ingest.broker.time_index import TimeIndex
from ingest.broker.time_index import SUFFIX as TIME_INDEX_SUFFIX
from ingest.clock import Clock
from ingest.errors import OffsetOutOfRangeError
from ingest.records.batch import LOG_OVERHEAD, MIN_LENGTH

log = logging.getLogger(__name__)

SUFFIX = ".log"
NAME_DIGITS = 20
WALK_CHUNK = 64 * 1024
_PREFIX = struct.Struct(">qi")                      # base_offset, batch_length
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_OFFSET = 23
_WALK_HEAD = 27                                     # base_offset .. last_offset_delta


def segment_name(base_offset: int) -> str:
    return f"{base_offset:0{NAME_DIGITS}d}{SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """Base offset of a Kafka-format segment file name, None if the name is not one."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
    if len(stem) != NAME_DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


def index_path(segment_path: Path) -> Path:
    return segment_path.with_suffix(INDEX_SUFFIX)


def time_index_path(segment_path: Path) -> Path:
    return segment_path.with_suffix(TIME_INDEX_SUFFIX)


class Located(NamedTuple):
    """The batch holding an offset: its file position, base offset, last offset and size."""

    position: int
    base_offset: int
    last_offset: int
    size: int


class KafkaSegment(KafkaSegmentRecovery):
    """One Kafka-format segment; see the module docstring for the contract."""

    def __init__(self, path: Path, base_offset: int, size: int, clock: Clock, interval: int, *,
                 files: OpenFiles = UNLIMITED, fd: int | None = None, mtime_ms: int,
                 index: OffsetIndex | None = None, time_index: TimeIndex | None = None,
                 verified: bool = False, max_batch_size: int = UNBOUNDED) -> None:
        self.path = path
        self.max_batch_size = max_batch_size
        """The largest batch a valid segment can hold by configuration (recovery's plausibility bound)."""
        self.base_offset = base_offset
        self.size = size
        self.next_offset = base_offset
        """The offset after the last batch; set by append, recovery, or the log from the next segment."""
        self.indexed = index is not None and time_index is not None
        self.index = index if index is not None else OffsetIndex(base_offset)
        self.time_index = time_index if time_index is not None else TimeIndex(base_offset)
        ts, off = self.time_index.last_entry()
        self.builder = IndexBuilder(self.index, self.time_index, interval,
                                    self.index.positions[-1] if len(self.index) else 0, ts, off)
        self.verified = verified
        self.checked_upto = size if verified else 0
        """Bytes from the file's start whose batches were CRC-checked (all of them once verified)."""
        self.damaged: list[KafkaDamage] = []
        self._known_damage: set[tuple[int, int]] = set()
        self.created_ms = clock.time_ms()
        self.last_modified_ms = mtime_ms
        self._clock = clock
        self._interval = interval
        self._file = FileHandle(path, fd)
        self._files = files
        self._refs = 1
        self._ref_lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._deleted = False

    # --- life cycle -----------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, clock: Clock, interval: int,
               files: OpenFiles = UNLIMITED, max_batch_size: int = UNBOUNDED) -> "KafkaSegment":
        """A new empty segment file (its directory fsynced).

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
        except OSError as exc:
            os.close(fd)
            with suppress(OSError):
                os.unlink(path)
            raise storage_error(f"cannot open directory {directory} to fsync the new segment", exc) from exc
        try:
            os.fsync(dir_fd)
        except OSError:
            os.close(fd)
            raise
        finally:
            os.close(dir_fd)
        seg = cls(path, base_offset, 0, clock, interval, files=files, fd=fd, mtime_ms=clock.time_ms(),
                  index=OffsetIndex(base_offset), time_index=TimeIndex(base_offset), verified=True,
                  max_batch_size=max_batch_size)
        files.adopt(seg._file)
        return seg

    @classmethod
    def open(cls, path: Path, base_offset: int, clock: Clock, interval: int,
             files: OpenFiles = UNLIMITED, max_batch_size: int = UNBOUNDED) -> "KafkaSegment":
        """A segment found on disk with its saved indexes when they are sane; its file is opened on use."""
        try:
            st = os.stat(path)
        except OSError as exc:
            raise storage_error(f"cannot open segment {path}", exc) from exc
        index = time_index = None
        if st.st_size:
            index = OffsetIndex.load(index_path(path), base_offset, st.st_size)
            time_index = TimeIndex.load(time_index_path(path), base_offset) if index is not None else None
        seg = cls(path, base_offset, st.st_size, clock, interval, files=files, mtime_ms=st.st_mtime_ns // 1_000_000,
                  index=index, time_index=time_index, verified=st.st_size == 0, max_batch_size=max_batch_size)
        seg.damaged = load_damage(path)
        seg._known_damage = {(d.start, d.end) for d in seg.damaged}
        return seg

    def acquire(self) -> bool:
        """A reader reference with the descriptor pinned open; False once deleted or closed.

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
            if exc.errno in (errno.ENOENT, errno.EBADF):
                return False
            raise storage_error(f"cannot open segment {self.path}", exc) from exc
        return True

    def release(self) -> None:
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
        """Unlink the file and its sidecars now; open readers keep reading until they release."""
        for p in (index_path(self.path), time_index_path(self.path), damaged_path(self.path), self.path):
            with suppress(FileNotFoundError):
                os.unlink(p)
        self.close()

    # --- state ----------------------------------------------------------------------------

    @property
    def index_file(self) -> Path:
        return index_path(self.path)

    @property
    def time_index_file(self) -> Path:
        return time_index_path(self.path)

    @property
    def max_timestamp(self) -> int:
        """The largest batch timestamp of the segment (NO_TIMESTAMP without one)."""
        return self.builder.max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention by time compares (Kafka >= 0.10.1): the largest record timestamp, or the
        file's last modification time when no batch has a timestamp."""
        ts = self.builder.max_timestamp
        return ts if ts > 0 else self.last_modified_ms

    # --- writing (caller holds the log lock) -----------------------------------------------

    def append(self, data, head: bytes | None, batches: list[tuple[int, int, int]], next_offset: int,
               now_ms: int) -> None:
        """Write ``data`` (whole validated batches) at the end; ``head`` replaces its first bytes when
        given (a rewritten base offset and leader epoch, so the caller's buffer needs no copy);
        ``batches`` are ``(position in data, last offset, max timestamp)`` for the indexes.

        Raises:
            OSError: the write failed; bytes after ``size`` may be in the file (the caller cuts back).
            StorageError: the file could not be opened; nothing was written.
        """
        start = self.size
        try:
            fd = self._files.pin(self._file)
        except OSError as exc:
            raise storage_error(f"cannot open segment {self.path} to append", exc) from exc
        try:
            self._file.dirty = True
            mv = memoryview(data)
            parts = [head, mv[len(head):]] if head else [mv]
            total = len(mv)
            n = os.pwritev(fd, parts, start)
            while n < total:  # a short write (the disk filling up): finish it or get its error
                rest = [bytes(head[n:]), mv[len(head):]] if head and n < len(head) else [mv[n:]]
                n += os.pwritev(fd, rest, start + n)
        finally:
            self._files.unpin(self._file)
        for pos, last, ts in batches:
            self.builder.add(start + pos, last, ts)
        self.size = start + len(mv)
        self.checked_upto = self.size if self.checked_upto == start else self.checked_upto
        self.next_offset = next_offset
        self.last_modified_ms = now_ms

    def flush(self) -> None:
        """fdatasync the file. Raises OSError (the log goes offline: a later success proves nothing)."""
        with self.pinned() as fd:
            os.fdatasync(fd)
            self._file.dirty = False

    def cut_to(self, size: int) -> None:
        """Cut the file at ``size`` bytes (after a failed write) and fsync. Raises OSError."""
        with self.pinned() as fd:
            os.ftruncate(fd, size)
            os.fsync(fd)
            self._file.dirty = False
        self.size = size

    def truncate_to_offset(self, offset: int) -> int:
        """Cut the segment before the batch holding ``offset`` (it must start a batch); the indexes
        and the largest timestamp are rebuilt from the bytes that stay. Returns bytes removed.

        Raises:
            OffsetOutOfRangeError: ``offset`` does not start a batch of this segment.
            OSError: the truncation failed.
        """
        if offset >= self.next_offset and self.size:
            return 0
        if offset == self.base_offset:
            position = 0
        else:
            loc = self.locate(offset)
            if loc is None or loc.base_offset != offset:
                raise OffsetOutOfRangeError(f"offset {offset} does not start a batch of segment {self.path.name}")
            position = loc.position
        removed = self.size - position
        with self.pinned() as fd:
            os.ftruncate(fd, position)
            os.fsync(fd)
            self._file.dirty = False
        self.size = position
        for p in (index_path(self.path), time_index_path(self.path)):
            with suppress(FileNotFoundError):
                os.unlink(p)
        self.damaged = [d for d in self.damaged if d.end <= self.size]
        self._rescan(truncate_tail=False)
        self.next_offset = offset
        return removed

    def seal(self) -> None:
        """The segment will not grow: the last time index entry, then both indexes saved (failures
        are logged: without them the segment is scanned at the next start)."""
        self.builder.seal()
        if not self.size or self.damaged or not self.verified:
            return
        try:
            self.index.save(index_path(self.path))
            self.time_index.save(time_index_path(self.path))
        except OSError as exc:
            log.warning("could not save the indexes of %s: %s; it is scanned at the next start",
                        self.path, exc.strerror)

    # --- reading ----------------------------------------------------------------------------

    def _skip_damage(self, p: int) -> int:
        for d in self.damaged:
            if d.start <= p < d.end:
                return d.end
        return p

    def walk(self, fd: int, p: int, limit: int) -> Iterator[Located]:
        """Batch headers from file position ``p`` (a batch start) up to ``limit``, damaged ranges
        stepped over."""
        buf = b""
        at = p
        while True:
            p = self._skip_damage(p)
            if p >= limit:
                return
            off = p - at
            if off < 0 or off + _WALK_HEAD > len(buf):
                buf = os.pread(fd, min(WALK_CHUNK, max(limit - p, _WALK_HEAD)), p)
                at, off = p, 0
                if len(buf) < _WALK_HEAD:
                    return
            base, length = _PREFIX.unpack_from(buf, off)
            if length < MIN_LENGTH:
                return
            last = base + _LAST_DELTA.unpack_from(buf, off + _LAST_DELTA_OFFSET)[0]
            size = LOG_OVERHEAD + length
            yield Located(p, base, last, size)
            p += size

    def locate(self, offset: int, limit: int | None = None) -> Located | None:
        """The batch holding ``offset`` (the first whose last offset is at or after it), None past the end."""
        self.ensure_indexed()
        if offset >= self.next_offset:
            return None
        _, start = self.index.lookup(offset)
        with self.pinned() as fd:
            for loc in self.walk(fd, start, self.size if limit is None else limit):
                if loc.last_offset >= offset:
                    return loc
        return None

    def end_of_batches(self, fd: int, start: int, max_bytes: int, limit: int) -> int:
        """The end position of the contiguous whole batches from ``start`` (a batch start) that fit
        ``max_bytes`` and end by ``limit``; at least the first batch however large (KIP-74), none if it
        crosses ``limit``. The offset index jumps near the cut, batch headers do the rest; a damaged
        range ends the region."""
        first = next(self.walk(fd, start, limit), None)
        if first is None or first.position != start or first.position + first.size > limit:
            return start
        end = start + first.size
        want = start + max_bytes
        if end >= want:
            return end
        p = self.index.floor_position(min(want, limit))
        if p > end:
            cut = next((d.start for d in self.damaged if end <= d.start < p), None)
            if cut is not None:
                return cut
            end = p
        for loc in self.walk(fd, end, limit):
            stop = loc.position + loc.size
            if loc.position != end or stop > want or stop > limit:
                break
            end = stop
        return end

    def find_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """``(offset, batch position)`` of the first batch at or after ``starting_offset`` whose max
        timestamp is at or after ``timestamp`` (Kafka's ``LogSegment.findOffsetByTimestamp``, batch level;
        the caller looks inside it); None when no batch of the segment qualifies."""
        self.ensure_indexed()
        # an entry's offset is the batch where its timestamp first appeared: no record at the target is skipped
        _, ts_offset = self.time_index.lookup(timestamp)
        _, start = self.index.lookup(max(ts_offset, starting_offset))
        with self.pinned() as fd:
            for loc in self.walk(fd, start, self.size):
                if loc.last_offset < starting_offset:
                    continue
                head = os.pread(fd, 8, loc.position + 35)  # max_timestamp
                if len(head) == 8 and struct.unpack(">q", head)[0] >= timestamp:
                    return loc.base_offset, loc.position
        return None

    def batch_bytes(self, position: int, size: int) -> bytes:
        with self.pinned() as fd:
            return os.pread(fd, size, position)

