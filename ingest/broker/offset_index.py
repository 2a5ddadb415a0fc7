"""The offset index of a Kafka-format segment: ``<base>.index``, Kafka's layout, kept in memory.

File layout (Kafka's ``OffsetIndex``, big-endian, no header)::

    entry* => relative_offset:int32 position:int32      (8 bytes each)

An entry maps the last offset of a batch (relative to the segment's base offset)
to the file position where that batch starts; entries are added while
appending or scanning, at most one per ``log.index.interval.bytes`` of batches,
and both columns strictly increase. :meth:`OffsetIndex.lookup` finds the
greatest entry at or below an offset: reading batch headers from its position
reaches the batch holding the offset (its last offset is at or after it).

The active segment's index lives in memory only (recovery rebuilds it from the
segment at start-up, as Kafka recovers the active segment); a sealed segment's
is saved once and loaded at start-up after Kafka's sanity check (size a
multiple of 8, entries increasing, inside the segment). Saving, loading and the
concurrency contract: :mod:`ingest.broker.sparse_index`.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right

from ingest.broker.sparse_index import SparseIndex

SUFFIX = ".index"
MAX_RELATIVE_OFFSET = 2 ** 31 - 1


class OffsetIndex(SparseIndex):
    """Sparse (last offset of a batch -> its file position) entries of one segment."""

    COLUMNS = (("offsets", "i", 4), ("positions", "i", 4))   # offsets relative to base_offset
    offsets: array
    positions: array
    KIND = "offset index"

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the batch at ``position`` whose last offset is ``offset``."""
        rel = offset - self.base_offset
        if self.offsets and (rel <= self.offsets[-1] or position <= self.positions[-1]):
            return  # not increasing: the batch is already covered by the last entry
        self.offsets.append(rel)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the greatest entry at or below ``offset``; ``(base, 0)`` if none."""
        i = bisect_right(self.offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def floor_position(self, position: int) -> int:
        """The greatest indexed batch position at or below ``position`` (0 if none)."""
        i = bisect_right(self.positions, position) - 1
        return self.positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries of batches at or after file position ``position``."""
        i = bisect_right(self.positions, position - 1)
        del self.offsets[i:]
        del self.positions[i:]

    def _insane(self, segment_size: int) -> str | None:
        o, p = self.offsets, self.positions
        if any(x < 0 for x in o[:1]) or any(x < 0 for x in p[:1]):
            return "a negative entry"
        if any(a >= b for a, b in zip(o, o[1:])) or any(a >= b for a, b in zip(p, p[1:])):
            return "entries do not increase"
        if p and p[-1] >= segment_size:
            return f"position {p[-1]} is past the segment's {segment_size} bytes"
        return None
