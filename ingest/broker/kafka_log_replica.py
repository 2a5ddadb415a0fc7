"""What only a replica's Kafka-format log does: cut back to agree with a leader, restart at the leader's
log start (docs/replication.md).

:class:`KafkaReplicaLogOps` is a base of :class:`~ingest.broker.kafka_log.KafkaLog` and works on its
state under its lock; the log's concurrency contract applies unchanged.
"""
from __future__ import annotations

import logging
from bisect import bisect_right

from ingest.broker.kafka_segment import KafkaSegment
from ingest.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)


class KafkaReplicaLogOps:
    """Replica operations of a :class:`~ingest.broker.kafka_log.KafkaLog` (mixed into it)."""

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to ``offset``, which must start a batch (or be the log end); returns the
        bytes removed. Segments after it are deleted; the one holding it becomes the active segment.
        (Kafka's ``truncateTo`` removes the whole batch holding an offset; here the caller names
        the batch boundary it means, and any other offset is refused.)

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside the log or not a batch's base offset.
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
            seg.next_offset = offset
            self._active = seg
            self._write_end = offset
            self._unflushed = 0
            self._view = v._replace(segments=v.segments[:i + 1], bases=v.bases[:i + 1], end=offset,
                                    end_position=seg.size)
        for victim in victims:
            victim.delete()
        log.warning("log %s: truncated to offset %d (%d bytes removed) to agree with the partition leader",
                    self.name, offset, removed)
        return removed

    def reset_to(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (a follower below the leader's log start).

        Raises:
            StorageError / LogOfflineError: the new segment cannot be created.
        """
        with self._lock:
            self._check_open()
            victims = self._view.segments
            for seg in victims:
                seg.delete()
            try:
                seg = KafkaSegment.create(self.directory, offset, self._clock, self.settings.index_interval_bytes,
                                          self._files, self._plausible_batch)
            except OSError as exc:
                raise self._go_offline_locked(f"creating a segment at {offset} failed: {exc.strerror}") from exc
            seg.next_offset = offset
            self._active = seg
            self._write_end = offset
            self._unflushed = 0
            self._view = self._view._replace(segments=(seg,), bases=(offset,), end=offset, end_position=0)
        log.warning("log %s: reset to start empty at offset %d (%d segment(s) deleted) to follow the leader",
                    self.name, offset, len(victims))
