"""The atomic commit of data files plus offsets, and roll-forward recovery.

Protocol (one load run, all steps on the job's storage):

1. Tasks write their files under ``_ingest/staging/<run_id>/`` with attempt-unique
   names. The driver learns the files of the *successful* attempts from the Spark
   result (never from a listing), so files of failed or speculative attempts are
   ignored and later garbage-collected.
2. The driver writes a manifest (:class:`~ingest.loader.records.Manifest`): the full
   new offsets, the files to add (final path + staging path), the files to remove,
   the lost ranges. It is written to a temporary name and renamed, *without
   replacing*, to ``_ingest/commits/<seq>.json``. **That rename is the commit point**:
   before it the previous state is current; after it the new one is, even though
   the files still sit in staging. Two concurrent committers cannot both take
   ``seq``; the loser gets :class:`CommitConflictError`.
3. :func:`publish` rolls the manifest forward: each staged file is renamed to its
   final path (a same-named old file is deleted first), then removed files are
   deleted, then ``<seq>.published`` is written. Every step is idempotent: a file
   already at its final path with no staged copy is done.
4. Staging of the run is deleted.
5. Every ``state.checkpoint.interval`` commits the committer writes a checkpoint
   and archives the manifests it covers (:mod:`ingest.loader.checkpoint`); a
   crash there leaves the state readable, and the next commit retries.

Every writer (the load job, ``reset-offsets``, compaction) calls :func:`roll_forward`
before it writes, which publishes any manifest without its marker;
:func:`commit_files` does too, so no manifest is ever committed on top of an
unfinished one. Readers never do: :mod:`ingest.loader.state` presents a committed
but unpublished manifest as committed without touching a file. So a SIGKILL
anywhere leaves the previous state (no manifest) or the new state (manifest,
completed by the next writer): never both, never half. See ``docs/loader.md`` for
the argument and ``ingest.loader.faults`` for the crash points the tests use.
"""
from __future__ import annotations

import logging
import posixpath
import uuid
from typing import Iterable, Sequence

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import CommitConflictError, CommitError, StorageError
from ingest.loader import layout
from ingest.loader.checkpoint import DEFAULT_INTERVAL
from ingest.loader.checkpoint_writer import maybe_checkpoint
from ingest.loader.faults import crash_point
from ingest.loader.manifests import list_commits, read_manifest
from ingest.loader.records import FileRecord, Manifest, OffsetRecord
from ingest.lost_ranges import LostRange
from ingest.loader.state import LoaderState
from ingest.storage import Storage

log = logging.getLogger(__name__)


def write_manifest(storage: Storage, manifest: Manifest) -> None:
    """Step 2: make ``manifest`` the current state with one no-replace rename.

    Raises:
        CommitConflictError: ``manifest.seq`` is taken (a concurrent commit won).
    """
    final = storage.join(layout.manifest_path(manifest.seq))
    tmp = storage.join(layout.COMMITS_DIR, f".tmp-{manifest.seq}-{uuid.uuid4().hex[:10]}")
    storage.write_bytes(tmp, manifest.to_bytes())
    try:
        storage.rename(tmp, final)
    except StorageError as exc:
        storage.delete(tmp)
        if storage.exists(final):
            raise CommitConflictError(
                f"commit {manifest.seq} of run {manifest.run_id} lost to a concurrent commit "
                f"(is another loader or compaction running on {storage.uri}?); nothing of this run is visible"
            ) from exc
        raise
    log.info("committed manifest %d (%s, run %s): %d files added, %d removed",
             manifest.seq, manifest.kind, manifest.run_id, len(manifest.added), len(manifest.removed))


def publish(storage: Storage, manifest: Manifest) -> None:
    """Step 3: move every staged file of a committed manifest into place (idempotent)."""
    first = True
    for rec in manifest.added:
        final = storage.join(rec.path)
        staged = storage.join(rec.staging) if rec.staging else None
        if staged is not None and storage.exists(staged):
            if storage.exists(final):
                # An older file of the same name (a replayed range): this manifest replaces it.
                storage.delete(final)
            try:
                storage.rename(staged, final)
            except StorageError:
                # A concurrent recovery may have moved it first; fine if it is in place now.
                if storage.exists(staged) or not storage.exists(final):
                    raise
            if first:
                first = False
                crash_point("mid-publish")
        elif not storage.exists(final):
            raise CommitError(
                f"manifest {manifest.seq}: file {rec.path} is neither staged at {rec.staging} nor published; "
                f"the destination was modified outside the loader"
            )
    added = {rec.path for rec in manifest.added}
    for path in manifest.removed:
        if path not in added:
            storage.delete(storage.join(path))
    crash_point("after-publish")
    storage.write_bytes(storage.join(layout.published_marker(manifest.seq)), b"", overwrite=True)


def roll_forward(storage: Storage) -> list[int]:
    """The writers' first step: publish every committed but unpublished manifest; returns their seqs.

    Idempotent, and safe against a concurrent roll-forward of the same manifest.
    Never called by readers (see :mod:`ingest.loader.state`).
    """
    done = []
    for seq in list_commits(storage).unpublished:
        manifest = read_manifest(storage, seq)
        log.warning("rolling forward: publishing manifest %d of run %s left unpublished by a crash", seq, manifest.run_id)
        publish(storage, manifest)
        gc_staging(storage, [manifest.run_id])
        done.append(seq)
    return done


def gc_staging(storage: Storage, run_ids: Iterable[str]) -> None:
    """Delete the staging directories of finished runs (their leftovers are never committed)."""
    for run_id in run_ids:
        storage.delete(storage.join(layout.staging_dir(run_id)), recursive=True)


def commit_files(
    storage: Storage,
    *,
    kind: str,
    run_id: str,
    offsets: Sequence[OffsetRecord],
    added: Sequence[FileRecord] = (),
    removed: Sequence[str] = (),
    lost_ranges: Sequence[LostRange] = (),
    expected_seq: int | None = None,
    note: str = "",
    clock: Clock = SYSTEM_CLOCK,
    checkpoint_interval: int = DEFAULT_INTERVAL,
) -> Manifest:
    """Steps 2-3: commit one manifest after ``expected_seq`` and publish it; then checkpoint when due.

    An unfinished earlier commit is rolled forward first, so publishing this one
    never races the leftovers of a crashed one.

    Args:
        expected_seq: the seq the caller planned against (None: the current latest);
            if another commit happened since, :class:`CommitConflictError`.
        checkpoint_interval: write a checkpoint once this many commits passed since the last
            one (``state.checkpoint.interval``; 0: never), see :mod:`ingest.loader.checkpoint`.
    """
    roll_forward(storage)
    latest = list_commits(storage).latest
    if expected_seq is not None and latest != expected_seq:
        raise CommitConflictError(
            f"run {run_id} planned against commit {expected_seq} but the latest is {latest}: "
            f"another job committed meanwhile; nothing of this run is visible, rerun it"
        )
    manifest = Manifest(
        seq=latest + 1, kind=kind, run_id=run_id, committed_at_ms=clock.time_ms(),
        offsets=tuple(sorted(offsets, key=lambda o: o.key)), added=tuple(added),
        removed=tuple(removed), lost_ranges=tuple(lost_ranges), note=note,
    )
    crash_point("before-manifest")
    write_manifest(storage, manifest)
    crash_point("after-manifest")
    publish(storage, manifest)
    maybe_checkpoint(storage, manifest.seq, checkpoint_interval, now_ms=clock.time_ms())
    return manifest


def replace_files(
    storage: Storage,
    old: Sequence[str],
    new: Sequence[FileRecord],
    *,
    run_id: str,
    note: str = "compaction",
    clock: Clock = SYSTEM_CLOCK,
    checkpoint_interval: int = DEFAULT_INTERVAL,
) -> Manifest:
    """Atomically replace committed files ``old`` (relative paths) by ``new`` (for compaction).

    Write each new file first under ``layout.staging_dir(run_id)`` and set its
    ``FileRecord.staging`` to that relative path and ``path`` to its final relative
    path. One manifest withdraws ``old`` and adds ``new``: readers of
    :mod:`ingest.loader.state` see the old set or the new set, never a mix.
    Offsets are unchanged.

    Raises:
        CommitError: a path in ``old`` is not currently committed (nothing changes).
        CommitConflictError: a concurrent commit won; re-read the state and retry.
    """
    state = LoaderState.load(storage)
    current = {f.path for f in state.files(kind=None)}
    missing = [p for p in old if p not in current]
    if missing:
        raise CommitError(f"cannot replace files that are not committed: {missing[:5]} ({len(missing)} in all)")
    for rec in new:
        if not rec.staging:
            raise CommitError(f"new file {rec.path} has no staging path; write it under {layout.staging_dir(run_id)} first")
    manifest = commit_files(
        storage, kind="compaction", run_id=run_id, offsets=list(state.offsets.values()),
        added=new, removed=old, expected_seq=state.seq, note=note, clock=clock,
        checkpoint_interval=checkpoint_interval,
    )
    gc_staging(storage, [run_id])
    return manifest


def staging_relpath(run_id: str, *parts: str) -> str:
    """A path under the run's staging directory, relative to the destination root."""
    return posixpath.join(layout.staging_dir(run_id), *parts)
