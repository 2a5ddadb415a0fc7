"""Read API of the loader's committed state (used by the loader, the audit and compaction).

Layout (see :mod:`ingest.loader.layout`)::

    <destination>/_ingest/commits/<seq:012d>.json        commit manifests; the highest seq is current
    <destination>/_ingest/commits/<seq:012d>.published   marker: that manifest's files are in place
    <destination>/_ingest/checkpoints/...                the state every N commits (ingest.loader.checkpoint)
    <destination>/_ingest/archive/...                    manifests a checkpoint covers
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

Reading cost: the newest valid checkpoint plus the manifests after it (at most
``state.checkpoint.interval``), whatever the number of commits; the committed
files and lost ranges are read on first use (per topic for files).

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
from typing import Any

from ingest.errors import CheckpointCorruptError
from ingest.loader import checkpoint, layout
from ingest.loader.manifests import archived_seqs, list_commits, read_manifest
from ingest.loader.records import FileRecord, Manifest, OffsetRecord, PartitionKey
from ingest.lost_ranges import LostRange
from ingest.storage import Storage, open_storage

log = logging.getLogger(__name__)

__all__ = ["LoaderState", "FileRecord", "LostRange", "OffsetRecord", "run_records", "read_run_record", "open_state"]


class LoaderState:
    """An immutable snapshot of the committed state at commit ``seq`` (build it with :meth:`load`).

    ``offsets``, ``unpublished`` and the lost ranges are read by :meth:`load`; the
    committed files are read on first use, per topic, from the checkpoint's part of
    that topic plus the manifests after it (so planning, which needs offsets, never
    reads the file list of a warehouse).
    """

    __slots__ = ("storage", "seq", "offsets", "unpublished", "checkpoint_seq", "_cp", "_recent", "_lost",
                 "_located", "_topics", "_runs")

    def __init__(self, storage: Storage, seq: int, offsets: dict[PartitionKey, OffsetRecord],
                 cp: "checkpoint.Checkpoint | None", recent: tuple[Manifest, ...], unpublished: tuple[int, ...],
                 located: dict[str, str]) -> None:
        self.storage = storage
        self.seq = seq
        self.offsets = offsets
        self.unpublished = unpublished  # committed, roll-forward unfinished (a writer crashed mid-commit)
        self.checkpoint_seq = cp.seq if cp else 0  # the checkpoint the state was read from (0: none)
        self._cp = cp
        self._recent = recent  # the manifests after the checkpoint, ascending
        self._lost: tuple[LostRange, ...] | None = None  # read on first use (the checkpoint's lost part)
        self._located = located  # path -> staged copy holding its bytes
        self._topics: dict[str, dict[str, FileRecord]] = {}
        self._runs: dict[str, int] | None = None

    def __repr__(self) -> str:
        return f"LoaderState({self.storage.uri}, seq={self.seq}, checkpoint={self.checkpoint_seq})"

    @classmethod
    def load(cls, storage: Storage, *, upto: int | None = None, checkpoint_below: int | None = None) -> "LoaderState":
        """The newest valid checkpoint plus the manifests after it; reads only (see the module docstring).

        Args:
            upto: fold only the commits up to this seq (the checkpoint writer's view).
            checkpoint_below: use only checkpoints older than this (a newer one is corrupt).
        """
        listing = list_commits(storage)
        bounds = [b for b in (None if upto is None else upto + 1, checkpoint_below) if b is not None]
        below = min(bounds) if bounds else None
        cp = checkpoint.find(storage, below=below)
        latest = max(listing.latest, cp.seq if cp else 0)
        if upto is not None:
            latest = min(latest, upto)
        if cp is not None:
            seqs: list[int] = list(range(cp.seq + 1, latest + 1))
        else:  # no checkpoint (a destination written before them, or all corrupt): fold every manifest
            seqs = sorted(s for s in set(listing.seqs) | set(archived_seqs(storage)) if s <= latest)
        recent = tuple(read_manifest(storage, s) for s in seqs)
        pending = set(listing.unpublished) & set(seqs)
        located: dict[str, str] = {}
        for m in recent:
            added = {rec.path for rec in m.added}
            for path in m.removed:
                if path not in added:
                    located.pop(path, None)
            for rec in m.added:
                located.pop(rec.path, None)
                # Roll-forward unfinished: until its rename the file's bytes are its staged copy
                # (a same-named file at the final path is the older one it replaces).
                if m.seq in pending and rec.staging and storage.exists(storage.join(rec.staging)):
                    located[rec.path] = rec.staging
        offsets = {o.key: o for o in (recent[-1].offsets if recent else cp.offsets if cp else ())}
        unpublished = tuple(sorted(pending))
        if unpublished:
            log.info("commit(s) %s of %s are committed but not yet rolled forward; reading their files where "
                     "they are (the next load or compaction finishes them)", list(unpublished), storage.uri)
        return cls(storage, latest, offsets, cp, recent, unpublished, located)

    def _base(self, topic: str | None) -> dict[str, FileRecord]:
        """The files (of ``topic``) at the checkpoint; a corrupt part is replaced by a fold without it."""
        if self._cp is None:
            return {}
        try:
            return checkpoint.read_files(self.storage, self._cp, topic)
        except CheckpointCorruptError as exc:
            log.warning("ignoring checkpoint %d of %s: %s; folding from an older one", self._cp.seq, self.storage.uri, exc)
            older = LoaderState.load(self.storage, upto=self._cp.seq, checkpoint_below=self._cp.seq)
            return {f.path: f for f in older.files(topic, kind=None)}

    def _files_of(self, topic: str | None) -> list[FileRecord]:
        if topic is None:
            names = set(self._cp.topics if self._cp else ()) | {r.topic for m in self._recent for r in m.added}
            missing = sorted(names - set(self._topics))
            if missing:
                self._fold(self._base(None), missing)
            return [f for t in sorted(names) for f in self._topics[t].values()]
        if topic not in self._topics:
            self._fold(self._base(topic), [topic])
        return list(self._topics[topic].values())

    def _fold(self, base: dict[str, FileRecord], topics: list[str]) -> None:
        """Fold the manifests after the checkpoint onto ``base`` and cache the result of each of ``topics``."""
        wanted = set(topics)
        files = {p: f for p, f in base.items() if f.topic in wanted}
        for m in self._recent:
            added = {rec.path for rec in m.added}
            for path in m.removed:
                if path not in added:
                    files.pop(path, None)
            for rec in m.added:
                if rec.topic in wanted:
                    files[rec.path] = rec
        for t in topics:
            self._topics[t] = {}
        for p, f in files.items():
            self._topics[f.topic][p] = f

    def files(self, topic: str | None = None, *, kind: str | None = "data") -> list[FileRecord]:
        """Committed files (of ``topic``; of ``kind`` 'data' / 'quarantine', None for both), by path."""
        return sorted((f for f in self._files_of(topic) if kind is None or f.kind == kind), key=lambda f: f.path)

    def files_of_partition(self, key: PartitionKey, *, kind: str | None = "data") -> list[FileRecord]:
        topic, broker_id, partition = key
        return [
            f for f in self.files(topic, kind=kind)
            if (f.broker_id, f.partition) == (broker_id, partition)
            or any((s[0], s[1]) == (broker_id, partition) for s in f.sources)
        ]

    def lost_ranges(self, topic: str | None = None) -> list[LostRange]:
        """Every lost range (of ``topic``), in commit order."""
        if self._lost is None:
            base: list[LostRange] = []
            if self._cp is not None:
                try:
                    base = checkpoint.read_lost(self.storage, self._cp)
                except CheckpointCorruptError as exc:
                    log.warning("ignoring checkpoint %d of %s: %s", self._cp.seq, self.storage.uri, exc)
                    base = LoaderState.load(self.storage, upto=self._cp.seq, checkpoint_below=self._cp.seq).lost_ranges()
            self._lost = tuple(base) + tuple(r for m in self._recent for r in m.lost_ranges)
        return [r for r in self._lost if topic is None or r.topic == topic]

    def topics(self) -> list[str]:
        return sorted({k[0] for k in self.offsets} | {f.topic for f in self._files_of(None)})

    def offset(self, topic: str, broker_id: int, partition: int) -> int | None:
        rec = self.offsets.get((topic, broker_id, partition))
        return None if rec is None else rec.offset

    def runs(self) -> dict[str, int]:
        """Run id -> seq of its last commit, for every commit up to :attr:`seq` (reads the checkpoint's run index)."""
        if self._runs is None:
            runs: dict[str, int] = {}
            if self._cp is not None:
                try:
                    runs = checkpoint.read_runs(self.storage, self._cp)
                except CheckpointCorruptError as exc:
                    log.warning("ignoring checkpoint %d of %s: %s", self._cp.seq, self.storage.uri, exc)
                    runs = LoaderState.load(self.storage, upto=self._cp.seq, checkpoint_below=self._cp.seq).runs()
            runs.update((m.run_id, m.seq) for m in self._recent)
            self._runs = runs
        return self._runs

    def commit_of_run(self, run_id: str) -> int | None:
        """The seq of run ``run_id``'s commit, None when it never committed (the commits after the
        checkpoint first, then the checkpoint's run index)."""
        for m in reversed(self._recent):
            if m.run_id == run_id:
                return m.seq
        return self.runs().get(run_id)

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
