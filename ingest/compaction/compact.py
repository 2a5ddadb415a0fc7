"""Merge one hour's committed files into staged new files, then swap them in with one commit.

:func:`merge_hour` is the per-hour task (runs in a Spark executor or in
process): it streams the hour's committed files through the merge and
deduplication of :mod:`ingest.compaction.formats` into new files under the
loader's staging directory of this compaction run, holding a batch at a time,
never the hour. It changes nothing visible.

:func:`commit` is the driver's single atomic step: one
:func:`ingest.loader.commit.replace_files` manifest withdraws every old file
and adds every new one, for all hours of the run at once. Readers of
:mod:`ingest.loader.state` (the audit, Spark jobs reading the committed file
list) see the old sets before the manifest and the new sets after it; a crash
at any point leaves one or the other, and the next writer's roll-forward
(:func:`ingest.loader.commit.roll_forward`) finishes a committed manifest
(docs/operations.md, "Compaction").
"""
from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from functools import partial
from typing import Any, BinaryIO, Sequence

from ingest.compaction.formats import Source, merge
from ingest.compaction.plan import HourPlan, Outcome, Settings
from ingest.loader.commit import replace_files, staging_relpath
from ingest.loader.layout import data_file_path, staged_name
from ingest.loader.records import FileRecord

log = logging.getLogger(__name__)

CRASH_ENV = "INGEST_COMPACTION_CRASH_AT"
"""Test hook: ``staged`` makes the driver SIGKILL itself after every hour is staged and
before the commit. Crash points inside the commit are the loader's (``INGEST_FAULTS``)."""


def crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        log.warning("fault injection: SIGKILL at compaction step %s (%s)", step, CRASH_ENV)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class HourResult:
    """A merged hour: its outcome, the old paths and the new (staged) FileRecords."""

    outcome: Outcome
    old: tuple[str, ...]
    new: tuple[Any, ...]


def _sources(rec: Any) -> list[tuple[int, int, int, int]]:
    if rec.sources:
        return [tuple(s) for s in rec.sources]
    return [(rec.broker_id, rec.partition, rec.start_offset, rec.end_offset)]


def _source(storage: Any, rec: Any) -> Source:
    path = storage.join(rec.path)
    info = storage.status(path)
    if info is None:
        storage.open_read(path).close()  # raises the storage's StorageError naming the path
        info = storage.status(path)
    return Source(partial(storage.open_read, path), info.size, rec.rows)


def merge_hour(storage: Any, settings: Settings, plan: HourPlan, compaction_id: str) -> HourResult:
    """Read, merge and stage one hour, streaming (:mod:`ingest.compaction.formats`); nothing becomes visible here."""
    hour = plan.hour
    groups: dict[tuple[str, Any], list[Any]] = {}
    for rec in plan.files:
        groups.setdefault((rec.format, rec.schema_id), []).append(rec)
    new: list[Any] = []
    rows_in = rows_out = dups = bytes_in = bytes_out = 0
    for gi, ((fmt, schema_id), recs) in enumerate(sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1))):
        sources = [_source(storage, r) for r in recs]
        bytes_in += sum(s.bytes for s in sources)
        names: list[str] = []

        def open_output(fi: int, gi: int = gi, fmt: str = fmt, names: list[str] = names) -> BinaryIO:
            names.append(f"{hour.topic}.compacted.{compaction_id}.{gi}-{fi}.{fmt}")
            staged = storage.join(staging_relpath(compaction_id, staged_name(names[-1])))
            storage.mkdirs(storage.join(staging_relpath(compaction_id)))
            storage.delete(staged)  # a retried task's partial file
            return storage.open_write(staged)

        result = merge(fmt, sources, open_output, settings.target_bytes, settings.parquet_compression,
                       settings.batch_bytes)
        rows_in += result.rows_in
        dups += result.duplicates
        sources_ranges = tuple(sorted({s for r in recs for s in _sources(r)}))
        times = [t for r in recs for t in (r.min_time_ms, r.max_time_ms) if t is not None]
        for name, rows in zip(names, result.rows):
            staged = staging_relpath(compaction_id, staged_name(name))
            size = storage.status(storage.join(staged)).size
            new.append(FileRecord(
                path=data_file_path(hour.topic, hour.dt, hour.hour, name), topic=hour.topic,
                broker_id=-1, partition=-1,
                start_offset=min(s[2] for s in sources_ranges), end_offset=max(s[3] for s in sources_ranges),
                rows=rows, format=fmt, dt=hour.dt, hour=hour.hour, bytes=size, schema_id=schema_id,
                min_time_ms=min(times) if times else None, max_time_ms=max(times) if times else None,
                kind="data", staging=staged, run_id=compaction_id, sources=sources_ranges,
            ))
            rows_out += rows
            bytes_out += size
    outcome = Outcome(str(hour), "compacted", "", len(plan.files), len(new), rows_in, rows_out, dups, bytes_in, bytes_out)
    log.info("merged %s: %d files (%d bytes) -> %d files (%d bytes), %d rows, %d duplicates dropped",
             hour, len(plan.files), bytes_in, len(new), bytes_out, rows_out, dups)
    return HourResult(outcome, tuple(r.path for r in plan.files), tuple(new))


def commit(storage: Any, results: Sequence[HourResult], compaction_id: str, clock: Any,
           checkpoint_interval: int = 100) -> Any:
    """The one atomic step: withdraw every old file and add every new one (a loader manifest)."""
    crash_point("staged")
    old = [p for r in results for p in r.old]
    new = [rec for r in results for rec in r.new]
    note = f"compaction {compaction_id}: {len(results)} hour(s), {len(old)} -> {len(new)} files"
    manifest = replace_files(storage, old, new, run_id=compaction_id, note=note, clock=clock,
                             checkpoint_interval=checkpoint_interval)
    log.info("committed %s as manifest %d", note, manifest.seq)
    return manifest
