"""Cutting one topic partition's range into several Spark input partitions.

A Kafka-format partition's range (offsets are record numbers, and any offset is a valid start) is
cut into equal pieces of at most ``maxRecordsPerPartition`` offsets (:func:`split_records`, as
Spark's Kafka source option of that name). A 0.7 partition's, at segment starts:

``maxBytesPerPartition`` bounds the bytes one Spark task reads: a range larger
than that is cut at the broker's segment start offsets (the answer of an OFFSETS
request for all segments, as the loader's planner cuts its tasks), the only
message boundaries known without reading. No piece is much larger than the bound
unless one segment is. Only ranges bounded by offsets are cut: a timestamp bound
is a property of the whole partition read in order (the first message at or
after it), which a piece cannot know.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Sequence

from ingest.explore.offsets import ReadRange

log = logging.getLogger(__name__)


def split_range(r: ReadRange, segment_starts: Sequence[int], max_bytes: int) -> list[ReadRange]:
    """``r`` as consecutive pieces cut at ``segment_starts``, each at most ``max_bytes`` where the cuts allow."""
    if r.start_time is not None or r.end_time is not None or r.end - r.start <= max_bytes:
        return [r]
    cuts = sorted(s for s in set(segment_starts) if r.start < s < r.end)
    pieces: list[tuple[int, int]] = []
    cur = last = r.start
    for b in cuts + [r.end]:
        if b - cur > max_bytes and last > cur:
            pieces.append((cur, last))
            cur = last
        last = b
    pieces.append((cur, r.end))
    return [dataclasses.replace(r, start=s, end=e) for s, e in pieces]


def split_records(r: ReadRange, max_records: int) -> list[ReadRange]:
    """``r`` (a Kafka-format partition's offset range) as consecutive pieces of nearly equal size, none
    above ``max_records`` offsets."""
    n = r.end - r.start
    if r.start_time is not None or r.end_time is not None or n <= max_records:
        return [r]
    count = -(-n // max_records)
    cuts = [r.start + n * i // count for i in range(count + 1)]
    return [dataclasses.replace(r, start=s, end=e) for s, e in zip(cuts, cuts[1:])]


def segment_starts(r: ReadRange, discovery_config: dict) -> list[int]:
    """The broker's segment start offsets of the range's partition (for a replicated one, its leader's)."""
    from ingest.loader.discover import segment_starts as loader_segment_starts  # deferred: imports kazoo

    return list(loader_segment_starts(discovery_config)(r.part))
