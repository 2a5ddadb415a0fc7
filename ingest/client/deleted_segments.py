"""How many messages a retention gap held, from the broker's deletion records (pure, no I/O).

A broker records every segment its retention deletes (DELETED_SEGMENTS, request 16;
docs/log-format.md, "Deleted segments"): offsets ``[start, end)``, the messages a consumer would
have read in it (each message inside a compressed wrapper counts), bytes, when. A reader (the
loader, the mirror) whose position ``start`` fell below the partition's earliest offset ``end``
lost the gap ``[start, end)``; :func:`gap_message_count` says exactly how many messages that was,
when the records cover the gap.

The reader's position usually sits *inside* a segment (it consumed part of it before the rest was
deleted): the gap then starts mid-segment. :class:`SegmentTally` is what the reader kept to make
that exact: the start of the segment holding its position, and how many messages it consumed from
that segment start up to its position. The gap's count is the straddling segment's messages minus
the tally, plus every later deleted segment's. Without a matching tally, or with a hole in the
records, or an unknown count (-1: a damaged segment), the count is not exact: ``(None, False)``
and the caller estimates (bytes / average message size).

Shared by the loader and the mirror; both keep a tally per partition. A reader learns the segment
bases from OFFSETS (a time of now and a large ``max_offsets`` lists every segment's base offset,
newest first): the segment holding position ``pos`` starts at the largest base <= ``pos``, and the
tally restarts at 0 each time the reader's position crosses a base.

Only what the records cover is retention. A log start that moved past offsets no record covers
(segment files deleted by hand, lost to a disk fault, or a broker that could not say) did not move
by retention: :func:`split_gap` cuts a gap into the parts the records cover (cause
:data:`RETENTION`) and the parts they do not (cause :data:`MISSING_SEGMENTS`), so that readers
never report a loss as expected when the broker cannot vouch for it.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from ingest.lost_ranges import MISSING_SEGMENTS, RETENTION

log = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class DeletedSegment:
    """One segment a broker's retention deleted: offsets ``[start, end)``, its ``messages`` (-1:
    unknown), ``bytes``, ``deleted_at_ms`` (epoch ms)."""

    start: int
    end: int
    messages: int
    bytes: int
    deleted_at_ms: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> "DeletedSegment":
        """From a dict or a JSON text with these five keys (extra keys ignored: the broker's
        ``deleted-segments`` lines are accepted as they are)."""
        d = json.loads(data) if isinstance(data, str) else data
        return cls(int(d["start"]), int(d["end"]), int(d["messages"]), int(d["bytes"]), int(d["deleted_at_ms"]))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SegmentTally:
    """A reader's count inside the segment holding its position: ``messages`` consumed in
    ``[segment_start, position)``; ``segment_start`` None when the reader does not know it."""

    segment_start: int | None
    messages: int


def gap_message_count(deleted: Iterable[DeletedSegment], start: int, end: int,
                      tally: SegmentTally | None) -> tuple[int | None, bool]:
    """Messages in the gap ``[start, end)``: ``(count, True)`` when the records cover it exactly,
    else ``(None, False)``.

    Covered exactly means: the records (duplicates of one start collapsed) chain without a hole
    from the segment containing ``start`` to one ending exactly at ``end``, every count is known,
    and when ``start`` is inside a segment (not at its start) ``tally.segment_start`` is that
    segment's start, so ``tally.messages`` is subtracted from it. An empty gap (``start >= end``)
    holds 0 messages.
    """
    if start >= end:
        return 0, True
    by_start: dict[int, DeletedSegment] = {}
    for seg in deleted:
        by_start.setdefault(seg.start, seg)
    segs = sorted(by_start.values(), key=lambda s: s.start)
    first = next((s for s in segs if s.start <= start < s.end), None)
    if first is None or first.messages < 0:
        return None, False
    total = first.messages
    if start != first.start:
        if tally is None or tally.segment_start != first.start or not 0 <= tally.messages <= first.messages:
            return None, False
        total -= tally.messages
    pos = first.end
    for seg in segs:
        if pos >= end:
            break
        if seg.start < pos:
            continue
        if seg.start != pos or seg.messages < 0:
            return None, False          # a hole in the records, or an unknown count
        total += seg.messages
        pos = seg.end
    if pos != end:
        return None, False              # the records stop short of the gap's end, or overshoot it
    return total, True


@dataclass(frozen=True, slots=True)
class GapPart:
    """One part ``[start, end)`` of a gap: ``cause`` :data:`RETENTION` (deletion records cover it) or
    :data:`MISSING_SEGMENTS` (none does); ``messages`` its exact count, None when not exact."""

    start: int
    end: int
    cause: str
    messages: int | None


def split_gap(deleted: Iterable[DeletedSegment] | None, start: int, end: int,
              tally: SegmentTally | None) -> list[GapPart]:
    """The gap ``[start, end)`` cut into parts by what the deletion records cover, in offset order.

    A part the records cover (records chained or overlapping, merged) is :data:`RETENTION`, counted
    by :func:`gap_message_count` (``tally`` applies to the part that begins at ``start``; a later
    part begins at a record's start); a part between or beyond them is :data:`MISSING_SEGMENTS`,
    never counted. ``deleted`` None (the broker could not say): one missing part. An empty gap: [].
    """
    if start >= end:
        return []
    if deleted is None:
        return [GapPart(start, end, MISSING_SEGMENTS, None)]
    records = list(deleted)
    covered: list[list[int]] = []
    for seg in sorted(records, key=lambda s: (s.start, s.end)):
        a, b = max(seg.start, start), min(seg.end, end)
        if a >= b:
            continue
        if covered and a <= covered[-1][1]:
            covered[-1][1] = max(covered[-1][1], b)
        else:
            covered.append([a, b])
    parts: list[GapPart] = []
    pos = start
    for a, b in covered:
        if a > pos:
            parts.append(GapPart(pos, a, MISSING_SEGMENTS, None))
        count, exact = gap_message_count(records, a, b, tally if a == start else None)
        parts.append(GapPart(a, b, RETENTION, count if exact else None))
        pos = b
    if pos < end:
        parts.append(GapPart(pos, end, MISSING_SEGMENTS, None))
    return parts
