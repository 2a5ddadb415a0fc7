"""The partition tally: how many messages the loader consumed in the broker segment holding its offset.

A retention gap that starts inside a segment (the committed offset ``c`` lies in
a segment the broker deleted) is counted exactly only if the loader knows how
many of that segment's messages it had already consumed:
``SegmentTally(segment_start, messages)`` = the messages in ``[segment_start, c)``.
It is kept in the committed :class:`~ingest.loader.records.OffsetRecord` (``tally``)
and used when the next gap is found (:mod:`ingest.loader.gaps`).

How it is kept, at no cost per message beyond a prefix count:

- the plan gives each task the last segment start inside its range
  (``TaskRange.segment_start``, from the broker's segment starts);
- the task counts the messages it consumed at or after that start (every
  message it read counts: inner messages of compressed wrappers each, as the
  broker's count does, and undecodable ones it quarantined); with no segment
  start inside its range, all it consumed. A message failing its CRC or a
  damaged range there makes the count unknown (the broker's count of such
  bytes is not the loader's);
- the commit folds the partition's last task into the new tally
  (:func:`partition_tally`): ``(segment_start, count)``, or, when the last task
  lies inside the segment the previous commit ended in, the previous tally plus
  the task's count. Unknown (None) after a replay or reset, or when the
  previous tally was unknown.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from ingest.loader.fetch import Damaged

if TYPE_CHECKING:
    from ingest.loader.plan import PartitionPlan
    from ingest.loader.records import OffsetRecord
    from ingest.loader.results import TaskSummary

log = logging.getLogger(__name__)


def counted_before(items: Iterable, boundary: int, counter: list[int]) -> Iterator:
    """Yield every item of ``items``; ``counter[0]`` counts the consumed messages before offset ``boundary``.

    Damaged ranges are not messages and are not counted. Past ``boundary`` the
    rest is passed through without looking at it.
    """
    it = iter(items)
    for item in it:
        yield item
        if item.offset >= boundary:
            break
        if item.__class__ is not Damaged:
            counter[0] += 1
    yield from it


def task_tally(segment_start: int | None, start: int, consumed: int, before: int, corrupt_offsets: Sequence[int],
               damaged: Sequence[Sequence[int]]) -> int | None:
    """The messages a task consumed at or after ``segment_start`` (all of them when None); None if unknown.

    ``consumed``: messages read (loaded + quarantined); ``before``: those before
    ``segment_start``; ``corrupt_offsets`` / ``damaged`` (``[start, end, ...]``):
    CRC failures and damaged ranges, which make the count unknown when they lie
    in the counted part.
    """
    first = start if segment_start is None else segment_start
    if any(off >= first for off in corrupt_offsets) or any(d[1] > first for d in damaged):
        return None
    return consumed - before


def partition_tally(p: PartitionPlan, prev: OffsetRecord | None,
                    summaries: Sequence[TaskSummary]) -> tuple[int, int] | None:
    """The partition's tally after this run commits ``p`` (see the module docstring)."""
    continues = prev is not None and prev.tally is not None and prev.offset == p.start and not p.replay
    if not p.tasks:
        if continues:
            return prev.tally
        return (p.start, 0) if p.lost else None  # start = earliest: a segment start
    last = max((s for s in summaries if s.key == p.key), key=lambda s: s.end_offset, default=None)
    if last is None or last.end_offset != p.end or last.tally_messages is None:
        return None
    if last.tally_start is not None:
        return (last.tally_start, last.tally_messages)
    if continues and last.start_offset == p.start:  # one task, inside the segment the last commit ended in
        return (prev.tally[0], prev.tally[1] + last.tally_messages)
    return None
