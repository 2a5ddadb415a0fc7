"""A Kafka-format log's idempotent-producer state kept with the log: loaded at open, saved at each roll, rebuilt after a cut.

:class:`KafkaLogProducers` is a base of :class:`~ingest.broker.kafka_log.KafkaLog` and keeps its
:class:`~ingest.broker.producer_state.ProducerState` (``producers``) as Kafka's ``ProducerStateManager``
does beside ``UnifiedLog``:

- **snapshots**: when the log rolls, the state before the new segment is written to
  ``<new segment's base offset>.snapshot``, a sidecar of that segment (deleted with it by retention or
  truncation; docs/log-format.md);
- **open** (after recovery) and **truncation** (a follower cutting its log to agree with its leader):
  the newest readable snapshot of a segment still in the log, then the headers of every batch after it
  to the log end; a log without snapshot (older than them, or whose snapshots were lost) is scanned from
  its start. Only batch headers are read (61 bytes per batch, by chunks);
- **restart empty** (``reset_to``): the state is cleared, as Kafka's ``truncateFullyAndStartAt``;
- **retention** deletes snapshots with their segments and keeps the state in memory (Kafka 2.5+);
  producers expire ``producer.id.expiration.ms`` after their last batch's timestamp, checked when
  retention runs.

Concurrency contract: the state is read and changed under the log's lock only (appends, rolls, cuts,
expiry); the scans read segment files the lock keeps in the view.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Iterator

from ingest.broker.producer_state import ProducerState, read_snapshot, snapshot_path, write_snapshot
from ingest.records.batch import HEADER, MIN_LENGTH, BatchHeader

log = logging.getLogger(__name__)

SCAN_CHUNK = 256 * 1024


def batch_headers(seg, start: int, limit: int) -> Iterator[BatchHeader]:
    """The headers of the batches of segment ``seg`` from file position ``start`` (a batch start) to
    ``limit``, damaged ranges stepped over."""
    with seg.pinned() as fd:
        buf, at, p = b"", start, start
        while True:
            p = seg._skip_damage(p)
            if p >= limit:
                return
            off = p - at
            if off < 0 or off + HEADER.size > len(buf):
                buf = os.pread(fd, min(SCAN_CHUNK, max(limit - p, HEADER.size)), p)
                at, off = p, 0
                if len(buf) < HEADER.size:
                    return
            h = BatchHeader._make(HEADER.unpack_from(buf, off))
            if h.length < MIN_LENGTH:
                return
            yield h
            p += h.size


class KafkaLogProducers:
    """The producer state of a Kafka-format log (mixed into it); see the module docstring."""

    producers: ProducerState

    def _load_producers_locked(self) -> None:
        """Build ``producers`` for the log as it is now (at open, or after a cut; caller holds the lock
        or is the only user)."""
        began = time.perf_counter()
        segs = self._view.segments
        state, first, snap = None, 0, None
        for i in range(len(segs) - 1, -1, -1):
            path = snapshot_path(self.directory, segs[i].base_offset)
            if segs[i].base_offset <= self._write_end and path.exists():
                state = read_snapshot(self.name, path)
                if state is not None:
                    first, snap = i, segs[i].base_offset
                    break
        if state is None:
            state = ProducerState(self.name)
        batches = 0
        for seg in segs[first:]:
            for h in batch_headers(seg, 0, seg.size):
                if h.base_offset >= self._write_end:
                    break
                state.update(h, h.base_offset)
                batches += 1
        self.producers = state
        if batches or len(state):
            log.info("log %s: producer state of %d producer id(s) from %s and %d batch header(s) in %.3f s",
                     self.name, len(state), "the log's start" if snap is None else f"the snapshot at {snap}",
                     batches, time.perf_counter() - began)

    def _roll_locked(self):
        seg = super()._roll_locked()
        try:
            write_snapshot(self.producers, snapshot_path(self.directory, seg.base_offset))
        except OSError as exc:   # the next start scans more of the log
            log.warning("log %s: could not write the producer-state snapshot at %d: %s", self.name,
                        seg.base_offset, exc.strerror)
        return seg

    def _log_cut_locked(self, offset: int, emptied: bool) -> None:
        """After a truncation to ``offset`` (or a restart empty there): the state of what stays."""
        if emptied:
            self.producers = ProducerState(self.name)
        else:
            self._load_producers_locked()

    def expire_producers(self, now_ms: int) -> int:
        """Drop producers idle ``producer.id.expiration.ms``; returns how many."""
        with self._lock:
            n = self.producers.expire(now_ms, self.settings.producer_id_expiration_ms)
        if n:
            log.info("log %s: %d producer id(s) expired (no batch for producer.id.expiration.ms=%d)", self.name,
                     n, self.settings.producer_id_expiration_ms)
        return n
