"""The time index of a Kafka-format segment: ``<base>.timeindex``, Kafka's layout, kept in memory.

File layout (Kafka's ``TimeIndex``, big-endian, no header)::

    entry* => timestamp:int64 relative_offset:int32      (12 bytes each)

An entry says: the largest timestamp of the segment's batches up to (and
including) the batch whose last offset is ``base + relative_offset``. Entries
are added with the offset index's, only when the timestamp grew (both columns
strictly increase), and a last entry with the segment's largest timestamp is
added when the segment is sealed, so that the last entry is the segment's
largest timestamp (what retention by time reads, as Kafka >= 0.10.1).
:meth:`TimeIndex.lookup` finds the greatest entry at or below a timestamp:
every batch before its offset has timestamps below the target.

Saving, loading and the concurrency contract: :mod:`ingest.broker.sparse_index`.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right

from ingest.broker.sparse_index import SparseIndex

SUFFIX = ".timeindex"
NO_TIMESTAMP = -1


class TimeIndex(SparseIndex):
    """Sparse (max timestamp so far -> last offset of that batch) entries of one segment."""

    COLUMNS = (("timestamps", "q", 8), ("offsets", "i", 4))   # offsets relative to base_offset
    timestamps: array
    offsets: array
    KIND = "time index"

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if both grew past the last entry."""
        if timestamp == NO_TIMESTAMP:
            return
        rel = offset - self.base_offset
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        if self.offsets and rel < self.offsets[-1]:
            return
        if self.offsets and rel == self.offsets[-1]:  # same batch, larger timestamp: replace
            self.timestamps[-1] = timestamp
            return
        self.timestamps.append(timestamp)
        self.offsets.append(rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the greatest entry at or below ``timestamp``; ``(-1, base)`` if none."""
        i = bisect_right(self.timestamps, timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self.timestamps[i], self.base_offset + self.offsets[i]

    def last_entry(self) -> tuple[int, int]:
        """The entry with the largest timestamp; ``(-1, base)`` when empty."""
        if not self.timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self.timestamps[-1], self.base_offset + self.offsets[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries of offsets at or after ``offset``."""
        i = bisect_right(self.offsets, offset - self.base_offset - 1)
        del self.timestamps[i:]
        del self.offsets[i:]

    def _insane(self, segment_size: int) -> str | None:
        t, o = self.timestamps, self.offsets
        if any(a >= b for a, b in zip(t, t[1:])) or any(a > b for a, b in zip(o, o[1:])) or any(x < 0 for x in o[:1]):
            return "entries do not increase"
        return None
