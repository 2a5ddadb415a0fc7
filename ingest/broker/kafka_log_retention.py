"""Retention of a Kafka-format log: by time (each segment's largest record timestamp) and by size,
every deletion recorded before the unlink (docs/log-format.md, "Kafka-format logs").

:class:`KafkaLogRetention` is a base of :class:`~ingest.broker.kafka_log.KafkaLog` and works on its
state under its lock; deleted segments leave the published view before their files are unlinked,
so readers holding them finish undisturbed.
"""
from __future__ import annotations

import logging
from typing import Callable

from ingest.broker.deletion_log import write_deletion
from ingest.broker.kafka_segment import KafkaSegment

log = logging.getLogger(__name__)


class KafkaLogRetention:
    """Retention of a :class:`~ingest.broker.kafka_log.KafkaLog` (mixed into it)."""

    def delete_segments(self, predicate: Callable[[KafkaSegment], bool]) -> tuple[int, int]:
        """Delete the oldest segments while ``predicate`` holds; returns (segments, bytes).

        Each deletion is recorded (fsynced) in ``deleted-segments`` before its file is unlinked.
        If every segment matches, the log rolls first (when the active one holds data) and the
        new empty segment stays, so the log start becomes the log end.
        """
        with self._lock:
            if self._closed or self._offline is not None:
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
            nexts = [s.base_offset for s in v.segments[1:k + 1]]
            self._view = v._replace(segments=v.segments[k:], bases=v.bases[k:])
        freed = 0
        for seg, nxt in zip(victims, nexts):
            freed += seg.size
            lost = sum((nxt if d.next_offset is None else d.next_offset) - d.first_offset for d in seg.damaged)
            if write_deletion(self.directory, seg.path.name, seg.base_offset, nxt, nxt - seg.base_offset - lost,
                              seg.size, self._clock.time_ms(), damaged=bool(seg.damaged), log_name=self.name):
                seg.delete()
            else:  # unrecorded: the file stays (out of the view) for the next start's retention to record
                seg.close()
        log.info("log %s: retention deleted %d segment(s), %d bytes; start offset now %d",
                 self.name, len(victims), freed, self.start_offset)
        return len(victims), freed

    def cleanup(self, now_ms: int) -> tuple[int, int]:
        """Retention by time (each segment's largest record timestamp), then by size; (segments, bytes)."""
        s = self.settings
        n = b = 0
        if s.retention_ms >= 0:
            n, b = self.delete_segments(lambda seg: now_ms - seg.largest_timestamp > s.retention_ms)
        if s.retention_bytes >= 0:
            excess = self.size - s.retention_bytes
            if excess > 0:
                budget = [excess]

                def over(seg: KafkaSegment) -> bool:
                    if budget[0] - seg.size < 0:
                        return False
                    budget[0] -= seg.size
                    return True

                n2, b2 = self.delete_segments(over)
                n, b = n + n2, b + b2
        return n, b

