"""A gap found at planning: its lost ranges (cause and count) and its session bounds.

**Lost ranges.** When a partition's committed offset ``c`` is below the broker's earliest offset
``e``, ``[c, e)`` is gone before it was loaded. Why, and how many messages:

- the parts the broker's deletion records cover (request 16 DELETED_SEGMENTS:
  every segment its retention deleted) are cause ``retention``; the parts no
  record covers are cause ``missing_segments``: the log start moved without
  retention (segment files deleted by hand, lost to a disk fault, or a broker
  that could not say), a loss the audit reports as DATA_LOSS, never as expected
  retention (:func:`ingest.client.deleted_segments.split_gap`). Usually the whole
  gap is one part; each part is one record.
- a retention part's count is **exact** when its records chain without a hole
  and every count is known (``messages`` per segment, every inner message of a
  compressed wrapper counted): the sum over the deleted segments, minus the
  messages the loader had already consumed from the segment that straddles ``c``
  (the partition's *tally*, :attr:`~ingest.loader.records.OffsetRecord.tally`,
  kept at every commit; see :mod:`ingest.loader.tally`).
  :func:`ingest.client.deleted_segments.gap_message_count` does the arithmetic.
  ``messages_exact`` is then true.
- otherwise (a missing part, a damaged segment's unknown count, a tally unknown
  for a straddling segment, a replicated partition whose leader changed and has
  other segment boundaries) it is **estimated**: bytes / the partition's average
  message size in committed files (else sampled at ``e``), ``messages_exact``
  false. The audit lets an estimate explain at most that many messages.

Every part gets the gap's event-time edges (the last loaded message before ``c``,
the first at ``e``): each part lies inside the gap, so they bound it too.

A Kafka-format partition's gap (:func:`kafka_gap`) is simpler: its offsets number records, and
its log start moves only by retention, so its count is ``end - start``, exact, cause ``retention``.

Pure: the network answers (deleted segments, the probe) are passed in.

**Session bounds.** Within one partition each producer session's ``header.seq`` only
increases. So for a gap ``[start, end)`` of partition ``p``:

- ``after_seq`` of session ``s`` = the highest seq of ``s`` in the committed data
  files of ``p`` whose offset range ends at ``start`` (the range loaded just
  before the gap);
- ``before_seq`` = the lowest seq of ``s`` in this run's staged data files of
  ``p`` whose range starts at ``end`` (the range loaded just after it).

The gap can only hold seqs of ``s`` strictly between them (a missing side:
unbounded there); a session seen on neither side is unbounded. The bounds are
read only when a gap is found (rare), on the driver, from the files through the
storage abstraction: the files on either side are read whole.

No bounds: for a replay (the committed files next to the gap are being
withdrawn), for a neighbour merged by compaction (``broker_id`` -1: its file
mixes partitions, so its seqs say nothing about this one), or when a file cannot
be read (logged; the range is still committed, unbounded on that side). A
message quarantined next to the gap is in no data file, so the bounds can be
looser than the truth by it, never tighter.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ingest.client.deleted_segments import MISSING_SEGMENTS, DeletedSegment, SegmentTally, split_gap
from ingest.loader.records import OffsetRecord, PartitionKey
from ingest.loader.row_ids import session_ids
from ingest.lost_ranges import RETENTION, LostRange

if TYPE_CHECKING:
    from ingest.storage import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Probe:
    """What the first fetch at an offset tells: average message size and first event time."""

    avg_message_bytes: float | None
    first_time_ms: int | None


def gap_tally(prev: OffsetRecord | None, start: int) -> SegmentTally | None:
    """The tally that applies to a gap starting at ``start``: the committed one when ``start`` is the
    committed offset (not a reset point), else none."""
    if prev is None or prev.tally is None or prev.offset != start:
        return None
    return SegmentTally(prev.tally[0], prev.tally[1])


def gap_losses(
    key: PartitionKey, start: int, end: int, prev: OffsetRecord | None, avg_from_state: float | None,
    probe: Probe, deleted: Sequence[DeletedSegment] | None, run_id: str, now_ms: int,
) -> tuple[LostRange, ...]:
    """The lost ranges of the gap ``[start, end)`` of partition ``key``, in offset order (see the module
    docstring); () for an empty gap.

    ``deleted``: the broker's records of the segments it deleted overlapping the
    range (None: the broker could not say). ``prev``: the committed offset record
    (its tally and last event time), None for a partition never loaded.
    """
    out = []
    for part in split_gap(deleted, start, end, gap_tally(prev, start)):
        size = part.end - part.start
        exact = part.messages is not None
        if exact:
            messages = part.messages
        else:
            avg = avg_from_state or probe.avg_message_bytes
            messages = int(round(size / avg)) if avg else 0
        if part.cause == MISSING_SEGMENTS:
            log.warning("%s b%d p%d: offsets [%d, %d) are below the broker's log start, but its retention "
                        "recorded no deletion of them (%s): segments deleted by hand or lost on disk, recorded as "
                        "missing_segments, ~%d messages (the audit reports them as DATA_LOSS)", *key, part.start,
                        part.end, "it could not say" if deleted is None else f"{len(deleted)} record(s) in the gap",
                        messages)
        elif not exact:
            log.info("%s b%d p%d: lost range [%d, %d): the broker's deleted-segment records (%d) do not give an "
                     "exact count; estimated %d messages from sizes", *key, part.start, part.end, len(deleted or ()),
                     messages)
        out.append(LostRange(
            topic=key[0], broker_id=key[1], partition=key[2], start_offset=part.start, end_offset=part.end,
            bytes=size, estimated_messages=messages, after_time_ms=prev.last_time_ms if prev else None,
            before_time_ms=probe.first_time_ms, run_id=run_id, detected_at_ms=now_ms, cause=part.cause,
            messages_exact=exact,
        ))
    return tuple(out)


def kafka_gap(key: PartitionKey, start: int, end: int, prev: OffsetRecord | None, probe: Probe, run_id: str,
              now_ms: int) -> tuple[LostRange, ...]:
    """The lost range ``[start, end)`` of a Kafka-format partition: ``end - start`` records, exactly
    (logical offsets number every record, and a Kafka-format log start moves only by retention: this
    product has no DeleteRecords and no compaction of Kafka-format topics). ``bytes`` is 0: not known."""
    if end <= start:
        return ()
    log.warning("%s b%d p%d: offsets [%d, %d) of a Kafka-format topic were deleted before they were loaded: "
                "%d records", *key, start, end, end - start)
    return (LostRange(topic=key[0], broker_id=key[1], partition=key[2], start_offset=start, end_offset=end, bytes=0,
                      estimated_messages=end - start, after_time_ms=prev.last_time_ms if prev else None,
                      before_time_ms=probe.first_time_ms, run_id=run_id, detected_at_ms=now_ms, cause=RETENTION,
                      messages_exact=True),)


# --- session bounds ----------------------------------------------------------------------------

SessionSeqs = dict[str, tuple[int, int]]
"""session -> (lowest seq, highest seq)"""


def file_session_seqs(data: bytes, fmt: str) -> SessionSeqs:
    """Per session the lowest and highest ``header.seq`` in one data file (Avro or Parquet bytes)."""
    out: SessionSeqs = {}
    for session, seq in session_ids(fmt, data):
        lo_hi = out.get(session)
        out[session] = (seq, seq) if lo_hi is None else (min(lo_hi[0], seq), max(lo_hi[1], seq))
    return out


def merged_seqs(storage: Storage, paths_and_formats: Sequence[tuple[str, str]]) -> SessionSeqs | None:
    """:func:`file_session_seqs` over several files (full storage paths); None when one cannot be read."""
    out: SessionSeqs = {}
    for path, fmt in paths_and_formats:
        try:
            seqs = file_session_seqs(storage.read_bytes(path), fmt)
        except Exception as exc:  # bounds only narrow an attribution: never fail the commit for them
            log.warning("cannot read the sessions of %s for a gap's bounds (left unbounded): %r", path, exc)
            return None
        for s, (lo, hi) in seqs.items():
            cur = out.get(s)
            out[s] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
    return out


def session_bounds(after: SessionSeqs | None, before: SessionSeqs | None) -> tuple[tuple[str, int | None, int | None], ...]:
    """``(session, after_seq, before_seq)`` sorted by session: highest seq before, lowest seq after."""
    after, before = after or {}, before or {}
    return tuple((s, after[s][1] if s in after else None, before[s][0] if s in before else None)
                 for s in sorted(set(after) | set(before)))


def bounds_of_gap(storage: Storage, first: LostRange, last: LostRange, after_files: list[tuple[str, str]],
                  before_files: list[tuple[str, str]]) -> tuple[tuple[str, int | None, int | None], ...]:
    """The session bounds of the gap from ``first``'s start to ``last``'s end: the sessions of the
    files that end where it starts (``after_files``) and start where it ends (``before_files``),
    each a ``(full storage path, format)``. A gap cut into parts is bounded as a whole."""
    after = merged_seqs(storage, after_files) if after_files else None
    before = merged_seqs(storage, before_files) if before_files else None
    bounds = session_bounds(after, before)
    log.info("%s b%d p%d gap [%d, %d): session bounds from %d file(s) before and %d after: %s", first.topic,
             first.broker_id, first.partition, first.start_offset, last.end_offset, len(after_files),
             len(before_files), bounds)
    return bounds
