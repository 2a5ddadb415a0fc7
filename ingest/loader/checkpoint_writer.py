"""Writing checkpoints of the loader state and archiving the manifests they cover (writers only).

The format and the protocol are :mod:`ingest.loader.checkpoint`'s; this module
holds the writer's steps (fold, write parts + top level, move the pointer,
archive, prune). Crash points ``checkpoint-written`` (top level written, pointer
not moved) and ``mid-archive`` (pointer moved, one manifest archived) let the
tests SIGKILL a real writer between them.
"""
from __future__ import annotations

import hashlib
import logging

from ingest.errors import IngestError, StorageError
from ingest.loader import layout
from ingest.loader.checkpoint import (
    CHECKPOINT_VERSION, DEFAULT_INTERVAL, FILE_FIELDS, FILES, KEEP, LOST, RUNS, Checkpoint, Part, checkpoint_seqs, dumps, file_rows,
    pointer_seq, seal,
)
from ingest.loader.faults import crash_point
from ingest.loader.manifests import list_commits
from ingest.loader.state import LoaderState
from ingest.storage import Storage

log = logging.getLogger(__name__)

__all__ = ["write_checkpoint", "archive", "maybe_checkpoint", "DEFAULT_INTERVAL"]


def write_checkpoint(storage: Storage, seq: int, *, now_ms: int = 0) -> Checkpoint | None:
    """Write the checkpoint of commit ``seq`` and point ``_last_checkpoint`` at it (steps 1-2).

    Returns None (and writes nothing) when ``seq`` is 0 or a manifest up to ``seq``
    is not yet published.
    """
    listing = list_commits(storage)
    if seq <= 0 or any(s <= seq for s in listing.unpublished):
        log.info("no checkpoint at %d of %s: manifest(s) %s not yet published", seq, storage.uri,
                 [s for s in listing.unpublished if s <= seq])
        return None
    state = LoaderState.load(storage, upto=seq)
    by_topic: dict[str, list] = {}
    for rec in state.files(kind=None):
        by_topic.setdefault(rec.topic, []).append(rec)
    parts = []
    storage.mkdirs(storage.join(layout.CHECKPOINTS_DIR))
    for i, topic in enumerate(sorted(by_topic)):
        parts.append(_write_part(storage, layout.checkpoint_part_name(seq, f"files.{i}"), FILES, topic,
                                 {"fields": FILE_FIELDS, FILES: file_rows(by_topic[topic])}, len(by_topic[topic])))
    runs = state.runs()
    parts.append(_write_part(storage, layout.checkpoint_part_name(seq, RUNS), RUNS, None, {RUNS: runs}, len(runs)))
    lost = [r.to_json() for r in state.lost_ranges()]
    parts.append(_write_part(storage, layout.checkpoint_part_name(seq, LOST), LOST, None, {LOST: lost}, len(lost)))
    cp = Checkpoint(seq, tuple(state.offsets[k] for k in sorted(state.offsets)), tuple(parts), now_ms)
    top = seal(dumps({
        "version": CHECKPOINT_VERSION, "seq": seq, "written_at_ms": now_ms,
        "offsets": [o.to_json() for o in cp.offsets],
        "parts": [{"name": p.name, "kind": p.kind, "topic": p.topic, "count": p.count, "sha256": p.sha256}
                  for p in parts],
    }))
    storage.write_atomic(storage.join(layout.CHECKPOINTS_DIR, layout.checkpoint_name(seq)), top)
    crash_point("checkpoint-written")
    pointer = {"seq": seq, "sha256": hashlib.sha256(top).hexdigest(), "size": len(top)}
    storage.write_atomic(storage.join(layout.CHECKPOINTS_DIR, layout.LAST_CHECKPOINT), seal(dumps(pointer)))
    log.info("checkpoint %d of %s: %d files in %d part(s), %d offsets, %d lost ranges", seq, storage.uri,
             sum(p.count for p in parts if p.kind == FILES), len(parts), len(cp.offsets), len(lost))
    return cp


def _write_part(storage: Storage, name: str, kind: str, topic: str | None, body: dict, count: int) -> Part:
    data = seal(dumps(body))
    storage.write_atomic(storage.join(layout.CHECKPOINTS_DIR, name), data)
    return Part(name, kind, topic, count, hashlib.sha256(data).hexdigest())


def archive(storage: Storage) -> int:
    """Steps 3-4: move manifests the pointer's checkpoint covers out of ``commits/``; prune old checkpoints.

    Returns how many manifests were moved. Idempotent; a crash leaves covered
    manifests in ``commits/`` (skipped by readers, moved by the next call).
    """
    seq = pointer_seq(storage)
    if not seq:
        return 0
    moved = 0
    listing = list_commits(storage)
    for s in listing.seqs:
        if s >= seq:
            break
        _move(storage, layout.manifest_path(s), layout.archived_manifest_path(s))
        if moved == 0:
            crash_point("mid-archive")
        moved += 1
    for s in sorted(listing.published):  # markers after their manifests (an archived manifest is published)
        if s < seq:
            _move(storage, layout.published_marker(s), layout.archived_marker_path(s))
    prune(storage, seq)
    if moved:
        log.info("archived %d manifest(s) of %s covered by checkpoint %d", moved, storage.uri, seq)
    return moved


def prune(storage: Storage, current: int) -> int:
    """Delete checkpoint files (and leftover temp files) older than the newest :data:`KEEP` checkpoints;
    never the pointer's (``current``). Returns how many files were deleted."""
    keep = set(checkpoint_seqs(storage)[:KEEP]) | {current}
    oldest = min(keep)
    deleted = 0
    for info in storage.list(storage.join(layout.CHECKPOINTS_DIR)):
        stem = info.name[:layout.SEQ_DIGITS]
        if stem.isdigit() and int(stem) < oldest:
            storage.delete(info.path)
            deleted += 1
    return deleted


def _move(storage: Storage, src: str, dst: str) -> None:
    try:
        storage.rename(storage.join(src), storage.join(dst))
    except StorageError:
        if storage.exists(storage.join(src)):  # not a concurrent archive that moved it first
            raise


def maybe_checkpoint(storage: Storage, seq: int, interval: int = DEFAULT_INTERVAL, *, now_ms: int = 0) -> bool:
    """After commit ``seq``: checkpoint and archive when ``interval`` commits passed since the last checkpoint.

    A writer step. A failure is logged and swallowed: the commit already happened,
    and the next writer tries again (the state stays readable without it).
    """
    last = pointer_seq(storage)
    if interval <= 0 or seq - last < interval:
        if last and any(s < last for s in _hot(storage)):  # an archive interrupted by a crash: finish it
            _safely(storage, seq, lambda: archive(storage))
        return False
    if not _safely(storage, seq, lambda: write_checkpoint(storage, seq, now_ms=now_ms)):
        return False
    _safely(storage, seq, lambda: archive(storage))
    return True


def _hot(storage: Storage) -> set[int]:
    """Seqs of manifests and markers in ``commits/``."""
    listing = list_commits(storage)
    return set(listing.seqs) | set(listing.published)


def _safely(storage: Storage, seq: int, step):
    """Run a checkpoint step after commit ``seq``; a storage failure is logged, not raised (the commit
    already happened)."""
    try:
        return step()
    except (StorageError, OSError, IngestError) as exc:
        log.warning("checkpointing after commit %d of %s failed (%s); the state stays readable, the next "
                    "commit retries", seq, storage.uri, exc)
        return None
