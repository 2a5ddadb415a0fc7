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

Saving, loading and the concurrency contract are the offset index's
(:mod:`ingest.broker.offset_index`).
"""
from __future__ import annotations

import logging
from array import array
from bisect import bisect_right
from pathlib import Path

from ingest.broker.offset_index import _load, _save

log = logging.getLogger(__name__)

SUFFIX = ".timeindex"
ENTRY_SIZE = 12
NO_TIMESTAMP = -1


class TimeIndex:
    """Sparse (max timestamp so far -> last offset of that batch) entries of one segment."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.offsets = array("i")   # relative to base_offset

    def __len__(self) -> int:
        return len(self.timestamps)

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

    def save(self, path: Path) -> None:
        """Write ``<base>.timeindex`` atomically. Raises OSError."""
        _save(path, [self.timestamps, self.offsets], [8, 4])

    @classmethod
    def load(cls, path: Path, base_offset: int) -> "TimeIndex | None":
        """The saved time index, None when absent or insane."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read time index %s: %s; the segment is scanned", path, exc.strerror)
            return None
        if len(data) % ENTRY_SIZE:
            log.warning("time index %s has %d bytes, not a multiple of %d; the segment is scanned",
                        path, len(data), ENTRY_SIZE)
            return None
        idx = cls(base_offset)
        idx.timestamps, idx.offsets = _load(data, ["q", "i"], [8, 4])
        t, o = idx.timestamps, idx.offsets
        if any(a >= b for a, b in zip(t, t[1:])) or any(a > b for a, b in zip(o, o[1:])) or any(x < 0 for x in o[:1]):
            log.warning("time index %s is corrupt (entries do not increase); the segment is scanned", path)
            return None
        return idx
