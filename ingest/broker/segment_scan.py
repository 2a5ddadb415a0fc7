"""Validating scans of a segment file: every message checked, damaged bytes stepped over.

Damage costs only the damaged bytes. The validating scan
(:func:`scan_segment`) does not stop at a bad message: it resynchronises on
the next position where a whole valid message starts and the messages after
it keep validating (:func:`resync`), records ``[bad, next valid)`` as a
:class:`~ingest.broker.segment_damage.Damage`, and goes on. Whether a tail
from which nothing valid follows is truncated (recovery of the newest
segment) is the caller's decision (:mod:`ingest.broker.segment`).

Pure functions over a file descriptor (``os.pread``); no state.
"""
from __future__ import annotations

import os
import re
from array import array
from typing import NamedTuple

from ingest.broker.segment_damage import Damage
from ingest.records.message import (
    CODEC_MASK,
    CODEC_NONE,
    HEADER_SIZE,
    LENGTH,
    LENGTH_SIZE,
    MAGIC_OFFSET,
    MAGICS,
    MIN_MESSAGE_SIZE,
    check_header,
    min_length,
    read_header,
)
from ingest.records.message_set import ScanResult, scan

SCAN_CHUNK = 8 * 1024 * 1024
RESYNC_CHUNK = 1024 * 1024
RESYNC_CONFIRM_BYTES = 256 * 1024
RESYNC_MIN_CHAIN = 64 * 1024 + HEADER_SIZE
"""A resync candidate is accepted when the messages from it validate up to the
segment's end or for this many bytes (:func:`_confirmed`). One CRC match, or a
few, is not enough: the payload of a compressed wrapper of incompressible data
holds its inner messages verbatim (stored deflate blocks and snappy literals,
both at most 64 KB), and those are valid messages."""
UNLIMITED_SIZE = 1 << 62
_ZERO_RUN = re.compile(rb"\x00+")
_ZERO4 = bytes(4)
_MAGIC_BYTES = tuple(bytes([m]) for m in MAGICS)


def _magic_positions(buf: bytes, start: int):
    """Positions ``j >= start`` of a byte 0, 1 or 2 (a magic value), in order, found with
    ``bytes.find`` (memchr). Inside a run of zero bytes only the first positions can follow a
    non-zero length: once the four bytes before a zero are zero too, the rest of the run is
    skipped in one step, so a zero-filled hole (what a crash often leaves) costs almost nothing
    although 0 is a magic."""
    find = buf.find
    nxt = [find(m, start) for m in _MAGIC_BYTES]
    while True:
        live = [x for x in nxt if x >= 0]
        if not live:
            return
        j = min(live)
        yield j
        m = buf[j]
        if m == 0 and j >= 3 and buf[j - 3:j + 1] == _ZERO4:
            nxt[0] = find(b"\x00", _ZERO_RUN.match(buf, j).end())
        else:
            nxt[m] = find(_MAGIC_BYTES[m], j + 1)


class SegmentScan(NamedTuple):
    """Outcome of :func:`scan_segment`: valid bytes end at ``end`` (nothing valid after it),
    ``count`` messages validated, the damaged ranges skipped before ``end``, and why the scan
    stopped before the file's end (``tail_error``; ``cut_off``: a message running past it)."""

    end: int
    count: int
    damaged: list[Damage]
    tail_error: str | None
    cut_off: bool


def scan_file(fd: int, size: int, index: array | None, interval: int, start: int = 0, origin: int = 0) -> ScanResult:
    """Validate a file of ``size`` bytes from ``start`` by chunks, up to the first bad message; fills ``index``.

    ``origin`` (the segment's base offset) is added to positions in error texts."""
    pos = start
    count = 0
    want = SCAN_CHUNK
    while pos < size:
        buf = os.pread(fd, min(want, size - pos), pos)
        if not buf:
            return ScanResult(pos, count, f"file ended at {pos}, expected {size} bytes", True)
        mark = index[-1] + interval if index else 0
        r = scan(buf, index=index, index_base=pos, index_mark=mark - pos, index_interval=interval, origin=origin + pos)
        count += r.count
        pos += r.end
        want = SCAN_CHUNK
        if r.error is None:
            continue
        if not r.cut_off or pos + len(buf) - r.end >= size:
            return ScanResult(pos, count, r.error, r.cut_off)
        # A message crosses the chunk boundary: re-read from it, large enough to hold it.
        head = os.pread(fd, LENGTH_SIZE, pos)
        need = LENGTH_SIZE + (LENGTH.unpack(head)[0] if len(head) == LENGTH_SIZE else 0)
        if len(head) < LENGTH_SIZE or pos + need > size:
            return ScanResult(pos, count, r.error, True)
        want = max(SCAN_CHUNK, need)
    return ScanResult(pos, count, None, False)


def scan_segment(fd: int, size: int, index: array | None, interval: int, origin: int = 0,
                 max_message_size: int = UNLIMITED_SIZE) -> SegmentScan:
    """Validate a whole segment file, skipping damaged ranges (:func:`next_valid`); fills ``index``.

    The first message after a damaged range always gets an index entry, so
    that a boundary walk never crosses damage.
    """
    pos = count = 0
    damaged: list[Damage] = []
    while True:
        r = scan_file(fd, size, index, interval, pos, origin)
        count += r.count
        if r.error is None:
            return SegmentScan(r.end, count, damaged, None, False)
        nxt = next_valid(fd, r.end, size, max_message_size)
        if nxt is None:
            return SegmentScan(r.end, count, damaged, r.error, r.cut_off)
        damaged.append(Damage(r.end, nxt, r.error, damaged_messages(fd, r.end, nxt, size)))
        if index is not None:
            index.append(nxt)
        pos = nxt


def damaged_messages(fd: int, start: int, end: int, size: int) -> int:
    """How many messages the damaged range ``[start, end)`` held, when its bytes say it exactly; else -1.

    Exact when the range's own headers chain from ``start`` to exactly ``end``:
    each plausible (:func:`_plausible`) and uncompressed (a damaged wrapper's
    inner messages cannot be counted), its length leading to the next. A damaged
    payload or CRC leaves its header intact: one message. A file cut short
    inside its last message leaves that header, whose length reaches ``end``
    (the next segment's base): one message. A damaged length field, or a range
    whose headers are missing (a file cut on a message boundary), gives -1.
    """
    p = start
    count = 0
    while p < end:
        if p + MIN_MESSAGE_SIZE > size:
            return -1
        h = _plausible(os.pread(fd, HEADER_SIZE, p), 0)
        if h is None or h.attributes & CODEC_MASK != CODEC_NONE:
            return -1
        p += LENGTH_SIZE + h.length
        count += 1
    return count if p == end else -1


def next_valid(fd: int, bad: int, size: int, max_message_size: int = UNLIMITED_SIZE) -> int | None:
    """Where valid messages start again after the bad message at ``bad``; None if nothing valid follows.

    A bad message whose header is plausible (magic, codec, a length within
    ``max.message.size``) claims its extent: if that runs to or past the end
    of the file, the file ends inside it (a torn write, or a damaged last
    message), and nothing after ``bad`` is looked at: valid-looking bytes there
    would be its own payload. If it ends inside the file and valid messages
    follow it (:func:`_confirmed`), only its payload or CRC was damaged.
    Otherwise (a damaged header) :func:`resync` searches.
    """
    h = _plausible(os.pread(fd, HEADER_SIZE, bad), 0)
    if h is not None:
        length = h.length
        if length <= max_message_size + min_length(h.magic):
            end = bad + LENGTH_SIZE + length
            if end >= size:
                return None
            if _confirmed(fd, end, size):
                return end
    return resync(fd, bad + 1, size)


def resync(fd: int, start: int, size: int) -> int | None:
    """The first position at or after ``start`` where valid messages start again, or None.

    A candidate (:func:`_magic_positions`) has a known magic byte (0, 1 or 2)
    in place and a length that fits the file; a
    candidate whose message lies inside the chunk read must itself be valid
    (one CRC), and then it must pass :func:`_confirmed`. The cost is one pass
    over the damaged bytes plus one CRC per plausible header.
    """
    pos = start
    while pos + MIN_MESSAGE_SIZE <= size:
        buf = os.pread(fd, min(RESYNC_CHUNK, size - pos), pos)
        n = len(buf)
        if n < MIN_MESSAGE_SIZE:
            return None
        for j in _magic_positions(buf, LENGTH_SIZE):
            p = j - LENGTH_SIZE
            if p + MIN_MESSAGE_SIZE > n:
                break
            length = LENGTH.unpack_from(buf, p)[0]
            end = p + LENGTH_SIZE + length
            if length < min_length(buf[p + MAGIC_OFFSET]) or pos + end > size:
                continue
            if end <= n and scan(buf, p, end).error is not None:  # not even this one message is valid
                continue
            if _confirmed(fd, pos + p, size):
                return pos + p
        if pos + n >= size:
            return None
        pos += n - HEADER_SIZE + 1  # a header straddling the chunk end is looked at again
    return None


def _plausible(buf: bytes, pos: int):
    """The header at ``pos`` when it could start a message (known magic and codec, length at
    least its magic's minimum), else None."""
    h = read_header(buf, pos)
    if h is None or h.length < min_length(h.magic) or check_header(h.magic, h.attributes) is not None:
        return None
    return h


def _confirmed(fd: int, p: int, size: int, depth: int = 2) -> bool:
    """Valid messages start at ``p`` and go on: up to the end of the file, or for
    :data:`RESYNC_MIN_CHAIN` bytes, or up to a bad message that is itself only
    damaged inside (a plausible header whose extent fits the file) after which
    they go on again (``depth`` more times)."""
    want = RESYNC_CONFIRM_BYTES
    while True:
        buf = os.pread(fd, min(size - p, want), p)
        r = scan(buf)
        if p + r.end == size or r.end >= RESYNC_MIN_CHAIN:
            return r.end > 0
        if r.error is None:  # the read ended on a boundary before the file's end: read on
            want = len(buf) + RESYNC_CONFIRM_BYTES
            continue
        h = read_header(buf, r.end)
        if h is None:  # fewer bytes than the header left
            if r.cut_off and p + len(buf) < size:
                want = len(buf) + RESYNC_CONFIRM_BYTES
                continue
            return False
        claimed = p + r.end + LENGTH_SIZE + h.length
        plausible = _plausible(buf, r.end) is not None
        if r.cut_off and p + len(buf) < size and plausible and claimed <= size:
            want = claimed - p  # a message cut by the read, not by the file: read it whole
            continue
        if r.end == 0 or depth == 0 or not plausible:
            return False
        if claimed >= size:  # valid messages up to a torn (or damaged) last one
            return True
        return _confirmed(fd, claimed, size, depth - 1)
