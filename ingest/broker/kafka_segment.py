"""A Kafka-format segment: one ``.log`` file of record batches v2, its offset and time indexes, recovery.

Files (Kafka's names and layouts): ``<base offset, 20 digits>.log`` holds
record batches back to back exactly as produced (base offset and partition
leader epoch rewritten by the log); ``<base>.index`` (:mod:`ingest.broker.offset_index`)
and ``<base>.timeindex`` (:mod:`ingest.broker.time_index`) are saved when the
segment is sealed; ``<base>.damaged`` (:mod:`ingest.broker.segment_damage`)
records damaged ranges; ``<base>.snapshot`` (:mod:`ingest.broker.producer_state`)
holds the idempotent producers' state before the segment's first batch.

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

The file's life cycle and its concurrency contract are
:class:`~ingest.broker.segment_file.SegmentFile`'s: the descriptor comes from
the broker's :class:`~ingest.broker.open_files.OpenFiles` pool;
``append``/``truncate``/``flush``/``seal`` run under the owning log's lock;
readers ``acquire()`` (False once deleted), read by ``pread`` or ``sendfile``,
and ``release()``; the descriptor closes when the last holder releases.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
from contextlib import suppress
from pathlib import Path
from typing import Iterator, NamedTuple

from ingest.broker.kafka_scan import UNBOUNDED, IndexBuilder
from ingest.broker.kafka_segment_recovery import KafkaSegmentRecovery
from ingest.broker.offset_index import SUFFIX as INDEX_SUFFIX
from ingest.broker.offset_index import OffsetIndex
from ingest.broker.open_files import UNLIMITED, OpenFiles
from ingest.broker.producer_state import SNAPSHOT_SUFFIX
from ingest.broker.segment_damage import DAMAGED_SUFFIX, KafkaDamage, load_kafka_damage
from ingest.broker.segment_file import SegmentFile, file_name, parse_file_name
from ingest.broker.time_index import SUFFIX as TIME_INDEX_SUFFIX
from ingest.broker.time_index import TimeIndex
from ingest.clock import Clock
from ingest.errors import OffsetOutOfRangeError
from ingest.records.batch import LOG_OVERHEAD, MIN_LENGTH

log = logging.getLogger(__name__)

SUFFIX = ".log"
WALK_CHUNK = 64 * 1024
_PREFIX = struct.Struct(">qi")                      # base_offset, batch_length
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_OFFSET = 23
_WALK_HEAD = 27                                     # base_offset .. last_offset_delta


def segment_name(base_offset: int) -> str:
    return file_name(base_offset, SUFFIX)


def parse_segment_name(name: str) -> int | None:
    """Base offset of a Kafka-format segment file name, None if the name is not one."""
    return parse_file_name(name, SUFFIX)


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


class KafkaSegment(KafkaSegmentRecovery, SegmentFile):
    """One Kafka-format segment; see the module docstring for the contract."""

    SUFFIX = SUFFIX
    SIDECARS = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, DAMAGED_SUFFIX, SNAPSHOT_SUFFIX)

    def __init__(self, path: Path, base_offset: int, size: int, clock: Clock, interval: int, *,
                 files: OpenFiles = UNLIMITED, fd: int | None = None, mtime_ms: int,
                 index: OffsetIndex | None = None, time_index: TimeIndex | None = None,
                 verified: bool = False, max_batch_size: int = UNBOUNDED) -> None:
        super().__init__(path, base_offset, size, clock, mtime_ms=mtime_ms, files=files, fd=fd)
        self.max_batch_size = max_batch_size
        """The largest batch a valid segment can hold by configuration (recovery's plausibility bound)."""
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
        self._interval = interval
        self._scan_lock = threading.Lock()

    # --- life cycle -----------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, clock: Clock, interval: int,
               files: OpenFiles = UNLIMITED, max_batch_size: int = UNBOUNDED) -> "KafkaSegment":
        """A new empty segment file (:meth:`~ingest.broker.segment_file.SegmentFile._create`)."""
        return cls._create(directory, base_offset, clock, files, interval, index=OffsetIndex(base_offset),
                           time_index=TimeIndex(base_offset), verified=True, max_batch_size=max_batch_size)

    @classmethod
    def open(cls, path: Path, base_offset: int, clock: Clock, interval: int,
             files: OpenFiles = UNLIMITED, max_batch_size: int = UNBOUNDED) -> "KafkaSegment":
        """A segment found on disk with its saved indexes when they are sane; its file is opened on use."""
        st = cls._stat(path)
        index = time_index = None
        if st.st_size:
            index = OffsetIndex.load(index_path(path), base_offset, st.st_size)
            time_index = TimeIndex.load(time_index_path(path), base_offset, st.st_size) if index is not None else None
        seg = cls(path, base_offset, st.st_size, clock, interval, files=files, mtime_ms=st.st_mtime_ns // 1_000_000,
                  index=index, time_index=time_index, verified=st.st_size == 0, max_batch_size=max_batch_size)
        seg.damaged = load_kafka_damage(path)
        seg._known_damage = {(d.start, d.end) for d in seg.damaged}
        return seg

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
    def retention_time_ms(self) -> int:
        """What retention by time compares (Kafka >= 0.10.1): the largest record timestamp, or the
        file's last modification time when no batch has a timestamp."""
        ts = self.builder.max_timestamp
        return ts if ts > 0 else self.last_modified_ms

    def damaged_offsets(self, segment_end: int) -> list[tuple[int, int]]:
        """``(first offset, next offset)`` of every damaged range; ``segment_end`` (the next segment's
        base offset) ends one that runs to the end of the file."""
        return [(d.first_offset, d.next_or(segment_end)) for d in self.damaged]

    def offset_range(self, next_base: int) -> tuple[int, int]:
        """The offsets the segment holds, its base to the next segment's base ``next_base`` (retention's
        deletion record)."""
        return self.base_offset, next_base

    def message_count(self, next_base: int) -> tuple[int, bool]:
        """The records the segment holds (offsets number records) less those of damaged ranges, and
        whether it has damage."""
        lost = sum(b - a for a, b in self.damaged_offsets(next_base))
        return next_base - self.base_offset - lost, bool(self.damaged)

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
        n = self.write(data, head)
        for pos, last, ts in batches:
            self.builder.add(start + pos, last, ts)
        self.size = start + n
        self.checked_upto = self.size if self.checked_upto == start else self.checked_upto
        self.next_offset = next_offset
        self.last_modified_ms = now_ms

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
        self.cut_to(position)
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

