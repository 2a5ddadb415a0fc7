"""Validation of a segment: recovery of the newest, verification of sealed ones, damage, read-time checks.

:class:`SegmentRecovery` is a base of :class:`~ingest.broker.segment.Segment` (its state, its
locks): a validating scan (:func:`ingest.broker.segment_scan.scan_segment`) rebuilds the index,
truncates a torn tail only where recovery may (the newest segment), records damaged ranges
(:mod:`ingest.broker.segment_damage`, logged at ERROR once, kept in the ``<base>.damaged``
sidecar), and checks what a read serves: that its position is a message boundary (walking length
fields from the nearest index entry), the bytes of a segment not yet verified, the first message of
a follower's fetch. docs/log-format.md tells the rules.

Concurrency: the caller holds the segment's index lock where a method says so; the others take it.
"""
from __future__ import annotations

import logging
import os
from array import array
from bisect import bisect_right

from ingest.broker.segment_damage import Damage, damaged_path, save_damaged
from ingest.broker.segment_index import delete_index
from ingest.broker.segment_scan import damaged_messages, next_valid, scan_segment
from ingest.errors import CorruptRangeError, OffsetOutOfRangeError
from ingest.records.message import HEADER_SIZE, LENGTH, LENGTH_SIZE, MIN_MESSAGE_SIZE, OVERHEAD_V0
from ingest.records.message_set import scan

log = logging.getLogger(__name__)

WALK_CHUNK = 64 * 1024
"""Bytes read at a time while walking length fields to a read's position."""


class SegmentRecovery:
    """Validating scans, damage and read-time checks of a :class:`~ingest.broker.segment.Segment` (mixed into it)."""

    def recover(self) -> int:
        """Validate every message of the newest segment; returns the bytes truncated.

        Damaged ranges followed by valid messages are kept and recorded (see
        the module docstring); only a tail from which nothing valid follows (a
        torn write, or a last message damaged) is truncated.
        """
        with self._index_lock, self.pinned() as fd:
            delete_index(self.path)  # the newest segment may change: never trust a saved index for it
            self.index = array("q")
            r = scan_segment(fd, self.size, self.index, self._interval, self.base_offset,
                             self._max_message_size)
            self.indexed = self.verified = True
            self._record_damage(r.damaged)
            dropped = self.size - r.end
            if dropped:
                kind = "torn tail" if r.cut_off else "invalid message"
                # A torn tail is the expected trace of a crash; a bad last message is damage.
                level = logging.WARNING if r.cut_off else logging.ERROR
                log.log(level, "recovery of %s: %s: %s; nothing valid follows it; truncating %d bytes "
                        "(keeping %d bytes, %d messages)", self.path, kind, r.tail_error, dropped, r.end, r.count)
                self.truncate_to(r.end)
            else:
                log.info("recovery of %s: %d messages, %d bytes valid", self.path, r.count, r.end)
            return dropped

    def _record_damage(self, damaged: list[Damage]) -> None:
        """Keep ``damaged`` (the last full scan's result), save the sidecar, log new ranges at ERROR once.

        Caller holds the index lock.
        """
        self.damaged = sorted(damaged)
        for d in self.damaged:
            if (d.start, d.end) in self._known_damage:
                log.info("segment %s: damaged range %d..%d (%d bytes) already recorded in %s",
                         self.path, self.base_offset + d.start, self.base_offset + d.end, d.end - d.start,
                         damaged_path(self.path).name)
                continue
            log.error("segment %s is corrupt from offset %d: damaged range %d..%d (%d bytes, %s); the valid "
                      "messages after it are kept and served, fetches in it answer CORRUPT_RANGE with next "
                      "offset %d", self.path, self.base_offset + d.start, self.base_offset + d.start,
                      self.base_offset + d.end, d.end - d.start, d.reason, self.base_offset + d.end)
        if self.damaged or self._known_damage:
            save_damaged(self.path, self.base_offset, self.damaged, self._clock.time_ms())
        self._known_damage = {(d.start, d.end) for d in self.damaged}

    def ensure_index(self) -> None:
        """Have an index: the saved one, or a validating scan of the file on first use."""
        if not self.indexed:
            self.verify()

    def verify(self, *, save: bool = False) -> bool:
        """CRC-check every message once (rebuilding the index); True if the segment is intact.

        Damaged ranges are recorded and logged at ERROR (see the module
        docstring); a sealed segment is never truncated, so damage reaching
        the end of the file is a damaged range too, and so are the bytes
        missing up to the next segment (:meth:`note_gap`).
        """
        with self._index_lock:
            if not self.verified:
                index = array("q")
                with self.pinned() as fd:
                    r = scan_segment(fd, self.size, index, self._interval, self.base_offset,
                                     self._max_message_size)
                damaged = list(r.damaged)
                end = max(self.size, self.extent or 0)
                if r.end < end:
                    if r.end < self.size:
                        why = r.tail_error or "damaged"
                    else:
                        why = f"the file ends at offset {self.next_offset}, before the next segment"
                    if end > self.size:
                        why += (f"; {end - self.size} bytes missing up to the next segment at offset "
                                f"{self.base_offset + end}")
                    with self.pinned() as fd:
                        count = damaged_messages(fd, r.end, end, self.size)
                    damaged.append(Damage(r.end, end, why, count))
                self._record_damage(damaged)
                self.index = index
                self.indexed = self.verified = True
                if save:
                    self.seal()
            return not self.damaged

    def check_first(self, pos: int, length: int, limit: int) -> int:
        """CRC-check the first message at ``pos`` before serving ``length`` bytes from it (a
        follower's fetch from a verified segment), so that bytes damaged after the segment was
        verified are found where a follower stops: it appends the valid messages a fetch
        returns and asks again at the first one that fails, which is then the first message
        of its next fetch. One message per fetch (the follower grows its fetch for a message
        larger than it); cost: one ``pread`` and one CRC.

        Returns ``length``.

        Raises:
            CorruptRangeError: the message at ``pos`` fails validation; its damaged range is
                recorded first (:meth:`mark_damaged`).
        """
        with self.pinned() as fd:
            head = os.pread(fd, min(length, HEADER_SIZE), pos)
            if len(head) < LENGTH_SIZE:
                return length
            n = LENGTH_SIZE + LENGTH.unpack_from(head)[0]
            data = head  # a length that cannot be right (too small, or past the end) fails the header's scan
            if MIN_MESSAGE_SIZE <= n <= limit - pos:
                if n > length:
                    return length  # cut by the fetch size: the follower asks again for the whole message
                data = os.pread(fd, n, pos)
        r = scan(data, origin=self.base_offset + pos)
        if r.error is None and r.end == n:
            return length
        self.mark_damaged(pos, r.error or "message runs past the segment's end")
        self._check_damage(pos)
        return length

    def mark_damaged(self, pos: int, reason: str) -> None:
        """Record the damaged range starting at file position ``pos`` (the message there failed
        validation after the segment was verified: bytes changed on disk): up to the next valid
        message (:func:`~ingest.broker.segment_scan.next_valid`), or the end of the file. It is
        logged at ERROR once, saved in the sidecar, and its next valid offset indexed, as for
        damage a full scan finds; the rest of the segment is not scanned again (a sealed segment
        may be 1 GB, and this runs on a network thread)."""
        with self._index_lock:
            if any(d.start <= pos < d.end for d in self.damaged):
                return
            size = self.size
            with self.pinned() as fd:
                nxt = next_valid(fd, pos, size, self._max_message_size)
                end = max(size, self.extent or 0) if nxt is None else nxt
                count = damaged_messages(fd, pos, end, size)
            if nxt is not None:
                i = bisect_right(self.index, nxt)
                if i == 0 or self.index[i - 1] != nxt:
                    self.index.insert(i, nxt)
            why = f"{reason}; found while serving a replica, the bytes changed on disk after the segment was verified"
            self._record_damage(self.damaged + [Damage(pos, end, why, count)])

    def validate_range(self, pos: int, length: int, limit: int) -> int:
        """CRC-check ``length`` bytes at ``pos`` of a not yet verified segment before serving them.

        Returns how many bytes may be served (cut before damaged bytes). Bad
        bytes make the whole segment be verified now (:meth:`verify`), which
        records its damaged ranges.

        Raises:
            CorruptRangeError: ``pos`` lies in a damaged range.
        """
        with self.pinned() as fd:
            data = os.pread(fd, length, pos)
        r = scan(data, origin=self.base_offset + pos)
        if r.error is None:
            return length
        q = r.end
        if r.cut_off and pos + length < limit:
            # Cut by the fetch size, which is normal, unless its length runs past the segment.
            if len(data) - q < LENGTH_SIZE or pos + q + LENGTH_SIZE + LENGTH.unpack_from(data, q)[0] <= limit:
                return length
        log.error("segment %s: corrupt message at offset %d (%s) found while serving a read; "
                  "verifying the segment", self.path, self.base_offset + pos + q, r.error)
        self.verify(save=True)
        return min(length, self._servable(pos, limit))

    def _servable(self, pos: int, limit: int) -> int:
        """Bytes from ``pos`` before the next damaged range (or ``limit``).

        Raises:
            CorruptRangeError: ``pos`` lies in a damaged range.
        """
        self._check_damage(pos)
        for d in self.damaged:
            if d.start > pos:
                return min(limit, d.start) - pos
        return limit - pos

    def _check_damage(self, pos: int) -> None:
        """Raise CorruptRangeError when file position ``pos`` lies in a damaged range."""
        for d in self.damaged:
            if d.start <= pos < d.end:
                raise CorruptRangeError(
                    f"offset {self.base_offset + pos} lies in damaged range {self.base_offset + d.start}.."
                    f"{self.base_offset + d.end} of segment {self.path.name} ({d.reason}); the next valid "
                    f"offset is {self.base_offset + d.end}; 'ingest log dump {self.path}' shows it",
                    start_offset=self.base_offset + d.start, next_offset=self.base_offset + d.end,
                    messages=d.messages)

    def check_boundary(self, pos: int, visible: int) -> int:
        """Check that file position ``pos`` starts a message; return bytes readable from it.

        Raises:
            OffsetOutOfRangeError: ``pos`` is not a message boundary below ``visible``.
            CorruptRangeError: ``pos`` lies in a damaged range of this segment.
        """
        self.ensure_index()
        if pos >= 0:
            self._check_damage(pos)  # a damaged range may run past the file's end (note_gap)
        if pos > visible or pos < 0:
            raise OffsetOutOfRangeError(f"offset {self.base_offset + pos} is past the end of segment {self.path.name}")
        if pos == visible:
            return 0
        avail = self._servable(pos, visible)
        index = self.index
        i = bisect_right(index, pos) - 1
        p = index[i] if i >= 0 else 0
        if p != pos:
            self._walk(p, pos)
        return avail

    def _walk(self, p: int, pos: int) -> None:
        """Follow length fields from boundary ``p``; ``pos`` must be hit exactly."""
        with self.pinned() as fd:
            self._walk_fd(fd, p, pos)

    def _walk_fd(self, fd: int, p: int, pos: int) -> None:
        unpack = LENGTH.unpack_from
        while p < pos:
            buf = os.pread(fd, min(pos - p, WALK_CHUNK) + LENGTH_SIZE, p)
            start = p
            n = len(buf) - LENGTH_SIZE
            stepped = False
            while p < pos and p - start <= n:
                length = unpack(buf, p - start)[0]
                if length < OVERHEAD_V0:  # the smallest message (magic 0)
                    break
                p += LENGTH_SIZE + length
                stepped = True
            if not stepped:
                break
        if p != pos:
            raise OffsetOutOfRangeError(
                f"offset {self.base_offset + pos} is not a message boundary in segment {self.path.name}"
            )
