"""Replay: rewind (or skip) topics to earliest, latest or a point in time.

``jobs/load.py --reset-offsets SPEC --topic T`` plans the run from the reset
offsets and, in the *same* commit, withdraws the committed files of ``T`` at or
after the new start while adding their reloaded replacements: readers see the old
files or the new ones, never both (no duplicates) and never neither.
``ingest loader reset-offsets`` does the offsets-only part as its own commit
(the withdrawn data comes back with the next run).

A reset offset inside a committed file is moved to that file's start (so the
file is reloaded whole) unless that start is already deleted by retention, in
which case it moves to the file's end (that file is kept whole).
"""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Sequence

from ingest.errors import ConfigError
from ingest.loader.records import FileRecord

log = logging.getLogger(__name__)


def parse_reset_spec(spec: str) -> str | int:
    """``earliest`` / ``latest`` / a time as epoch ms or ISO-8601 (UTC when no zone) -> str or ms."""
    text = spec.strip()
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"reset time {spec!r} (--reset-offsets, --to): allowed are earliest, latest, epoch milliseconds or an "
                          f"ISO-8601 time such as 2026-11-22T01:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def snap_to_files(offset: int, earliest: int, files: Sequence[FileRecord]) -> int:
    """Move ``offset`` out of the inside of any committed file (see module docstring)."""
    for f in files:
        lo, hi = f.start_offset, f.end_offset
        if lo < offset < hi:
            return lo if lo >= earliest else hi
    return offset


def reset_offsets(config, spec: str, topics: list[str], clock=None):
    """Offsets-only reset as its own commit; withdraws the files the next load will reload.

    Returns the committed :class:`~ingest.loader.records.Manifest`.
    """
    from ingest.clock import SYSTEM_CLOCK
    from ingest.errors import IngestError
    from ingest.loader import commit
    from ingest.loader.discover import discover
    from ingest.loader.job import new_run_id, prepare, resolve_resets
    from ingest.loader.records import OffsetRecord
    from ingest.storage import open_storage

    clock = clock or SYSTEM_CLOCK
    parse_reset_spec(spec)  # a bad --to fails before any broker or storage is touched
    storage = open_storage(config["destination"])
    state = prepare(storage, config, clock)
    snaps = discover(config)
    unknown = sorted(set(topics) - {s.topic for s in snaps})
    if unknown:
        raise IngestError(f"reset-offsets: unknown topics {unknown}; the brokers have {sorted({s.topic for s in snaps})}")
    resets = resolve_resets(spec, topics, snaps, state, config)
    offsets = dict(state.offsets)
    removed = []
    for key, off in resets.items():
        prev = offsets.get(key)
        offsets[key] = OffsetRecord(*key, off, prev.last_time_ms if prev and off >= prev.offset else None)
        for f in state.files_of_partition(key, kind=None):
            if f.start_offset >= off:
                if f.sources:
                    raise IngestError(f"cannot reset {key} to {off}: compacted file {f.path} holds other ranges too")
                removed.append(f.path)
    return commit.commit_files(storage, kind="reset", run_id=new_run_id(clock), offsets=list(offsets.values()),
                               removed=removed, expected_seq=state.seq, clock=clock,
                               note=f"reset-offsets {spec} {','.join(topics)}")
