"""PartitionCopier: copies one source partition to its target partition, exactly once.

The same cycle for both kinds of topic: a 0.7 topic's source and target are
:class:`~ingest.mirror.source_reader.SourceReader` and :class:`~ingest.mirror.target_writer.TargetWriter`
(byte offsets: the target's offsets are the source's plus a constant), a Kafka topic's
:class:`~ingest.mirror.kafka_io.KafkaSourceReader` and :class:`~ingest.mirror.kafka_io.KafkaTargetWriter`
(``source.logical``: record offsets, kept by the copy, so the target's offsets are the source's).
One thread per unit runs :meth:`PartitionCopier.run`;
:func:`ingest.mirror.copier_factory.make_copier` builds a copier from the mirror process's shared
parts. The copy cycle, the checkpoint, the resume rule, its states and what happens at a source's
retention gap: docs/mirroring-data-path.md.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable, NamedTuple

from ingest.client.deleted_segments import MISSING_SEGMENTS, SegmentTally, split_gap
from ingest.lost_ranges import RETENTION
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import (IngestError, MirrorError, MirrorOwnershipLostError, OffsetMismatchError,
                           OffsetOutOfRangeError)
from ingest.mirror import gaps as lr
from ingest.mirror.checkpoint import Checkpoint, CheckpointStore, carried_over, former_home_checkpoint
from ingest.mirror.copier_io import TRANSIENT, publish_safely
from ingest.mirror.fallback import FallbackSender
from ingest.mirror.mapping import EXACT_STATUS, FALLBACK_STATUS, MirrorUnit
from ingest.mirror.source_reader import SourceReader
from ingest.mirror.target_writer import TargetWriter
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_waits = RateLimitedLog(log, interval_s=60.0)
"""A step that keeps failing (a target whose disk is full, a source away) is logged once a minute
per unit and cause; the repeats are counted into one summary line."""


class Lag(NamedTuple):
    """``bytes`` = source end - position; ``seconds`` = now - event time of the last copied message (0 caught up)."""

    bytes: int | None
    seconds: float | None


class PartitionCopier:
    """Copies ``unit`` (see the module docstring for the surface and the cycle)."""

    def __init__(self, unit: MirrorUnit, *, group: str, zk, source: SourceReader, target: TargetWriter | None = None,
                 fallback: FallbackSender | None = None, counter_factory: Callable | None = None,
                 publisher=None, header_reader=None, checkpoint_interval_ms: int = 1000,
                 mirror_server: str = "", idle_wait_s: float = 0.1, max_backoff_s: float = 5.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if unit.fallback and fallback is None:
            raise MirrorError(f"{unit}: a fallback unit needs a FallbackSender (the target producer)")
        if not unit.fallback and target is None:
            raise MirrorError(f"{unit}: a one-to-one unit needs a TargetWriter for target partition "
                              f"{unit.target_partition}")
        self.unit = unit
        self.group = group
        self.session = unit.session(group)
        self.source = source
        self.target = target
        self.fallback = fallback
        self.counter_factory = counter_factory
        self.counter = None
        self.publisher = publisher
        self.header_reader = header_reader
        self.interval_s = checkpoint_interval_ms / 1000.0
        self.mirror_server = mirror_server
        self.idle_wait_s = idle_wait_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.store = CheckpointStore(zk, group, unit)
        self.state = "starting"
        self.position: int | None = None
        self.target_end: int | None = None
        self.stats = {"messages": 0, "bytes": 0, "sets": 0, "lost_ranges": 0, "lost_messages": 0,
                      "mismatches": 0, "retries": 0, "recounted_messages": 0, "checkpoints": 0}
        self._cp: Checkpoint | None = None
        self._next_checkpoint = 0.0
        self._source_end: int | None = None
        self._last_set: bytes | None = None
        self._last_time_ms: int | None = None
        self._recent: deque[tuple[int, bytes]] = deque()  # (source offset, set): the last <= 1 MiB copied
        self._recent_bytes = 0
        # copied, not counted yet: (source offset, target offset, set, recount, next source, next target offset)
        self._uncounted: deque[tuple[int, int | None, bytes, bool, int, int | None]] = deque()
        self._counted: tuple[int, int | None] = (0, 0)   # (source, target) offsets counted up to: checkpointed
        self._recount_from: int | None = None             # [from, to) of the source to re-read for counting only
        self._recount_to = self._recount_delta = 0
        self._pending_lost: list[dict] = []
        self._bounds_from: int | None = None

    @property
    def mode(self) -> str:
        return FALLBACK_STATUS if self.unit.fallback else EXACT_STATUS

    def __repr__(self) -> str:
        return f"PartitionCopier({self.unit})"

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop_event: threading.Event) -> None:
        """Copy until ``stop_event`` is set, then write a last checkpoint. Returns early (state
        ``lost ownership``) when another owner moved the checkpoint.

        Raises:
            MirrorError: the partition cannot be copied (unreadable checkpoint, mapping changed under it,
                source offsets that do not fit the checkpoint); the message names the unit and offsets.
        """
        backoff = 0.05
        try:
            while not stop_event.is_set():
                try:
                    if self.position is None:
                        self._start()
                    self._drain_counts()
                    moved = self._step()
                    if self.clock.monotonic() >= self._next_checkpoint:
                        self._checkpoint()
                    backoff = 0.05
                except TRANSIENT as exc:
                    self.stats["retries"] += 1
                    self.state = f"waiting: {exc}"
                    _waits.warning(str(self.unit), type(exc).__name__, "%s: %s; retrying in %.2f s", self.unit, exc,
                                   backoff)
                    self._refresh_source_end()
                    stop_event.wait(backoff)
                    backoff = min(self.max_backoff_s, backoff * 2)
                    continue
                if not moved:
                    stop_event.wait(self.idle_wait_s)
            if self.position is not None:
                try:
                    self._checkpoint(closing=True)
                except TRANSIENT as exc:
                    log.warning("%s: the last checkpoint could not be written (%s); a restart resumes from "
                                "the previous one (no loss, no duplicate)", self.unit, exc)
            self.state = "stopped"
        except MirrorOwnershipLostError as exc:
            self.state = "lost ownership"
            log.warning("%s", exc)
        except MirrorError as exc:
            self.state = f"failed: {exc}"
            raise

    def _start(self) -> None:
        cp = self.store.read()
        former = former_home_checkpoint(self.store.zk, self.group, self.unit)
        if former is not None and (cp is None or former[1].source_offset > cp.source_offset):
            log.info("%s: home broker now %d (reassigned); resuming from the checkpoint under home broker %d "
                     "(source offset %d, target offset %s)", self.unit, self.unit.broker_id, former[0],
                     former[1].source_offset, former[1].target_offset)
            cp = carried_over(cp, former[1])
        if cp is not None and cp.target_partition != self.unit.target_partition:
            raise MirrorError(f"{self.unit}: the checkpoint {self.store.path} names target partition "
                              f"{cp.target_partition}, the mapping {self.unit.target_partition}; the mapping of a "
                              "checkpointed partition cannot change (delete the checkpoint to start it over)")
        if cp is None:
            cp = Checkpoint(0, None if self.unit.fallback else 0, self.unit.target_partition)
        self.counter = self.counter_factory(cp.counts) if self.counter_factory is not None else None
        self._pending_lost = list(cp.pending_lost)
        self._cp = cp
        self._counted = (cp.source_offset, cp.target_offset)
        if self.unit.fallback:
            self.position = cp.source_offset
        else:
            end = self.target.log_end()
            self.position = self._resume_position(cp, end)
            if end < cp.target_offset:
                log.error("%s: the target partition ends at %d, below the checkpointed target offset %d: the "
                          "target lost acknowledged data; copying again from source offset %d", self.unit, end,
                          cp.target_offset, self.position)
            self.target_end = end
            if self.position > cp.source_offset:
                self._recount(cp.source_offset, self.position)
        self._bounds_from = cp.bounds_from
        log.info("%s: %s from source offset %d%s; checkpoint (%d, %s): %d %s to re-read for counting only",
                 self.unit, self.mode, self.position,
                 "" if self.target_end is None else f" (target end {self.target_end})",
                 cp.source_offset, cp.target_offset, max(0, self.position - cp.source_offset),
                 "offset(s)" if self.source.logical else "byte(s)")
        self._next_checkpoint = self.clock.monotonic() + self.interval_s
        self._publish_lost()
        self.state = "copying"

    def _resume_position(self, cp: Checkpoint, end: int) -> int:
        """The source offset that follows the target's log end ``end``, from checkpoint ``cp`` (the resume rule,
        docs/mirroring-data-path.md). 0.7 topics: ``source_offset + (end - target_offset)`` (both sides grew
        by the same bytes). Kafka topics keep offsets, so it is ``end`` itself, unless ``end`` is below the
        checkpoint's source offset without being below its target offset: a source gap recorded at the
        checkpoint that nothing was appended after yet (resume after the gap)."""
        if not self.source.logical:
            return cp.source_offset + (end - cp.target_offset)
        return end if end < cp.target_offset else max(end, cp.source_offset)

    def _step(self) -> bool:
        """One fetch and one copy; False when there was nothing to copy."""
        try:
            data = self.source.fetch_set(self.position)
        except OffsetOutOfRangeError as exc:
            return self._out_of_range(exc)
        if not data:
            self._source_end = self.position
            self._last_time_ms = None
            self.state = "caught up"
            return False
        nxt = self.source.next_offset(self.position, data)
        target_next = None
        if self.unit.fallback:
            self.fallback.send_set(data)
        else:
            try:
                target_next = self.target.append(self.target_end, data)
            except OffsetMismatchError as exc:
                self._resync(exc.log_end)
                return True
        self._uncounted.append((self.position, self.target_end, data, False, nxt, target_next))
        self.position, self.target_end = nxt, target_next
        self.state = "copying"
        self._drain_counts()
        return True

    def _drain_counts(self) -> None:
        """Count the copied sets not counted yet, in order (a count fails only while the schema registry is
        away: the set stays queued, no new fetch happens, and checkpoints stay at the counted offsets)."""
        while self._uncounted or self._recount_from is not None:
            if not self._uncounted:
                self._next_recount()
                continue
            offset, _target_offset, data, recount, nxt, target_next = self._uncounted[0]
            n = self.source.count(self.counter, data)
            self._uncounted.popleft()
            self.stats["recounted_messages" if recount else "messages"] += n
            if not recount:
                self.stats["bytes"] += len(data)
                self.stats["sets"] += 1
            self._counted = (nxt, target_next)
            self._last_set = data
            self._recent.append((offset, data))
            self._recent_bytes += len(data)
            while self._recent_bytes - len(self._recent[0][1]) >= lr.BOUNDS_BYTES:
                self._recent_bytes -= len(self._recent.popleft()[1])

    def _recount(self, start: int, end: int) -> None:
        """Count ``[start, end)`` of the source (already in the target) without copying it: fetched and counted
        one set at a time by :meth:`_drain_counts`."""
        self._recount_from, self._recount_to = start, end
        self._recount_delta = self.position - self.target_end

    def _next_recount(self) -> None:
        start, end = self._recount_from, self._recount_to
        data = self.source.range_set(start, end)
        nxt = start
        if not data:
            log.warning("%s: source offsets %d..%d could not be re-read for counting (deleted?); the mirror tier's "
                        "counts miss them", self.unit, start, end)
        else:
            nxt = self.source.next_offset(start, data)
            self._uncounted.append((start, start - self._recount_delta, data, True, nxt, nxt - self._recount_delta))
        self._recount_from = nxt if data and nxt < end else None

    def _resync(self, log_end: int | None) -> None:
        """OFFSET_MISMATCH: the target ends at ``log_end``, not where we thought."""
        self.stats["mismatches"] += 1
        before = self.store.version
        cp = self.store.read()
        if self.store.version != before:
            raise MirrorOwnershipLostError(f"{self.unit}: the target partition ends at {log_end}, not "
                                           f"{self.target_end}, and the checkpoint {self.store.path} moved (version "
                                           f"{before} -> {self.store.version}): another owner copies this partition")
        cp = cp or self._cp
        end = self.target.log_end() if log_end is None else log_end
        pos = self._resume_position(cp, end)
        log.info("%s: target end %d, expected %d; resuming at source offset %d", self.unit, end, self.target_end, pos)
        if pos > self.position:
            self.target_end = end - (pos - self.position)
            self._recount(self.position, pos)
        elif pos < self.position:
            log.error("%s: the target lost acknowledged data (it ends at %d, below %d); copying source %d..%d again",
                      self.unit, end, self.target_end, pos, self.position)
        self.position, self.target_end = pos, end

    def _out_of_range(self, exc: OffsetOutOfRangeError) -> bool:
        earliest = self.source.earliest()
        if self.position < earliest:
            self._lost_range(earliest)
            return True
        latest = self.source.latest()
        if self.position >= latest:
            self.state = f"waiting: the source ends at {latest}, below the mirror position {self.position}"
            log.debug("%s: %s", self.unit, self.state)
            return False
        raise MirrorError(f"{self.unit}: source offset {self.position} is inside the source log ({earliest}.."
                          f"{latest}) but not a message boundary: {exc}; the checkpoint does not fit the source "
                          "(was the source topic re-created?)")

    # --- lost ranges -----------------------------------------------------------------------

    def _lost_range(self, earliest: int) -> None:
        pos = self.position
        record = lr.find_lost_range(self.store.zk, self.group, self.unit, pos)
        if record is not None and record["end_offset"] <= earliest:
            # recorded before a crash that came before the checkpoint moved: the same gap, not a new one
            log.info("%s: the lost range %d..%d was recorded before; going on after it", self.unit, pos,
                     record["end_offset"])
            return self._past_gap(record)
        if self.source.logical:
            return self._lost_offsets(pos, earliest)
        try:
            deleted = self.source.deleted_segments(pos, earliest)
        except TRANSIENT:
            raise
        except IngestError as exc:
            log.warning("%s: DELETED_SEGMENTS failed (%s): the source cannot vouch that retention deleted %d..%d; "
                        "recorded as missing segments, estimated", self.unit, exc, pos, earliest)
            deleted = None
        tally = SegmentTally(None, 0)
        st = lr.straddling(deleted or (), pos)
        if st is not None:
            n = lr.messages_since(self._recent, st.start, None if self.unit.fallback else self.target,
                                  self.position, self.target_end)
            tally = SegmentTally(st.start, n) if n is not None else SegmentTally(None, 0)
        after = lr.after_scan(self._recent, self.header_reader, None if self.unit.fallback else self.target,
                              self._bounds_from, self.target_end)
        first = self.source.fetch_set(earliest)
        before = lr.scan_headers(first, self.header_reader, earliest)
        for part in split_gap(deleted, pos, earliest, tally):  # retention parts and missing parts, in order
            count, exact = part.messages, part.messages is not None
            if not exact:
                count = lr.estimate_messages(part.end - part.start, self.stats["bytes"], self.stats["messages"])
            record = lr.lost_range_record(group=self.group, unit=self.unit, mirror_server=self.mirror_server,
                                          start=part.start, end=part.end, messages=count, exact=exact, after=after,
                                          before=before, target_offset=self.target_end, cause=part.cause,
                                          detected_at_ms=self.clock.time_ms())
            lr.record_lost_range(self.store.zk, self.group, record)
            if part.cause == MISSING_SEGMENTS:
                log.warning("%s: source offsets %d..%d are gone but the source's retention recorded no deletion of "
                            "them (segments deleted by hand or lost on disk): ~%d message(s) lost, not by "
                            "retention", self.unit, part.start, part.end, count)
            else:
                log.warning("%s: source offsets %d..%d were deleted by retention before the mirror copied them: %d "
                            "message(s)%s lost to source retention", self.unit, part.start, part.end, count,
                            "" if exact else " (estimated)")
            self._past_gap(record)

    def _lost_offsets(self, pos: int, earliest: int) -> None:
        """A Kafka topic's gap: offsets number records, so ``earliest - pos`` records are gone, exactly (the
        source's log start moves only by retention here: docs/kafka-protocol.md, D7). No session bounds are
        read (the records' headers before and after the gap are not scanned)."""
        record = lr.lost_range_record(group=self.group, unit=self.unit, mirror_server=self.mirror_server,
                                      start=pos, end=earliest, messages=earliest - pos, exact=True,
                                      after=lr.HeaderScan(), before=lr.HeaderScan(), target_offset=self.target_end,
                                      cause=RETENTION, detected_at_ms=self.clock.time_ms())
        lr.record_lost_range(self.store.zk, self.group, record)
        log.warning("%s: source offsets %d..%d were deleted by retention before the mirror copied them: %d "
                    "record(s) lost to source retention; the target keeps the same gap", self.unit, pos, earliest,
                    earliest - pos)
        self._past_gap(record)

    def _past_gap(self, record: dict) -> None:
        self.stats["lost_ranges"] += 1
        self.stats["lost_messages"] += record["messages"]
        self.position = record["end_offset"]
        self._counted = (self.position, self.target_end)
        self._recent.clear()
        self._recent_bytes = 0
        self._bounds_from = self.target_end
        self._pending_lost.append(record)
        self._checkpoint()  # before anything after the gap is appended: the resume rule stays true

    # --- checkpoint and events ---------------------------------------------------------------

    def _checkpoint(self, closing: bool = False) -> None:
        events = self.counter.due_events(closing=closing) if self.counter is not None else []
        if self._recent and not self.unit.fallback:
            self._bounds_from = self._recent[0][0] - (self.position - self.target_end)
        cp = Checkpoint(self._counted[0], self._counted[1], self.unit.target_partition, None,
                        self.counter.state() if self.counter is not None else None, self.clock.time_ms(),
                        self._bounds_from, tuple(self._pending_lost))
        self.store.write(cp)
        self.stats["checkpoints"] += 1
        self._cp = cp
        self._next_checkpoint = self.clock.monotonic() + self.interval_s
        self._refresh_source_end()
        self._publish_lost()
        if events and publish_safely(self, "counts", lambda: self.publisher.publish_counts(events)):
            self.counter.published([e["event_id"] for e in events])

    def _publish_lost(self) -> None:
        if self._pending_lost and publish_safely(
                self, "lost ranges", lambda: [self.publisher.publish_lost_range(r) for r in self._pending_lost]):
            self._pending_lost = []

    # --- status ------------------------------------------------------------------------------

    def _refresh_source_end(self) -> None:
        if self.position is None:
            return
        try:
            self._source_end = self.source.latest()
        except (TRANSIENT, IngestError) as exc:
            log.debug("%s: source end unknown now: %s", self.unit, exc)

    def lag(self) -> Lag:
        """Bytes behind the source end (as of the last checkpoint or fetch) and seconds behind in event time."""
        if self.position is None or self._source_end is None:
            return Lag(None, None)
        behind = max(0, self._source_end - self.position)
        if behind == 0:
            return Lag(0, 0.0)
        if self._last_set is not None:
            t = self.source.last_time_ms(self._last_set, self.header_reader)
            self._last_time_ms = t if t is not None else self._last_time_ms
            self._last_set = None
        if self._last_time_ms is None:
            return Lag(behind, None)
        return Lag(behind, max(0.0, (self.clock.time_ms() - self._last_time_ms) / 1000.0))

    def close(self) -> None:
        self.source.close()
        if self.target is not None:
            self.target.close()
