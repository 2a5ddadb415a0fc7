"""Retention of a partition log, in either format: oldest segments by time, then by size, each deletion recorded.

Every deletion is written to the partition's ``deleted-segments`` file before the unlink
(:mod:`ingest.broker.deletion_log`; docs/log-format.md, "Retention").

:class:`LogRetention` is a base of :class:`~ingest.broker.segmented_log.SegmentedLog`'s formats and
works on its state under its lock; deleted segments leave the published view before their files are
unlinked, so readers holding them finish undisturbed.
"""
from __future__ import annotations

import logging
from typing import Callable

from ingest.broker.deletion_log import record_deletion
from ingest.broker.segment_file import SegmentFile

log = logging.getLogger(__name__)


class LogRetention:
    """Retention of a log (mixed into it); the format names its limits (:meth:`_retention_limits`)."""

    def _retention_limits(self) -> tuple[int, int]:
        """The format's ``(retention ms, retention bytes)``; -1: no limit."""
        raise NotImplementedError

    def delete_segments(self, predicate: Callable[[SegmentFile], bool]) -> tuple[int, int]:
        """Delete the oldest segments while ``predicate`` holds; returns (segments, bytes).

        Each deletion is recorded (fsynced) in the partition's ``deleted-segments`` file before its
        file is unlinked (:mod:`ingest.broker.deletion_log`). The active segment is never deleted
        under an append: if every segment matches, the log rolls first (when the active one holds
        data) and the new empty segment stays, so the log start becomes the log end.
        """
        with self._lock:
            if self._closed or self._offline is not None:  # recovery decides at the next start
                return 0, 0
            segs = self._view.segments
            k = 0
            while k < len(segs) and predicate(segs[k]):
                k += 1
            if k == 0:
                return 0, 0
            if k == len(segs):
                if self._active.size == 0:
                    k -= 1
                else:
                    self._roll_locked()
                if k == 0:
                    return 0, 0
            v = self._view
            victims = v.segments[:k]
            nexts = v.bases[1:k + 1]
            self._view = v._replace(segments=v.segments[k:], bases=v.bases[k:])
        freed = 0
        for seg, nxt in zip(victims, nexts):
            freed += seg.size
            if record_deletion(self.directory, seg, nxt, self._clock.time_ms(), log_name=self.name):  # before the unlink
                seg.delete()
            else:  # unrecorded: the file stays (out of the view) for the next start's retention to record
                seg.close()
        log.info("log %s: retention deleted %d segment(s), %d bytes; start offset now %d",
                 self.name, len(victims), freed, self.start_offset)
        return len(victims), freed

    def cleanup(self, now_ms: int) -> tuple[int, int]:
        """Apply retention by time (each segment's :attr:`~ingest.broker.segment_file.SegmentFile.retention_time_ms`),
        then by size; returns (segments, bytes) deleted."""
        retention_ms, retention_bytes = self._retention_limits()
        n = b = 0
        if retention_ms >= 0:
            n, b = self.delete_segments(lambda seg: now_ms - seg.retention_time_ms > retention_ms)
        if retention_bytes >= 0:
            excess = self.size - retention_bytes
            if excess > 0:
                budget = [excess]

                def over(seg: SegmentFile) -> bool:
                    if budget[0] - seg.size < 0:
                        return False
                    budget[0] -= seg.size
                    return True

                n2, b2 = self.delete_segments(over)
                n, b = n + n2, b + b2
        return n, b
