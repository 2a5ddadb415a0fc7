"""A gap found at planning, as :class:`~ingest.loader.records.LostRange` records: retention or missing segments.

When a partition's committed offset ``c`` is below the broker's earliest offset
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

Pure: the network answers (deleted segments, the probe) are passed in.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from ingest.client.deleted_segments import MISSING_SEGMENTS, DeletedSegment, SegmentTally, split_gap
from ingest.loader.records import LostRange, OffsetRecord, PartitionKey

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
