"""What only a replica's log does: cut back to agree with a leader, restart at the leader's log
start, and overwrite damaged ranges with a healthy replica's bytes (docs/replication.md).

:class:`ReplicaLogOps` is a base of :class:`~ingest.broker.log.Log` and works on its state
under its lock (the log's concurrency contract applies unchanged: writers serialise on the
lock and publish a new view; readers holding an older view keep their segments until release).
"""
from __future__ import annotations

import logging
from bisect import bisect_right

from ingest.broker.segment import Segment, storage_error
from ingest.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)


class ReplicaLogOps:
    """Replica operations of a :class:`~ingest.broker.log.Log` (mixed into it)."""

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to ``offset`` (a message boundary at or below the log end); returns the
        bytes removed. A follower does this before following a new leader, so that its log agrees
        with the leader's (docs/replication.md). Segments starting at or after ``offset`` are
        deleted (the first one is kept, emptied, if ``offset`` is the log start).

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside the log or not a message boundary.
            LogOfflineError / StorageError: the log is offline or the truncation failed.
        """
        with self._lock:
            self._check_open()
            if offset == self._write_end:
                return 0
            v = self._view
            if not v.bases[0] <= offset < self._write_end:
                raise OffsetOutOfRangeError(
                    f"cannot truncate log {self.name} to {offset}: valid offsets are {v.bases[0]}..{self._write_end}")
            i = bisect_right(v.bases, offset) - 1
            seg = v.segments[i]
            if offset > seg.base_offset:
                seg.check_boundary(offset - seg.base_offset, seg.size)
            removed = self._write_end - offset
            victims = v.segments[i + 1:]
            try:
                seg.truncate_to(offset - seg.base_offset)
            except OSError as exc:
                raise self._go_offline_locked(f"truncating {seg.path} to {offset} failed: {exc.strerror}") from exc
            seg.reopen_for_append()
            self._active = seg
            self._write_end = offset
            self._unflushed = 0
            self._view = v._replace(segments=v.segments[:i + 1], bases=v.bases[:i + 1], end=min(v.end, offset))
        for victim in victims:
            victim.delete()
        log.warning("log %s: truncated to %d (%d bytes removed) to agree with the partition leader",
                    self.name, offset, removed)
        return removed

    def damaged_ranges(self) -> list[tuple[int, int]]:
        """``(start, end)`` offsets of every damaged range of the log (docs/log-format.md)."""
        return [(seg.base_offset + d.start, seg.base_offset + d.end)
                for seg in self._view.segments for d in seg.damaged]

    def repair(self, offset: int, data: bytes) -> bool:
        """Overwrite a damaged range starting at ``offset`` with ``data``, the same bytes from a
        healthy replica; True when that segment has no damage left.

        Raises:
            OffsetOutOfRangeError: ``offset`` is not in a segment, or ``data`` crosses its end.
            StorageError: the write failed.
        """
        with self._lock:
            self._check_open()
            v = self._view
            i = bisect_right(v.bases, offset) - 1
            if i < 0:
                raise OffsetOutOfRangeError(f"offset {offset} is before log {self.name}")
            seg = v.segments[i]
            pos = offset - seg.base_offset
            if pos + len(data) > seg.size:
                raise OffsetOutOfRangeError(
                    f"repair of {len(data)} bytes at {offset} crosses the end of segment {seg.path.name}")
            try:
                healed = seg.repair(pos, data)
            except OSError as exc:
                raise storage_error(f"cannot repair {seg.path} at {offset}", exc) from exc
        log.warning("log %s: damaged range at %d overwritten with %d bytes from another replica; segment %s",
                    self.name, offset, len(data), "intact again" if healed else "still has damage")
        return healed

    def reset_to(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (a follower whose fetch fell below the
        leader's log start, or whose log has nothing in common with the leader's).

        Raises:
            StorageError / LogOfflineError: the new segment cannot be created.
        """
        with self._lock:
            self._check_open()
            victims = self._view.segments
            for seg in victims:
                seg.delete()
            try:
                seg = Segment.create(self.directory, offset, self._clock, self.settings.index_interval, self._files)
            except OSError as exc:
                raise self._go_offline_locked(f"creating a segment at {offset} failed: {exc.strerror}") from exc
            self._active = seg
            self._write_end = offset
            self._unflushed = 0
            self._view = self._view._replace(segments=(seg,), bases=(offset,), end=offset)
        log.warning("log %s: reset to start empty at offset %d (%d segment(s) deleted) to follow the leader",
                    self.name, offset, len(victims))
