"""The commit manifests on storage, read-only: list them, read one, tell whether it is published.

A manifest ``_ingest/commits/<seq>.json`` is committed from the moment it exists;
its ``<seq>.published`` marker says its roll-forward (staged files renamed into
place, withdrawn files deleted) has finished. Both the committer
(:mod:`ingest.loader.commit`) and the state reader (:mod:`ingest.loader.state`)
build on this module; nothing here writes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.loader import layout
from ingest.loader.records import Manifest
from ingest.errors import StorageError
from ingest.storage import Storage


@dataclass(frozen=True)
class CommitsListing:
    """One listing of the commits directory: every manifest's seq and which are published."""

    seqs: tuple[int, ...]          # ascending
    published: frozenset[int]

    @property
    def latest(self) -> int:
        """The current commit (0: nothing committed yet)."""
        return self.seqs[-1] if self.seqs else 0

    @property
    def unpublished(self) -> tuple[int, ...]:
        """Committed manifests whose roll-forward has not finished (a writer crashed mid-commit), ascending."""
        return tuple(s for s in self.seqs if s not in self.published)


def list_commits(storage: Storage) -> CommitsListing:
    """Manifests and markers from one directory listing (one call on HDFS, however many commits)."""
    seqs, published = [], set()
    for info in storage.list(storage.join(layout.COMMITS_DIR)):
        seq = layout.parse_manifest_name(info.name)
        if seq is not None:
            seqs.append(seq)
            continue
        seq = layout.parse_published_name(info.name)
        if seq is not None:
            published.add(seq)
    return CommitsListing(tuple(sorted(seqs)), frozenset(published))


def manifest_seqs(storage: Storage) -> list[int]:
    """Sequence numbers of every committed manifest, ascending."""
    return list(list_commits(storage).seqs)


def read_manifest(storage: Storage, seq: int) -> Manifest:
    """Manifest ``seq``, from ``commits/`` or, once a checkpoint covers it, from ``archive/``.

    Raises:
        StorageError: neither exists.
    """
    try:
        return Manifest.from_bytes(storage.read_bytes(storage.join(layout.manifest_path(seq))))
    except (StorageError, FileNotFoundError):
        pass  # archived (maybe just now, by a writer's checkpoint)
    try:
        return Manifest.from_bytes(storage.read_bytes(storage.join(layout.archived_manifest_path(seq))))
    except (StorageError, FileNotFoundError) as exc:
        raise StorageError(f"manifest {seq} is in neither {layout.COMMITS_DIR} nor {layout.ARCHIVE_DIR} of "
                           f"{storage.uri}: the destination was modified outside the loader") from exc


def archived_seqs(storage: Storage, first: int = 0) -> list[int]:
    """Seqs of the archived manifests from ``first`` on, ascending (lists the archive's shards from ``first``'s)."""
    seqs = []
    for shard in storage.list(storage.join(layout.ARCHIVE_DIR)):
        if not shard.name.isdigit() or (int(shard.name) + 1) * layout.ARCHIVE_SHARD <= first:
            continue
        for info in storage.list(shard.path):
            seq = layout.parse_manifest_name(info.name)
            if seq is not None and seq >= first:
                seqs.append(seq)
    return sorted(seqs)


def is_published(storage: Storage, seq: int) -> bool:
    """True once every file of manifest ``seq`` is in place (its marker exists)."""
    return storage.exists(storage.join(layout.published_marker(seq)))
