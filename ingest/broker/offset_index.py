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
is saved once, atomically (temp file, fsync, rename), and loaded at start-up
after Kafka's sanity check (size a multiple of 8, entries increasing, inside
the segment); a failed check means a rebuild by scanning the segment.

Concurrency contract: the owning segment appends and truncates under its
log's lock; readers bisect the arrays without a lock (``array.append`` never
shows a half-written entry, and truncation happens only on a replica's
truncate, which republishes the log's view).
"""
from __future__ import annotations

import logging
import os
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".index"
ENTRY_SIZE = 8
MAX_RELATIVE_OFFSET = 2 ** 31 - 1


def _save(path: Path, columns: list[array], widths: list[int]) -> None:
    """Interleave ``columns`` big-endian into ``path`` atomically (temp file, fsync, rename). Raises OSError."""
    n = len(columns[0])
    buf = bytearray(sum(widths) * n)
    cols = []
    for col in columns:
        c = array(col.typecode, col)
        if sys.byteorder == "little":
            c.byteswap()
        cols.append(memoryview(c.tobytes()))
    stride = sum(widths)
    at = 0
    for col, w in zip(cols, widths):
        for j in range(w):  # one strided copy per byte of the column: C speed, no per-entry loop
            buf[at + j::stride] = col[j::w]
        at += w
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _load(data: bytes, typecodes: list[str], widths: list[int]) -> list[array]:
    stride = sum(widths)
    n = len(data) // stride
    out = []
    at = 0
    for code, w in zip(typecodes, widths):
        raw = bytearray(w * n)
        for j in range(w):
            raw[j::w] = data[at + j::stride]
        col = array(code)
        col.frombytes(bytes(raw))
        if sys.byteorder == "little":
            col.byteswap()
        out.append(col)
        at += w
    return out


class OffsetIndex:
    """Sparse (last offset of a batch -> its file position) entries of one segment."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.offsets = array("i")    # relative to base_offset
        self.positions = array("i")

    def __len__(self) -> int:
        return len(self.offsets)

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

    def save(self, path: Path) -> None:
        """Write ``<base>.index`` atomically. Raises OSError."""
        _save(path, [self.offsets, self.positions], [4, 4])

    @classmethod
    def load(cls, path: Path, base_offset: int, segment_size: int) -> "OffsetIndex | None":
        """The saved index of a segment of ``segment_size`` bytes, None when absent or insane."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read offset index %s: %s; the segment is scanned", path, exc.strerror)
            return None
        if len(data) % ENTRY_SIZE:
            log.warning("offset index %s has %d bytes, not a multiple of %d; the segment is scanned",
                        path, len(data), ENTRY_SIZE)
            return None
        idx = cls(base_offset)
        idx.offsets, idx.positions = _load(data, ["i", "i"], [4, 4])
        why = idx._insane(segment_size)
        if why:
            log.warning("offset index %s is corrupt (%s); the segment is scanned", path, why)
            return None
        return idx

    def _insane(self, segment_size: int) -> str | None:
        o, p = self.offsets, self.positions
        if any(x < 0 for x in o[:1]) or any(x < 0 for x in p[:1]):
            return "a negative entry"
        if any(a >= b for a, b in zip(o, o[1:])) or any(a >= b for a, b in zip(p, p[1:])):
            return "entries do not increase"
        if p and p[-1] >= segment_size:
            return f"position {p[-1]} is past the segment's {segment_size} bytes"
        return None
