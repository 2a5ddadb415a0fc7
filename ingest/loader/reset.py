"""Replay: rewind (or skip) topics to earliest, latest or a point in time, and what it withdraws.

``jobs/load.py --reset-offsets SPEC --topic T`` plans the run from the reset
offsets and, in the *same* commit, withdraws the committed files of ``T`` at or
after the new start while adding their reloaded replacements: readers see the old
files or the new ones, never both (no duplicates) and never neither.
``ingest loader reset-offsets`` does the offsets-only part as its own commit
(the withdrawn data comes back with the next run).

A reset offset inside a committed file is moved to that file's start (so the
file is reloaded whole) unless that start is already deleted by retention, in
which case it moves to the file's end (that file is kept whole).

Which committed files a replay from offset ``s`` of a partition withdraws is
decided in one place, :func:`withdrawn_by_replay`: every loader file of that
partition starting at or after ``s``. A compacted file holds the ranges of
several partitions (``FileRecord.sources``), so it is never withdrawn whole: the
load that reloads its ranges rewrites it without the reloaded rows, in the same
commit (:mod:`ingest.loader.replay`). So a replay may start before, inside or
after a compacted hour.

:func:`check_reset_args` refuses a bad reset before anything is read or started
(``jobs/load.py`` calls it right after parsing its arguments); the offsets
themselves are resolved against the brokers before any Spark work.
"""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Sequence

from ingest.client.fetch_settings import FetchSettings
from ingest.client.partition_reader import open_kafka_fetcher
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import non_ascii_note
from ingest.errors import ConfigError, IngestError
from ingest.loader import commit
from ingest.loader.discover import _consumer, discover_all
from ingest.loader.plan import LoadPlan, PartitionSnapshot
from ingest.loader.records import FileRecord, Manifest, OffsetRecord, PartitionKey
from ingest.loader.runrecord import new_run_id
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

log = logging.getLogger(__name__)


def check_reset_args(spec: str | None, topics: Sequence[str] | None, clock: Clock | None = None) -> str | int | None:
    """Refuse a malformed reset before anything is read or started; returns the parsed spec (None: no reset).

    Raises:
        ConfigError: ``--topic`` without ``--reset-offsets`` or the reverse, or a bad SPEC
            (naming what is allowed), or a time in the future (nothing to replay from there).
    """
    if not spec:
        if topics:
            raise ConfigError(f"--topic {', '.join(topics)} given without --reset-offsets: --topic names the topics "
                              f"a replay rewinds; add --reset-offsets earliest|latest|TIME, or drop --topic")
        return None
    if not topics:
        raise ConfigError(f"--reset-offsets {spec} needs --topic T (one or more topics to rewind)")
    when = parse_reset_spec(spec)
    now = (clock or SYSTEM_CLOCK).time_ms()
    if isinstance(when, int) and when > now:
        raise ConfigError(f"reset time {spec} ({when} ms) is in the future: allowed are earliest, latest, or a time "
                          f"up to now ({datetime.fromtimestamp(now / 1000, tz=timezone.utc).isoformat()})")
    return when


def parse_reset_spec(spec: str) -> str | int:
    """``earliest`` / ``latest`` / a time as epoch ms or ISO-8601 (UTC when no zone) -> str or ms."""
    text = spec.strip()
    if text in ("earliest", "latest"):
        return text
    if text.isascii() and text.isdigit():   # epoch ms; other scripts' digits are no number here
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"reset time {spec!r} (--reset-offsets, --to): allowed are earliest, latest, epoch milliseconds or an "
                          f"ISO-8601 time such as 2026-11-22T01:00:00Z{non_ascii_note(spec)}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def partition_ranges(f: FileRecord, key: PartitionKey) -> list[tuple[int, int]]:
    """The offset ranges ``[start, end)`` of partition ``key`` that file ``f`` holds.

    A loader file holds one range of its own partition; a compacted file lists
    its ranges, of possibly several partitions, in ``sources``.
    """
    _topic, broker_id, partition = key
    if f.sources:
        return [(s[2], s[3]) for s in f.sources if (s[0], s[1]) == (broker_id, partition)]
    return [(f.start_offset, f.end_offset)] if (f.broker_id, f.partition) == (broker_id, partition) else []


def snap_to_files(offset: int, earliest: int, files: Sequence[FileRecord], key: PartitionKey | None = None) -> int:
    """Move ``offset`` out of the inside of any committed range of partition ``key`` (see module docstring).

    ``key`` None takes each file's own range (files of one partition, none compacted).
    """
    for f in files:
        ranges = [(f.start_offset, f.end_offset)] if key is None else partition_ranges(f, key)
        for lo, hi in ranges:
            if lo < offset < hi:
                return lo if lo >= earliest else hi
    return offset


def withdrawn_by_replay(state: LoaderState, key: PartitionKey, start: int) -> list[str]:
    """Committed loader files (data and quarantine) a replay of partition ``key`` from ``start`` withdraws.

    The one rule for every replay (a load with ``--reset-offsets`` and
    ``ingest loader reset-offsets``): a file of the partition whose range starts
    at or after ``start``. Files wholly before ``start`` stay. Compacted files are
    not withdrawn here: the load that reloads their ranges rewrites them
    (:func:`ingest.loader.replay.rewrite_compacted`).
    """
    out = []
    for f in state.files_of_partition(key, kind=None):
        if f.sources or all(hi <= start for _lo, hi in partition_ranges(f, key)):
            continue
        if f.start_offset >= start:
            out.append(f.path)
    return out


def removed_by_replay(plan: LoadPlan, state: LoaderState) -> list[str]:
    """Committed files a load's replays withdraw: :func:`withdrawn_by_replay` of each replayed partition."""
    return [path for p in plan.partitions if p.replay for path in withdrawn_by_replay(state, p.key, p.start)]


def resolve_resets(spec: str, topics: list[str], snapshots: list[PartitionSnapshot], state: LoaderState,
                   config) -> dict[PartitionKey, int]:
    """Offsets to restart ``topics`` from: ``earliest``, ``latest`` or a time (ms or ISO-8601 UTC).

    A time maps to the start of the newest segment older than it (offsets-before), so
    the replay reloads a little more than asked rather than less; on a Kafka-format topic to
    the first record whose timestamp is at or after it (ListOffsets by time, the time index). The result is
    snapped to a committed file boundary so that replaced files are whole files.
    """
    when = parse_reset_spec(spec)
    out: dict[PartitionKey, int] = {}
    for snap in snapshots:
        if snap.topic not in topics:
            continue
        if when == "earliest":
            off = snap.earliest
        elif when == "latest":
            off = snap.latest
        elif snap.kafka:   # the time index: the first record at or after the time, exactly
            with open_kafka_fetcher(snap, FetchSettings.from_config(config)) as f:
                found = f.offset_for_time(snap.topic, snap.partition, when)
            off = snap.latest if found is None else max(found, snap.earliest)
        else:
            with _consumer(snap.host, snap.port, config) as c:
                offs = c.offsets_before(snap.topic, snap.partition, when, 1)
            off = offs[0] if offs else snap.earliest
        out[snap.key] = snap_to_files(off, snap.earliest, state.files_of_partition(snap.key, kind=None), snap.key)
    return out


def reset_offsets(config, spec: str, topics: list[str], clock: Clock | None = None) -> Manifest:
    """Offsets-only reset as its own commit; withdraws the loader files the next load will reload.

    Compacted files holding offsets at or after the new start stay until that next
    load, which rewrites them without the rows it reloads (:mod:`ingest.loader.replay`).

    A writer: it rolls forward an unfinished commit before it reads the state it commits on.

    Returns the committed :class:`~ingest.loader.records.Manifest`.
    """
    clock = clock or SYSTEM_CLOCK
    check_reset_args(spec, topics, clock)  # a bad --to fails before any broker or storage is touched
    storage = open_storage(config["destination"])
    commit.roll_forward(storage)
    state = LoaderState.load(storage)
    snaps = discover_all(config).complete("reset-offsets")   # every partition of the topics rewinds, or none
    unknown = sorted(set(topics) - {s.topic for s in snaps})
    if unknown:
        raise IngestError(f"reset-offsets: unknown topic(s) {', '.join(unknown)}; allowed are the brokers' topics: "
                          f"{', '.join(sorted({s.topic for s in snaps})) or 'none'}")
    resets = resolve_resets(spec, topics, snaps, state, config)
    offsets = dict(state.offsets)
    removed = []
    for key, off in resets.items():
        prev = offsets.get(key)
        # the tally (ingest.loader.tally) holds only for the offset it was counted up to
        offsets[key] = OffsetRecord(*key, off, prev.last_time_ms if prev and off >= prev.offset else None,
                                    prev.tally if prev and off == prev.offset else None)
        removed += withdrawn_by_replay(state, key, off)
    return commit.commit_files(storage, kind="reset", run_id=new_run_id(clock), offsets=list(offsets.values()),
                               removed=removed, expected_seq=state.seq, clock=clock,
                               note=f"reset-offsets {spec} {','.join(topics)}",
                               checkpoint_interval=config["state.checkpoint.interval"])
