"""Read API of the loader's committed state (used by the loader, the audit and compaction).

Layout (see :mod:`ingest.loader.layout`)::

    <destination>/_ingest/commits/<seq:012d>.json        commit manifests; the highest seq is current
    <destination>/_ingest/commits/<seq:012d>.published   marker: that manifest's files are in place
    <destination>/_ingest/runs/<run_id>.json             run records (every run, also failed ones)
    <destination>/_ingest/staging/<run_id>/              uncommitted task output (never read it)
    <destination>/_ingest/quarantine/<topic>/...jsonl    committed quarantined messages

How to read it::

    from ingest.storage import open_storage
    from ingest.loader.state import LoaderState

    state = LoaderState.load(open_storage("hdfs://nn:8020/data/events"))
    state.seq                          # int: the current commit (0 = nothing committed yet)
    state.offsets                      # {(topic, broker_id, partition): OffsetRecord(offset, last_time_ms, tally)}
    state.files(topic="pageviews")     # [FileRecord(path, topic, broker_id, partition, start_offset,
                                       #   end_offset, rows, format, dt, hour, bytes, schema_id,
                                       #   min_time_ms, max_time_ms, kind, run_id, sources)]
    state.full_path(rec)               # storage path;  state.spark_path(rec): what Spark reads
    state.lost_ranges(topic=None)      # [LostRange(topic, broker_id, partition, start_offset, end_offset,
                                       #   bytes, estimated_messages, after_time_ms, before_time_ms,
                                       #   run_id, detected_at_ms, cause, messages_exact,
                                       #   session_bounds: ((session, after_seq, before_seq), ...))]
    run_records(storage)               # [dict] every run record, oldest first (JSON of docs/loader.md)

Guarantees: loading only reads; it never renames, deletes or writes anything
in the destination, so the audit, ``loader status`` and compaction's planning
can look at a destination without changing it. The manifests are the truth: a
commit is current from the moment its manifest exists, even when a crash
interrupted its roll-forward (files still in staging, withdrawn files still on
disk). Such a state is presented as committed: its files are listed, and
:meth:`LoaderState.full_path` / :meth:`LoaderState.spark_path` point at where
each file's bytes are right now (its staged copy until the rename happens).
``state.unpublished`` lists those commits. Finishing them is a writer's job
(:func:`ingest.loader.commit.roll_forward`, which the load, reset-offsets and
compaction call before they write). The files listed are exactly the committed
ones: every message of a loaded offset range is in exactly one listed data file
(or one quarantine file); files in the data directories that are not listed
(withdrawn but not yet deleted, or leftovers of a crash) are not committed data.
A ``LoaderState`` is an immutable snapshot; load again to see later commits (a
writer rolling forward or compacting after the snapshot may move or delete the
files it lists).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ingest.loader import layout
from ingest.loader.manifests import list_commits, read_manifest
from ingest.loader.records import FileRecord, LostRange, Manifest, OffsetRecord, PartitionKey
from ingest.storage import Storage, open_storage

log = logging.getLogger(__name__)

__all__ = ["LoaderState", "FileRecord", "LostRange", "OffsetRecord", "run_records", "read_run_record", "open_state"]


@dataclass(frozen=True)
class LoaderState:
    """An immutable snapshot of the committed state at commit ``seq``."""

    storage: Storage
    seq: int
    offsets: dict[PartitionKey, OffsetRecord]
    _files: dict[str, FileRecord] = field(repr=False)
    _lost: tuple[LostRange, ...] = field(repr=False)
    manifests: tuple[Manifest, ...] = field(repr=False, default=())
    unpublished: tuple[int, ...] = ()  # committed, roll-forward unfinished (a writer crashed mid-commit)
    _located: dict[str, str] = field(repr=False, default_factory=dict)  # path -> staged copy holding its bytes

    @classmethod
    def load(cls, storage: Storage) -> "LoaderState":
        """Fold every committed manifest; reads only (see the module docstring)."""
        listing = list_commits(storage)
        pending = set(listing.unpublished)
        files: dict[str, FileRecord] = {}
        located: dict[str, str] = {}
        lost: list[LostRange] = []
        offsets: dict[PartitionKey, OffsetRecord] = {}
        manifests = []
        for s in listing.seqs:
            m = read_manifest(storage, s)
            manifests.append(m)
            added = {rec.path for rec in m.added}
            for path in m.removed:
                if path not in added:
                    files.pop(path, None)
                    located.pop(path, None)
            for rec in m.added:
                files[rec.path] = rec
                located.pop(rec.path, None)
                # Roll-forward unfinished: until its rename the file's bytes are its staged copy
                # (a same-named file at the final path is the older one it replaces).
                if s in pending and rec.staging and storage.exists(storage.join(rec.staging)):
                    located[rec.path] = rec.staging
            lost.extend(m.lost_ranges)
            offsets = {o.key: o for o in m.offsets}
        if pending:
            log.info("commit(s) %s of %s are committed but not yet rolled forward; reading their files where "
                     "they are (the next load or compaction finishes them)", sorted(pending), storage.uri)
        return cls(storage, listing.latest, offsets, files, tuple(lost), tuple(manifests), listing.unpublished,
                   located)

    def files(self, topic: str | None = None, *, kind: str | None = "data") -> list[FileRecord]:
        """Committed files (of ``topic``; of ``kind`` 'data' / 'quarantine', None for both), by path."""
        return sorted(
            (f for f in self._files.values() if (topic is None or f.topic == topic) and (kind is None or f.kind == kind)),
            key=lambda f: f.path,
        )

    def files_of_partition(self, key: PartitionKey, *, kind: str | None = "data") -> list[FileRecord]:
        topic, broker_id, partition = key
        return [
            f for f in self.files(topic, kind=kind)
            if (f.broker_id, f.partition) == (broker_id, partition)
            or any((s[0], s[1]) == (broker_id, partition) for s in f.sources)
        ]

    def lost_ranges(self, topic: str | None = None) -> list[LostRange]:
        return [r for r in self._lost if topic is None or r.topic == topic]

    def topics(self) -> list[str]:
        return sorted({k[0] for k in self.offsets} | {f.topic for f in self._files.values()})

    def offset(self, topic: str, broker_id: int, partition: int) -> int | None:
        rec = self.offsets.get((topic, broker_id, partition))
        return None if rec is None else rec.offset

    def full_path(self, rec: FileRecord | str) -> str:
        """Where the committed file's bytes are now (its staged copy while its roll-forward is unfinished)."""
        path = rec if isinstance(rec, str) else rec.path
        return self.storage.join(self._located.get(path, path))

    def spark_path(self, rec: FileRecord | str) -> str:
        return self.storage.spark_path(self.full_path(rec))


def open_state(destination: str) -> LoaderState:
    """:meth:`LoaderState.load` of the storage at ``destination`` (a URI); reads only."""
    return LoaderState.load(open_storage(destination))


def read_run_record(storage: Storage, run_id: str) -> dict[str, Any] | None:
    path = storage.join(layout.run_record_path(run_id))
    if not storage.exists(path):
        return None
    return json.loads(storage.read_bytes(path))


def run_records(storage: Storage) -> list[dict[str, Any]]:
    """Every run record, oldest first (by ``started_at_ms``, then run id)."""
    out = []
    for info in storage.list(storage.join(layout.RUNS_DIR)):
        if info.name.endswith(".json") and not info.name.startswith("."):
            try:
                out.append(json.loads(storage.read_bytes(info.path)))
            except ValueError:
                log.warning("skipping unreadable run record %s", info.path)
    out.sort(key=lambda rec: (rec.get("started_at_ms") or 0, rec.get("run_id", "")))
    return out
