"""A 0.7 segment: one file of a partition log plus its base offset (its validation: ``segment_recovery.py``).

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

The file's life cycle (descriptors from the broker's bounded pool, reader
references, deletion while read) is :class:`~ingest.broker.segment_file.SegmentFile`'s.
Concurrency contract: ``append``/``truncate_to``/``flush`` are called by the
owning :class:`~ingest.broker.log.Log` under its lock; readers ``acquire()``,
read by ``pread`` and ``release()`` (:mod:`ingest.broker.segment_file`).
"""
from __future__ import annotations

import errno
import logging
import os
import threading
from array import array
from bisect import bisect_right
from pathlib import Path

from ingest.broker.deletion_log import count_messages
from ingest.broker.open_files import UNLIMITED, OpenFiles
from ingest.broker.segment_damage import DAMAGED_SUFFIX, Damage, damaged_path, load_damaged, save_damaged
from ingest.broker.segment_file import SegmentFile, SegmentSlice, file_name, parse_file_name
from ingest.broker.segment_index import SUFFIX as INDEX_SUFFIX
from ingest.broker.segment_index import delete_index, load_index, save_index
from ingest.broker.segment_recovery import SegmentRecovery
from ingest.broker.segment_scan import UNLIMITED_SIZE
from ingest.clock import Clock
from ingest.records.message_set import scan

log = logging.getLogger(__name__)

SUFFIX = ".kafka"


def segment_name(base_offset: int) -> str:
    return file_name(base_offset, SUFFIX)


def parse_segment_name(name: str) -> int | None:
    """Base offset of a segment file name, or None if the name is not one."""
    return parse_file_name(name, SUFFIX)


class Segment(SegmentRecovery, SegmentFile):
    """One segment file; see the module docstring for the concurrency contract."""

    SUFFIX = SUFFIX
    SIDECARS = (INDEX_SUFFIX, DAMAGED_SUFFIX)

    def __init__(self, path: Path, base_offset: int, size: int, clock: Clock, index_interval: int,
                 *, indexed: bool, mtime_ms: int, index: array | None = None,
                 files: OpenFiles = UNLIMITED, fd: int | None = None,
                 max_message_size: int = UNLIMITED_SIZE) -> None:
        super().__init__(path, base_offset, size, clock, mtime_ms=mtime_ms, files=files, fd=fd)
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
        self._interval = index_interval
        self._max_message_size = max_message_size  # what a plausible header may claim (next_valid)
        self._index_lock = threading.Lock()

    # --- life cycle -----------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, clock: Clock, index_interval: int,
               files: OpenFiles = UNLIMITED) -> "Segment":
        """A new empty segment file (:meth:`~ingest.broker.segment_file.SegmentFile._create`)."""
        return cls._create(directory, base_offset, clock, files, index_interval, indexed=True)

    @classmethod
    def open(cls, path: Path, base_offset: int, clock: Clock, index_interval: int,
             files: OpenFiles = UNLIMITED, max_message_size: int = UNLIMITED_SIZE) -> "Segment":
        """A segment found on disk; its file is not opened until it is used."""
        st = cls._stat(path)
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
    def next_offset(self) -> int:
        """The offset after the segment's last message (offsets are byte positions)."""
        return self.base_offset + self.size

    end_offset = next_offset  # its older name, which callers' retention predicates use

    def damaged_offsets(self, segment_end: int) -> list[tuple[int, int]]:
        """``(start, end)`` offsets of every damaged range (``segment_end`` is not needed: a range's
        end is already where the next valid message or segment starts)."""
        return [(self.base_offset + d.start, self.base_offset + d.end) for d in self.damaged]

    def offset_range(self, next_base: int) -> tuple[int, int]:
        """The offsets of the segment's bytes, ``[base, base + size)``, for retention's deletion record
        (``next_base``, the next segment's base, is not needed: offsets are byte positions)."""
        return self.base_offset, self.next_offset

    def message_count(self, next_base: int) -> tuple[int, bool]:
        """Messages a consumer would read in the segment (each inside a compressed wrapper counts), and
        whether the count stopped early at damage. Raises OSError."""
        messages, damaged = count_messages(self.path, self.size)
        return messages, damaged or bool(self.damaged)  # recorded damage: lengths may walk over bad bytes

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
            with self.pinned() as fd:
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
                the caller must ``cut_to(size)`` or stop using the segment.
            StorageError: the file could not be opened (no descriptor left);
                nothing was written.
        """
        start = self.size
        self.write(data)
        if index_positions:
            self.index.extend(index_positions)
        self.size = start + len(data)
        self.last_modified_ms = now_ms

    def next_index_mark(self) -> int:
        return self.index[-1] + self._interval if self.index else 0

    def truncate_to_offset(self, offset: int) -> int:
        """Cut the segment at ``offset``, a message boundary, for a replica's truncation; it becomes
        the active segment again (:meth:`reopen_for_append`). Returns the bytes removed.

        Raises:
            OffsetOutOfRangeError: ``offset`` is not a message boundary of this segment.
            OSError: the cut failed.
        """
        pos = offset - self.base_offset
        if pos > 0:
            self.check_boundary(pos, self.size)
        removed = self.size - pos
        self.truncate_to(pos)
        self.reopen_for_append()
        return removed

    def truncate_to(self, size: int) -> None:
        """Cut the file at ``size`` and fsync it, and its index with it. Raises OSError."""
        self.cut_to(size)
        cut = bisect_right(self.index, size - 1)
        del self.index[cut:]


class LogSlice(SegmentSlice):
    """Whole messages of one segment from ``offset`` (the last may be cut off), for ``os.sendfile``
    (:class:`~ingest.broker.segment_file.SegmentSlice`)."""

    __slots__ = ()

    @classmethod
    def empty(cls, offset: int) -> "LogSlice":
        """A slice of no bytes at ``offset`` (a read at a limit below the log end)."""
        return cls(None, offset, 0, 0)

    @property
    def next_offset(self) -> int:
        """Offset right after the slice's bytes (a boundary only if nothing was cut off)."""
        return self.offset + self.length
