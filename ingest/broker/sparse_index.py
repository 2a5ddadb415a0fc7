"""The base of a Kafka-format segment's indexes: sparse entries of two columns, in memory, saved at seal.

An index (:class:`~ingest.broker.offset_index.OffsetIndex`,
:class:`~ingest.broker.time_index.TimeIndex`) is a few sorted entries of two
columns, ``array`` s kept in memory: no preallocated file, no mmap. A sealed
segment's index is saved once, whole, in Kafka's layout (each entry's columns
big-endian, back to back, no header), atomically (temp file, fsync, rename);
at start-up it is loaded after Kafka's sanity checks, and a failed check means
a rebuild by scanning the segment.

Concurrency contract: the owning segment appends and truncates under its
log's lock; readers bisect the arrays without a lock (``array.append`` never
shows a half-written entry, and truncation happens only on a replica's
truncate, which republishes the log's view).
"""
from __future__ import annotations

import logging
import sys
from array import array
from pathlib import Path
from typing import ClassVar

from ingest.broker.segment_file import read_sidecar, write_sidecar

log = logging.getLogger(__name__)


class SparseIndex:
    """Entries of two columns, one ``array`` each, named by :attr:`COLUMNS`; see the module docstring."""

    COLUMNS: ClassVar[tuple[tuple[str, str, int], ...]]
    """``(attribute, array typecode, bytes in the file)`` of each column, in the file's order."""
    KIND: ClassVar[str]
    """What the index is called in log lines."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        for attribute, code, _ in self.COLUMNS:
            setattr(self, attribute, array(code))

    def __len__(self) -> int:
        return len(getattr(self, self.COLUMNS[0][0]))

    @classmethod
    def entry_size(cls) -> int:
        return sum(width for _, _, width in cls.COLUMNS)

    def save(self, path: Path) -> None:
        """Write the index atomically in Kafka's layout. Raises OSError."""
        stride = self.entry_size()
        buf = bytearray(stride * len(self))
        at = 0
        for attribute, code, width in self.COLUMNS:
            col = array(code, getattr(self, attribute))
            if sys.byteorder == "little":
                col.byteswap()
            raw = memoryview(col.tobytes())
            for j in range(width):  # one strided copy per byte of the column: C speed, no per-entry loop
                buf[at + j::stride] = raw[j::width]
            at += width
        write_sidecar(path, buf)

    @classmethod
    def load(cls, path: Path, base_offset: int, segment_size: int):
        """The saved index of a segment of ``segment_size`` bytes, None when absent or insane."""
        data = read_sidecar(path, cls.KIND)
        if data is None:
            return None
        stride = cls.entry_size()
        if len(data) % stride:
            log.warning("%s %s has %d bytes, not a multiple of %d; the segment is scanned",
                        cls.KIND, path, len(data), stride)
            return None
        idx = cls(base_offset)
        n = len(data) // stride
        at = 0
        for attribute, code, width in cls.COLUMNS:
            raw = bytearray(width * n)
            for j in range(width):
                raw[j::width] = data[at + j::stride]
            col = array(code)
            col.frombytes(bytes(raw))
            if sys.byteorder == "little":
                col.byteswap()
            setattr(idx, attribute, col)
            at += width
        why = idx._insane(segment_size)
        if why:
            log.warning("%s %s is corrupt (%s); the segment is scanned", cls.KIND, path, why)
            return None
        return idx

    def _insane(self, segment_size: int) -> str | None:
        """Why the loaded entries cannot be right (Kafka's sanity check), None when they can."""
        raise NotImplementedError
