"""Replay across compacted hours: a load that reloads offsets a compacted file holds rewrites that file.

A compacted file (written by :mod:`ingest.compaction`) holds the rows of
several offset ranges, of possibly several partitions, listed in
``FileRecord.sources``. When a load reloads ``[start, end)`` of a partition
(a ``--reset-offsets`` replay, or the first load after ``ingest loader
reset-offsets``), every committed compacted file holding offsets of that
partition in ``[start, end)`` is rewritten in the load's own commit:

* the rewrite keeps every row except those this run reloaded, identified by
  ``(header.session, header.seq)`` (the rows carry no partition or offset; that
  id is what compaction deduplicates on, so it is the warehouse's identity of a
  message). The rows of other partitions and of ranges before ``start`` are
  copied unchanged, with the file's own schema and codec/compression;
* its ``sources`` lose ``[start, end)`` of the partition, so a later replay of
  what is left (``max.bytes.per.run`` may defer the rest of the range to the next
  run) finds it again;
* the one manifest of the load withdraws the old compacted file and adds the
  rewrite (none when no row is left) together with the reloaded files: readers
  see the old file or the rewrite plus the reloaded rows, never both, never
  neither.

Removing by reloaded id rather than by offset range also means that a row the
reload did not produce again (skipped as corrupt, or quarantined) stays in the
rewrite: nothing is lost. The rewrite's hour then holds loader files again, so
compaction merges it again (docs/operations.md, "Replaying a compacted hour").
"""
from __future__ import annotations

import logging
import posixpath
import re
from typing import Sequence

from ingest.loader import commit, layout
from ingest.loader.plan import LoadPlan
from ingest.loader.records import FileRecord, PartitionKey
from ingest.loader.row_ids import message_ids, without_ids
from ingest.loader.state import LoaderState
from ingest.storage import Storage

log = logging.getLogger(__name__)

Source = tuple[int, int, int, int]
_REWRITE_TAG = re.compile(r"\.r-[0-9A-Za-z-]+$")


def reloaded_ranges(plan: LoadPlan) -> dict[PartitionKey, tuple[int, int]]:
    """``[start, end)`` each planned partition loads in this run (empty ranges left out)."""
    return {p.key: (p.start, p.end) for p in plan.partitions if p.end > p.start}


def overlapping(f: FileRecord, ranges: dict[PartitionKey, tuple[int, int]]) -> list[PartitionKey]:
    """The partitions of ``ranges`` whose reloaded range overlaps one of the compacted file's sources."""
    out: list[PartitionKey] = []
    for b, p, lo, hi in f.sources:
        key = (f.topic, b, p)
        cut = ranges.get(key)
        if cut is not None and lo < cut[1] and cut[0] < hi and key not in out:
            out.append(key)
    return out


def compacted_to_rewrite(state: LoaderState, ranges: dict[PartitionKey, tuple[int, int]]) -> list[FileRecord]:
    """Committed compacted files holding offsets the run reloads, by path.

    One pass over the committed files of the run's topics (every load asks: after
    ``ingest loader reset-offsets`` a plain load is a replay too).
    """
    out = []
    for topic in sorted({k[0] for k in ranges}):
        out += [f for f in state.files(topic) if f.sources and overlapping(f, ranges)]
    return sorted(out, key=lambda f: f.path)


def trim_sources(sources: Sequence[Source], ranges: dict[PartitionKey, tuple[int, int]], topic: str) -> tuple[Source, ...]:
    """``sources`` without the reloaded ranges (a source cut by a range keeps its parts outside it)."""
    out: list[Source] = []
    for b, p, lo, hi in sources:
        cut = ranges.get((topic, b, p))
        if cut is None or hi <= cut[0] or cut[1] <= lo:
            out.append((b, p, lo, hi))
            continue
        if lo < cut[0]:
            out.append((b, p, lo, cut[0]))
        if cut[1] < hi:
            out.append((b, p, cut[1], hi))
    return tuple(out)


def rewrite_path(path: str, run_id: str) -> str:
    """``<stem>.r-<run_id>.<ext>`` in the same hour directory (an older ``.r-`` tag is replaced)."""
    stem, ext = posixpath.splitext(path)
    return f"{_REWRITE_TAG.sub('', stem)}.r-{run_id}{ext}"


def reloaded_ids(storage: Storage, added: Sequence[FileRecord], keys: set[PartitionKey],
                 hour: tuple[str | None, int | None]) -> set[tuple[str, int]]:
    """The ids of every row the run staged for partitions ``keys`` in ``hour`` (``(dt, hour)``).

    A message's copies all have its ``header.time``, so they are all in one hour:
    only the reloaded files of the compacted file's own hour can hold its rows,
    which bounds the ids held at once to one hour of one topic (as compaction's).
    """
    ids: set[tuple[str, int]] = set()
    for rec in added:
        if rec.kind == "data" and rec.key in keys and (rec.dt, rec.hour) == hour:
            ids.update(message_ids(rec.format, storage.read_bytes(storage.join(rec.staging or rec.path))))
    return ids


def rewrite_compacted(storage: Storage, plan: LoadPlan, state: LoaderState,
                      added: Sequence[FileRecord]) -> tuple[list[str], list[FileRecord]]:
    """(compacted paths the load withdraws, their staged rewrites) for the load's one commit.

    ``added``: the load's staged files (their ``staging`` paths are read for the ids).
    """
    ranges = reloaded_ranges(plan)
    targets = compacted_to_rewrite(state, ranges)
    if not targets:
        return [], []
    withdrawn: list[str] = []
    rewrites: list[FileRecord] = []
    for f in targets:
        keys = overlapping(f, ranges)
        drop = reloaded_ids(storage, added, set(keys), (f.dt, f.hour))
        result = without_ids(f.format, storage.read_bytes(state.full_path(f)), drop)
        withdrawn.append(f.path)
        sources = trim_sources(f.sources, {k: ranges[k] for k in keys}, f.topic)
        log.info("replay %s: compacted file %s holds reloaded ranges of %s: %d rows taken out, %d kept",
                 plan.run_id, f.path, [f"b{k[1]}p{k[2]}" for k in keys], result.dropped, result.kept)
        if result.kept == 0:
            continue
        path = rewrite_path(f.path, plan.run_id)
        staged = commit.staging_relpath(plan.run_id, layout.staged_name(posixpath.basename(path)))
        storage.mkdirs(storage.join(commit.staging_relpath(plan.run_id)))
        storage.write_bytes(storage.join(staged), result.data, overwrite=True)
        rewrites.append(FileRecord(
            path=path, topic=f.topic, broker_id=-1, partition=-1,
            start_offset=min((s[2] for s in sources), default=0), end_offset=max((s[3] for s in sources), default=0),
            rows=result.kept, format=f.format, dt=f.dt, hour=f.hour, bytes=len(result.data), schema_id=f.schema_id,
            min_time_ms=f.min_time_ms, max_time_ms=f.max_time_ms, kind="data", staging=staged, run_id=plan.run_id,
            sources=sources,
        ))
    return withdrawn, rewrites
