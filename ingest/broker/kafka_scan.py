"""Validating scans of a Kafka-format segment file: every batch's CRC-32C, indexes rebuilt, damage stepped over.

:func:`scan_segment` reads the file in chunks and checks each record batch v2
(:func:`ingest.records.validation.check_batch`: framing, magic, CRC-32C, one
call per batch, records untouched), that offsets increase from the segment's
base offset and fit the indexes' 32-bit relative offsets, and fills the offset
and time indexes as appending does (:meth:`IndexBuilder.add`). It does not stop
at a bad batch: :func:`next_valid` finds where valid batches start again, the
bytes between become a :class:`~ingest.broker.segment_damage.KafkaDamage`, and
the scan goes on, so that intact batches after damage are never stranded.
Whether a tail from which nothing valid follows is truncated (recovery of the
newest segment) is the caller's decision.

Finding valid batches again: a bad batch whose header is plausible (magic 2,
a length that fits, offsets after the last good ones) claims its extent; if
that runs to or past the end of the file, the file ends inside it (a torn
write) and nothing after it is looked at. Otherwise candidates are the
positions 16 bytes before a byte 2 (the magic), found with ``bytes.find``:
a candidate must have a plausible header (a base offset at or after the
expected next offset and at most one offset per byte skipped beyond it), a
matching CRC-32C, and valid batches after it up to the end of the file or for
:data:`RESYNC_MIN_CHAIN` bytes. A bad batch claims its extent only when its length is plausible
(at most the log's ``max.message.bytes`` with a margin): a flipped high bit in a length field must
not make the valid batches after it look like the inside of a torn write. A record batch nested inside a record value
(raw Kafka batches produced as values) passes the CRC but not the offset
bound and the chain, unless it is the file's last bytes.

Pure functions over a file descriptor (``os.pread``); no state.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from ingest.broker.offset_index import MAX_RELATIVE_OFFSET, OffsetIndex
from ingest.broker.segment_damage import KafkaDamage
from ingest.broker.time_index import NO_TIMESTAMP, TimeIndex
from ingest.errors import InvalidMessageError
from ingest.records.batch import (HEADER, LENGTH, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC, MAGIC_OFFSET, MIN_LENGTH,
                                  RECORD_BATCH_OVERHEAD, BatchHeader)
from ingest.records.validation import check_batch

SCAN_CHUNK = 8 * 1024 * 1024
RESYNC_CHUNK = 1024 * 1024
RESYNC_MIN_CHAIN = 256 * 1024
UNBOUNDED = 1 << 62
"""A resync candidate is accepted when valid batches follow it to the file's end or for this many bytes."""
_MAGIC_BYTE = bytes((MAGIC,))


class IndexBuilder:
    """The offset and time index entries of a segment as batches are added, Kafka's rule: an entry
    (last offset -> position) when more than ``interval`` bytes passed since the last one, and the
    time index's (largest timestamp so far -> its batch's last offset) with it."""

    __slots__ = ("index", "time_index", "interval", "last_entry_position", "max_timestamp", "offset_of_max")

    def __init__(self, index: OffsetIndex, time_index: TimeIndex, interval: int, last_entry_position: int = 0,
                 max_timestamp: int = NO_TIMESTAMP, offset_of_max: int = -1) -> None:
        self.index = index
        self.time_index = time_index
        self.interval = interval
        self.last_entry_position = last_entry_position
        self.max_timestamp = max_timestamp
        self.offset_of_max = offset_of_max

    def add(self, position: int, last_offset: int, max_timestamp: int) -> None:
        """Account for the batch at ``position`` (caller holds the log lock, or owns the scan)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max = last_offset
        if position - self.last_entry_position > self.interval:
            self.index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max)
            self.last_entry_position = position

    def seal(self) -> None:
        """The last time index entry: the segment's largest timestamp (Kafka's ``onBecomeInactiveSegment``)."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max)


class SegmentScan(NamedTuple):
    """Outcome of :func:`scan_segment`: valid batches end at ``end`` (nothing valid after it) and at
    offset ``next_offset``; ``batches`` validated; the damaged ranges before ``end``; why the scan
    stopped before the file's end (``tail_error``; ``cut_off``: a batch running past the end)."""

    end: int
    next_offset: int
    batches: int
    damaged: list[KafkaDamage]
    tail_error: str | None
    cut_off: bool


def _check(buf, p: int, n: int, expected: int, base_offset: int) -> tuple[BatchHeader | None, str | None, bool]:
    """The batch at ``p`` of a chunk of ``n`` bytes: (header, None, _) if valid, else (None, why, cut_off)."""
    if n - p < LOG_OVERHEAD:
        return None, "batch header cut off", True
    length = LENGTH.unpack_from(buf, p + LENGTH_OFFSET)[0]
    if length >= MIN_LENGTH and p + LOG_OVERHEAD + length > n:
        return None, f"batch of {LOG_OVERHEAD + length} bytes runs past the data", True
    try:
        h = check_batch(buf, p, n)
    except InvalidMessageError as exc:
        return None, str(exc), False
    if h.base_offset < expected:
        return None, f"batch base offset {h.base_offset} is below the expected {expected}", False
    if h.last_offset_delta < 0 or h.last_offset - base_offset > MAX_RELATIVE_OFFSET:
        return None, f"batch last offset {h.last_offset} does not fit the segment at {base_offset}", False
    return h, None, False


def scan_segment(fd: int, size: int, base_offset: int, builder: IndexBuilder | None, start: int = 0,
                 expected: int | None = None, max_batch_size: int = UNBOUNDED) -> SegmentScan:
    """Validate the segment file of ``size`` bytes from ``start`` (where offset ``expected``, default the
    base offset, comes next), stepping over damage; fills ``builder``'s indexes. A bad batch claims its
    extent only when it is at most ``max_batch_size`` bytes (see :func:`next_valid`)."""
    pos = start
    nxt = base_offset if expected is None else expected
    batches = 0
    damaged: list[KafkaDamage] = []
    want = SCAN_CHUNK
    while pos < size:
        buf = os.pread(fd, min(want, size - pos), pos)
        n = len(buf)
        want = SCAN_CHUNK
        p = 0
        why = None
        cut = False
        while p < n:
            h, why, cut = _check(buf, p, n, nxt, base_offset)
            if h is None:
                break
            if builder is not None:
                builder.add(pos + p, h.last_offset, h.max_timestamp)
            nxt = h.next_offset
            batches += 1
            p += h.size
        pos += p
        if why is None:
            continue
        if cut and pos + (n - p) < size:
            # A batch crosses the chunk's end: read again from it, large enough to hold it.
            head = os.pread(fd, LOG_OVERHEAD, pos)
            need = LOG_OVERHEAD + (LENGTH.unpack_from(head, LENGTH_OFFSET)[0] if len(head) == LOG_OVERHEAD else 0)
            if need >= RECORD_BATCH_OVERHEAD and pos + need <= size:
                want = max(SCAN_CHUNK, need)
                continue
        found = next_valid(fd, pos, size, nxt, max_batch_size)
        if found is None:
            return SegmentScan(pos, nxt, batches, damaged, why, cut)
        q, h = found
        damaged.append(KafkaDamage(pos, q, nxt, h.base_offset, why))
        if builder is not None:  # an index entry right after the damage: header walks never cross it
            builder.last_entry_position = q - builder.interval - 1
        pos = q
    return SegmentScan(pos, nxt, batches, damaged, None, False)


def _header(fd: int, p: int) -> BatchHeader | None:
    head = os.pread(fd, RECORD_BATCH_OVERHEAD, p)
    if len(head) < RECORD_BATCH_OVERHEAD:
        return None
    return BatchHeader._make(HEADER.unpack(head))


def _plausible(h: BatchHeader | None, p: int, size: int, expected: int, skipped: int) -> bool:
    return (h is not None and h.magic == MAGIC and h.length >= MIN_LENGTH and p + h.size <= size
            and expected <= h.base_offset <= expected + skipped and h.last_offset_delta >= 0)


def next_valid(fd: int, bad: int, size: int, expected: int,
               max_batch_size: int = UNBOUNDED) -> tuple[int, BatchHeader] | None:
    """Where valid batches start again after the bad batch at ``bad`` (offset ``expected`` came next),
    with that batch's header; None if nothing valid follows (see the module docstring). A length above
    ``max_batch_size`` (a flipped high bit) is no claim: the bytes after it are searched."""
    h = _header(fd, bad)
    if h is not None and h.magic == MAGIC and MIN_LENGTH <= h.length and h.size <= max_batch_size \
            and h.base_offset >= expected:
        end = bad + h.size
        if end >= size:
            return None  # the file ends inside it: a torn write, or a damaged last batch
        after = _confirmed(fd, end, size, h.next_offset)
        if after is not None:
            return end, after
    return resync(fd, bad + 1, size, expected, bad)


def resync(fd: int, start: int, size: int, expected: int, bad: int) -> tuple[int, BatchHeader] | None:
    """The first position at or after ``start`` where a confirmed chain of valid batches starts."""
    pos = start
    while pos + RECORD_BATCH_OVERHEAD <= size:
        buf = os.pread(fd, min(RESYNC_CHUNK, size - pos), pos)
        n = len(buf)
        j = buf.find(_MAGIC_BYTE, MAGIC_OFFSET)
        while j >= 0:
            q = pos + j - MAGIC_OFFSET
            h = None
            if j - MAGIC_OFFSET + RECORD_BATCH_OVERHEAD <= n:
                h = BatchHeader._make(HEADER.unpack_from(buf, j - MAGIC_OFFSET))
            else:
                h = _header(fd, q)
            if _plausible(h, q, size, expected, q - bad):
                c = _confirmed(fd, q, size, expected)
                if c is not None:
                    return q, c
            j = buf.find(_MAGIC_BYTE, j + 1)
        if pos + n >= size:
            return None
        pos += n - RECORD_BATCH_OVERHEAD + 1  # a header straddling the chunk end is looked at again
    return None


def _confirmed(fd: int, p: int, size: int, expected: int) -> BatchHeader | None:
    """The header of the batch at ``p`` if valid batches start there and go on to the end of the
    file or for RESYNC_MIN_CHAIN bytes; else None."""
    first = None
    start = p
    nxt = expected
    while p < size and p - start < RESYNC_MIN_CHAIN:
        h = _header(fd, p)
        if h is None or h.length < MIN_LENGTH or p + h.size > size:
            return None
        buf = os.pread(fd, h.size, p)
        try:
            h = check_batch(buf, 0, len(buf))
        except InvalidMessageError:
            return None
        if h.base_offset < nxt:
            return None
        nxt = h.next_offset
        if first is None:
            first = h
        p += h.size
    return first
