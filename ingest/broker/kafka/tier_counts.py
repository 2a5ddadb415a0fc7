"""Broker-tier audit counts: the records a leader appended from producers, per topic, partition and window.

The broker that first receives a message counts it at append, per window of the **record timestamp**
(``floor(timestamp / window) * window``; a timestamp <= 0 counts in window 0, which the audit reports as
out of range). Only a leader's append of a client's Produce counts: a follower's copy, the mirror's
AppendAt and this broker's own internal topics never do, so a message is counted once, at the tier
where it entered the pipeline.

A batch's records lie between its first and its max timestamp in the common case: when both are in
one window, the batch's record count goes there without touching a record. Otherwise only the
records' timestamp deltas are read (a varint walk; a compressed batch is inflated first). A topic
with LogAppendTime counts every record at the batch's append time. A record stamped *before* its
batch's first record (a negative delta, possible when an application sets timestamps out of order)
is counted in the first record's window when the fast path applies: the one inexactness, measured
nowhere because no client here does it (docs/audit.md, "Broker-tier counts").

What has been counted is kept per partition as contiguous offset ranges (appends of one partition
may be counted by two network threads out of offset order); :meth:`TierCounter.take` hands the
publisher the counts of the contiguous prefix from the last published offset, and
:meth:`TierCounter.published` forgets them once the monitoring events are replicated.

Concurrency contract: every method may be called from any thread (one lock, a leaf; the checkpoint's
first write of a partition's leader epoch happens outside it).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ingest.records.batch import LOG_APPEND_TIME, NO_TIMESTAMP, BatchHeader, iter_batches
from ingest.records.record import records_body
from ingest.records.varint import read_varint, read_varlong

log = logging.getLogger(__name__)

OUT_OF_RANGE_WINDOW = 0
"""Window of records without a usable timestamp (<= 0)."""


def window_of(ts: int, window_ms: int) -> int:
    return ts - ts % window_ms if ts > 0 else OUT_OF_RANGE_WINDOW


def batch_windows(data, pos: int, h: BatchHeader, window_ms: int, *, append_time: int = NO_TIMESTAMP,
                  inflate_limit: int = 100 * 1024 * 1024) -> dict[int, int]:
    """Records of the batch at ``pos`` of ``data`` per window start (see the module docstring).

    Raises:
        InvalidRecordError / CorruptRecordError: the records do not walk (never for a validated batch).
    """
    n = h.records_count
    if append_time != NO_TIMESTAMP or h.timestamp_type == LOG_APPEND_TIME:
        return {window_of(append_time if append_time != NO_TIMESTAMP else h.max_timestamp, window_ms): n}
    first, top = h.base_timestamp, h.max_timestamp
    lo, hi = window_of(first, window_ms), window_of(top, window_ms)
    if lo == hi:
        return {lo: n}
    return _walk(records_body(data, pos, h, inflate_limit=inflate_limit), n, first, window_ms)


def _walk(body, n: int, base_ts: int, window_ms: int) -> dict[int, int]:
    """The timestamp deltas of ``n`` records: length, attributes, delta, then a jump to the next record."""
    out: dict[int, int] = {}
    p = 0
    for _ in range(n):
        length, q = read_varint(body, p)
        delta, _ = read_varlong(body, q + 1)
        ws = window_of(base_ts + delta, window_ms)
        out[ws] = out.get(ws, 0) + 1
        p = q + length
    return out


@dataclass
class _Pending:
    """Counted but unpublished ranges of one partition: ``[first, next)`` -> per-window counts."""

    published: int                        # next offset not yet published
    ranges: dict[int, tuple[int, dict[int, int]]] = field(default_factory=dict)  # first -> (next, counts)
    stuck_at: int | None = None           # where the previous take found a hole in the counted offsets


@dataclass(frozen=True)
class Taken:
    """The counts of one partition's offsets ``[first, next)`` handed to the publisher."""

    topic: str
    partition: int
    first: int
    next: int
    counts: dict[int, int]
    ranges: tuple[int, ...] = ()          # the first offsets of the counted ranges it sums


class TierCounter:
    """Per partition: what this broker appended as leader from producers, not yet published.

    Args:
        window_ms: the window of the counts (``audit.counts.window.ms``).
        note_epoch: called with (topic, partition, leader epoch, first offset) the first time a partition is
            counted in a leader epoch, before its counts are kept: the checkpoint records it (durably) so
            that recovery can tell this broker's appends from copies (:mod:`.tier_counts_publisher`).
        excluded: topics never counted (the counts topic itself).
    """

    def __init__(self, window_ms: int, note_epoch: Callable[[str, int, int, int], int],
                 excluded: frozenset[str] = frozenset()) -> None:
        self.window_ms = window_ms
        self._note_epoch = note_epoch
        self._excluded = excluded
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], _Pending] = {}
        self._epochs: set[tuple[str, int, int]] = set()
        self.counted = 0

    def counts(self, topic: str) -> bool:
        """Whether appends to ``topic`` are counted (internal ``__`` topics and the excluded never are)."""
        return not topic.startswith("__") and topic not in self._excluded

    def appended(self, topic: str, partition: int, epoch: int, data, header: BatchHeader, first_offset: int,
                 append_time: int = NO_TIMESTAMP) -> None:
        """Count one producer batch a leader appended at ``first_offset`` (``data``: its bytes as validated)."""
        if not self.counts(topic):
            return
        if (topic, partition, epoch) not in self._epochs:
            published = self._note_epoch(topic, partition, epoch, first_offset)
            with self._lock:
                self._epochs.add((topic, partition, epoch))
                self._parts.setdefault((topic, partition), _Pending(published))
        per = batch_windows(data, 0, header, self.window_ms, append_time=append_time)
        self.add(topic, partition, first_offset, first_offset + header.last_offset_delta + 1, per)

    def add(self, topic: str, partition: int, first: int, nxt: int, per: dict[int, int],
            published: int | None = None) -> None:
        """Keep the counts of offsets ``[first, nxt)``; recovery's recount passes the checkpoint's ``published``
        and ranges below it are dropped (published before the restart)."""
        with self._lock:
            p = self._parts.get((topic, partition))
            if p is None:
                p = self._parts[(topic, partition)] = _Pending(first if published is None else published)
            if (published is not None and first < p.published) or first in p.ranges:
                return
            p.ranges[first] = (nxt, per)
            self.counted += sum(per.values())

    def take(self) -> list[Taken]:
        """Per partition, the counts to publish next (kept until :meth:`published`): the counted ranges from
        the last published offset on while they follow each other. A hole in the counted offsets is an append
        still being counted, or offsets this broker did not append (a leader's copies it followed, a log start
        moved by retention, a truncated tail): a hole still there at the next take is stepped over. Ranges
        below the published offset (counted after a later append was published) go with the next range."""
        out = []
        with self._lock:
            for (topic, partition), p in self._parts.items():
                first = nxt = p.published
                counts: dict[int, int] = {}
                late = [k for k in p.ranges if k < first]
                keys = list(late)
                for k in late:
                    for ws, n in p.ranges[k][1].items():
                        counts[ws] = counts.get(ws, 0) + n
                while True:
                    if nxt in p.ranges:
                        keys.append(nxt)
                        end, per = p.ranges[nxt]
                        for ws, n in per.items():
                            counts[ws] = counts.get(ws, 0) + n
                        nxt = end
                        continue
                    later = [k for k in p.ranges if k > nxt]
                    if later and p.stuck_at == nxt:
                        nxt = min(later)
                        continue
                    p.stuck_at = nxt if later else None
                    break
                if nxt > first:
                    out.append(Taken(topic, partition, first, nxt, counts, tuple(keys)))
        return out

    def published(self, taken: Taken) -> None:
        """``taken`` is replicated in the counts topic: forget it, the partition's next range starts after it."""
        with self._lock:
            p = self._parts.get((taken.topic, taken.partition))
            if p is None or p.published != taken.first:
                return
            for k in taken.ranges:
                p.ranges.pop(k, None)
            p.published = taken.next
            p.stuck_at = None

    def forget_epochs(self) -> None:
        """Epochs are noted again (after the checkpoint was rewritten from scratch)."""
        with self._lock:
            self._epochs.clear()


def recount(log, first: int, epochs: set[int], window_ms: int, chunk: int = 1 << 20) -> Iterator[tuple[int, int, dict]]:
    """``(first offset, next offset, counts)`` of every batch of ``log`` from ``first`` on whose partition
    leader epoch is in ``epochs`` (this broker led it then: its own appends), for recovery."""
    pos, end = max(first, log.start_offset), log.end_offset
    while pos < end:
        with log.read(pos, chunk) as sl:
            data = sl.read_bytes()
            nxt = sl.next_offset
        if not data or nxt <= pos:
            break
        for bpos, h in iter_batches(data):
            if h.next_offset <= pos or h.partition_leader_epoch not in epochs or h.is_control:
                continue
            yield h.base_offset, h.next_offset, batch_windows(data, bpos, h, window_ms)
        pos = nxt
