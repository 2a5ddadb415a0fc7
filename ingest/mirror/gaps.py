"""Gaps in a source partition: source bytes gone before the mirror copied them, by retention or not.

When a unit's source position ``pos`` lies below the source's earliest offset
``E``, ``[pos, E)`` is gone. The mirror records it, exactly as the loader records
its own gaps (docs/loader.md), as :class:`~ingest.lost_ranges.LostRange` s of tier source,
published as ``MirrorLostRange`` records (``conf/schemas/mirror_lost_range.avsc``), one per part
of the gap:

* **cause**: ``retention`` where the source broker's DELETED_SEGMENTS records
  cover the part, ``missing_segments`` where none does (segment files deleted by
  hand or lost on disk, or a source that could not say):
  :func:`ingest.client.deleted_segments.split_gap`. The audit reports the second
  as DATA_LOSS (``source_missing_segments``), never as expected retention.
* **messages**: exact for a retention part from the records
  (:func:`ingest.client.deleted_segments.gap_message_count`); the segment that
  straddles ``pos`` is corrected by the messages of it already copied, counted by
  reading them back from the target (identical bytes). Otherwise (a missing part,
  records without exact counts): ``bytes / average message size`` of the unit,
  ``messages_exact`` false.
* **session bounds**: per producer session, the highest seq in the last <= 1 MiB
  copied before the gap (read back from the target just below the target
  position) and the lowest seq in the first fetch after the gap. Within a
  partition a session's seqs only increase, so the gap (and each of its parts)
  can hold a session's messages only strictly between its bounds.

The record goes to ZooKeeper (a sequential child of ``znodes.mirror_lost_dir``;
a record whose ``event_id`` is there already is not written twice) and to the
publisher (``lost.topic`` on the target, at least once, deduplicated by ``event_id``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Iterable

from ingest import znodes
from ingest.lost_ranges import RETENTION, TIER_SOURCE, LostRange
from ingest.mirror import tier_events
from ingest.mirror.copier_io import read_target
from ingest.records.message_batch import iter_messages

log = logging.getLogger(__name__)

BOUNDS_BYTES = 1 << 20
"""How much of the target below the gap is read back for the sessions' ``after_seq``."""

DEFAULT_MESSAGE_SIZE = 100
"""Average message size assumed for an estimate when the unit has copied nothing yet."""


@dataclass
class HeaderScan:
    """What the headers of a run of messages say: per session the lowest and highest seq, first/last time."""

    min_seq: dict[str, int] = field(default_factory=dict)
    max_seq: dict[str, int] = field(default_factory=dict)
    first_time: int | None = None
    last_time: int | None = None
    messages: int = 0


def scan_headers(message_set: bytes, header_reader, base_offset: int = 0, start: int = 0) -> HeaderScan:
    """Read the event headers of every message at or after ``start`` (log offset) of a set (inner messages too)."""
    out = HeaderScan()
    for m in iter_messages(message_set, base_offset):
        if m.offset < start:
            continue
        out.messages += 1
        h = header_reader.read(m.payload) if header_reader is not None else None
        if h is None:
            continue
        if out.first_time is None:
            out.first_time = h.time
        out.last_time = h.time
        if h.session not in out.min_seq or h.seq < out.min_seq[h.session]:
            out.min_seq[h.session] = h.seq
        if h.session not in out.max_seq or h.seq > out.max_seq[h.session]:
            out.max_seq[h.session] = h.seq
    return out


def count_messages(message_set: bytes) -> int:
    """Messages a consumer sees in a set (inner messages of compressed wrappers each count)."""
    return sum(1 for _ in iter_messages(message_set))


def session_bounds(after: HeaderScan, before: HeaderScan) -> list[dict]:
    """The schema's ``session_bounds``: every session seen on either side, sorted by session."""
    sessions = sorted(set(after.max_seq) | set(before.min_seq))
    return [{"session": s, "after_seq": after.max_seq.get(s), "before_seq": before.min_seq.get(s)}
            for s in sessions]


def estimate_messages(gap_bytes: int, copied_bytes: int, copied_messages: int) -> int:
    """``gap_bytes / average message size`` (of what the unit copied; DEFAULT_MESSAGE_SIZE if nothing), rounded."""
    avg = copied_bytes / copied_messages if copied_messages else DEFAULT_MESSAGE_SIZE
    return max(1, round(gap_bytes / avg)) if gap_bytes > 0 else 0


def lost_range_record(*, group: str, unit, mirror_server: str, start: int, end: int, messages: int, exact: bool,
                      after: HeaderScan, before: HeaderScan, target_offset: int | None, detected_at_ms: int,
                      cause: str = RETENTION) -> dict:
    """The ``MirrorLostRange`` record (conf/schemas/mirror_lost_range.avsc) of a gap of ``unit``; its ``event_id``
    is deterministic over the unit and ``[start, end)`` (:func:`ingest.mirror.tier_events.lost_range_record`)."""
    bounds = tuple((b["session"], b["after_seq"], b["before_seq"]) for b in session_bounds(after, before))
    lost = LostRange(
        topic=unit.topic, broker_id=unit.broker_id, partition=unit.partition, start_offset=start, end_offset=end,
        bytes=end - start, estimated_messages=messages, after_time_ms=after.last_time, before_time_ms=before.first_time,
        detected_at_ms=detected_at_ms, cause=cause, messages_exact=exact, session_bounds=bounds, tier=TIER_SOURCE,
        source_cluster=unit.source)
    return tier_events.lost_range_record(lost, group=group, mirror_server=mirror_server,
                                         target_partition=unit.target_partition, target_offset=target_offset)


def recorded_lost_ranges(zk, group: str) -> list[dict]:
    """Every lost-range record of the group in ZooKeeper, oldest first (unreadable children skipped)."""
    from kazoo.exceptions import NoNodeError  # deferred: kazoo

    base = znodes.mirror_lost_dir(group)
    try:
        children = sorted(zk.retry(zk.get_children, base))
    except NoNodeError:
        return []
    out = []
    for child in children:
        try:
            data, _ = zk.retry(zk.get, znodes.mirror_lost_range_path(group, child))
            out.append(json.loads(data.decode()))
        except (NoNodeError, ValueError, UnicodeDecodeError) as exc:
            log.warning("skipping lost-range znode %s/%s: %s", base, child, exc)
    return out


def find_lost_range(zk, group: str, unit, start: int) -> dict | None:
    """The recorded lost range of ``unit`` starting at ``start`` (written before a crash that came before the
    checkpoint moved past it), or None."""
    for r in recorded_lost_ranges(zk, group):
        if (r.get("source_cluster"), r.get("topic"), r.get("broker_id"), r.get("partition"), r.get("start_offset")) \
                == (unit.source, unit.topic, unit.broker_id, unit.partition, start):
            return r
    return None


def record_lost_range(zk, group: str, record: dict) -> bool:
    """Write ``record`` as a sequential child of the group's lost dir unless its event_id is there; True if written."""
    if any(r.get("event_id") == record["event_id"] for r in recorded_lost_ranges(zk, group)):
        return False
    zk.retry(zk.create, znodes.mirror_lost_range_prefix(group), json.dumps(record, sort_keys=True).encode(),
             sequence=True, makepath=True)
    return True


def straddling(deleted: Iterable, pos: int):
    """The deleted segment that starts before ``pos`` and ends after it (the one partly copied), if any."""
    return next((d for d in deleted if d.start < pos < d.end), None)


def messages_since(recent, start: int, target, position: int, target_end: int | None) -> int | None:
    """Messages copied in source ``[start, position)``: from the recent ``(offset, set)`` pairs when they reach
    back to ``start``, else read back from the ``target`` (identical bytes; None when that is not possible)."""
    if recent and recent[0][0] <= start:
        return sum(count_messages(s) for off, s in recent if off >= start)
    if target is None or target_end is None:
        return None
    data = read_target(target, start - (position - target_end), target_end)
    return None if data is None else count_messages(data)


def after_scan(recent, header_reader, target, bounds_from: int | None, target_end: int | None) -> HeaderScan:
    """Headers of the last <= 1 MiB copied before a gap: the recent sets, else the target from ``bounds_from``."""
    if recent:
        out = HeaderScan()
        for off, s in recent:
            part = scan_headers(s, header_reader, off)
            for k, v in part.max_seq.items():
                out.max_seq[k] = max(v, out.max_seq.get(k, v))
            out.last_time = part.last_time if part.last_time is not None else out.last_time
        return out
    if target is None or bounds_from is None or target_end is None or bounds_from >= target_end:
        return HeaderScan()
    data = read_target(target, bounds_from, target_end)
    return scan_headers(data, header_reader) if data else HeaderScan()
