"""What only a replica's log does, in either format: cut back to agree with a leader, restart at its log start.

docs/replication.md tells when a follower does either.

:class:`ReplicaLogOps` is a base of :class:`~ingest.broker.segmented_log.SegmentedLog`'s formats and
works on its state under its lock (the log's concurrency contract applies unchanged: writers
serialise on the lock and publish a new view; readers holding an older view keep their segments
until release). Where a cut may fall is the format's: a segment's ``truncate_to_offset``.
"""
from __future__ import annotations

import logging
from bisect import bisect_right

from ingest.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)


class ReplicaLogOps:
    """Replica operations of a log (mixed into it)."""

    def _log_cut_locked(self, offset: int, emptied: bool) -> None:
        """The format's state kept beside the log follows a cut to ``offset`` (``emptied``: by
        :meth:`reset_to`); called under the log's lock with the new view published."""

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to ``offset`` (a message boundary in the 0.7 log, a batch's base offset in
        the Kafka format; or the log end); returns the bytes removed. A follower does this before
        following a new leader, so that its log agrees with the leader's (docs/replication.md).
        Segments after the one holding ``offset`` are deleted; that one becomes the active segment
        (emptied, if ``offset`` is its base). (Kafka's ``truncateTo`` removes the whole batch
        holding an offset; here the caller names the boundary it means, and any other offset is
        refused.)

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside the log or not a boundary.
            LogOfflineError / StorageError: the log is offline or the truncation failed.
        """
        with self._lock:
            self._check_open()
            if offset == self._write_end:
                return 0
            v = self._view
            if not v.bases[0] <= offset < self._write_end:
                raise OffsetOutOfRangeError(f"cannot truncate log {self.name} to {offset}: valid offsets are "
                                            f"{v.bases[0]}..{self._write_end}")
            i = bisect_right(v.bases, offset) - 1
            seg = v.segments[i]
            victims = v.segments[i + 1:]
            removed = sum(s.size for s in victims)
            try:
                removed += seg.truncate_to_offset(offset)
            except OSError as exc:
                raise self._go_offline_locked(f"truncating {seg.path} to {offset} failed: {exc.strerror}") from exc
            self._active = seg
            self._write_end = offset
            self._unflushed = 0
            self._view = v._replace(segments=v.segments[:i + 1], bases=v.bases[:i + 1], end=min(v.end, offset),
                                    end_position=seg.size)
            self._log_cut_locked(offset, emptied=False)
        for victim in victims:
            victim.delete()
        log.warning("log %s: truncated to offset %d (%d bytes removed) to agree with the partition leader",
                    self.name, offset, removed)
        return removed

    def reset_to(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (a follower whose fetch fell below the
        leader's log start, or whose log has nothing in common with the leader's).

        Raises:
            StorageError / LogOfflineError: the new segment cannot be created.
        """
        with self._lock:
            self._check_open()
            victims = self._reset_locked(offset)
        log.warning("log %s: reset to start empty at offset %d (%d segment(s) deleted) to follow the leader",
                    self.name, offset, len(victims))

    def _reset_locked(self, offset: int) -> tuple:
        """:meth:`reset_to` under the log's lock; returns the deleted segments."""
        victims = self._view.segments
        for seg in victims:
            seg.delete()
        try:
            seg = self._create_segment(offset)
        except OSError as exc:
            raise self._go_offline_locked(f"creating a segment at {offset} failed: {exc.strerror}") from exc
        self._active = seg
        self._write_end = offset
        self._unflushed = 0
        self._view = self._view._replace(segments=(seg,), bases=(offset,), end=offset, end_position=0)
        self._log_cut_locked(offset, emptied=True)
        return victims
