"""A retention gap found at planning, as a :class:`~ingest.loader.records.LostRange`: exact count or estimate.

When a partition's committed offset ``c`` is below the broker's earliest offset
``e``, retention deleted ``[c, e)`` before it was loaded. How many messages that
was:

- **exact** when the broker recorded the segments it deleted (request 16
  DELETED_SEGMENTS, ``messages`` per segment, every inner message of a compressed
  wrapper counted) and those records cover ``[c, e)`` without a hole: the sum over
  the deleted segments, minus the messages the loader had already consumed from
  the segment that straddles ``c`` (the partition's *tally*,
  :attr:`~ingest.loader.records.OffsetRecord.tally`, kept at every commit; see
  :mod:`ingest.loader.tally`). :func:`ingest.client.deleted_segments.gap_message_count`
  does the arithmetic. ``messages_exact`` is then true.
- **estimated** otherwise (a broker without the records, records removed, a tally
  unknown for a straddling segment, a replicated partition whose leader changed
  and has other segment boundaries): bytes / the partition's average message size
  in committed files (else sampled at ``e``), ``messages_exact`` false.

Pure: the network answers (deleted segments, the probe) are passed in.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from ingest.client.deleted_segments import DeletedSegment, SegmentTally, gap_message_count
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


def retention_loss(
    key: PartitionKey, start: int, end: int, prev: OffsetRecord | None, avg_from_state: float | None,
    probe: Probe, deleted: Sequence[DeletedSegment] | None, run_id: str, now_ms: int,
) -> LostRange:
    """The lost range ``[start, end)`` of partition ``key`` (see the module docstring).

    ``deleted``: the broker's records of the segments it deleted overlapping the
    range (None: the broker could not say). ``prev``: the committed offset record
    (its tally and last event time), None for a partition never loaded.
    """
    count, exact = (None, False)
    if deleted is not None:
        count, exact = gap_message_count(list(deleted), start, end, gap_tally(prev, start))
    if exact and count is not None:
        messages = count
    else:
        avg = avg_from_state or probe.avg_message_bytes
        messages = int(round((end - start) / avg)) if avg else 0
        log.info("%s b%d p%d: lost range [%d, %d): the broker's deleted-segment records (%s) do not give an exact "
                 "count; estimated %d messages from sizes", *key, start, end,
                 "none" if deleted is None else f"{len(deleted)} record(s)", messages)
        exact = False
    return LostRange(
        topic=key[0], broker_id=key[1], partition=key[2], start_offset=start, end_offset=end,
        bytes=end - start, estimated_messages=messages, after_time_ms=prev.last_time_ms if prev else None,
        before_time_ms=probe.first_time_ms, run_id=run_id, detected_at_ms=now_ms, messages_exact=exact,
    )
