"""Checkpoints of the loader state: a snapshot every N commits, so readers never fold every manifest.

Modelled on Delta Lake's checkpoints (PROTOCOL.md of delta-io/delta: a checkpoint
every ``delta.checkpointInterval`` commits, default 10 there, a ``_last_checkpoint``
pointer that readers start from, and V2 checkpoints whose top-level file holds the
small actions while "sidecar" files hold the add/remove file actions). Layout::

    _ingest/checkpoints/_last_checkpoint               pointer (a hint): {"seq", "sha256", "size"}
    _ingest/checkpoints/<seq:012d>.checkpoint.json     top level: offsets and the parts (name, kind, sha256, count)
    _ingest/checkpoints/<seq:012d>.files.<i>.json      part: the committed files of one topic (rows of fields)
    _ingest/checkpoints/<seq:012d>.runs.json           part: run id -> commit seq of every commit
    _ingest/checkpoints/<seq:012d>.lost.json           part: the lost ranges, in commit order
    _ingest/archive/<seq // 10000:08d>/<seq:012d>.json, .published   manifests a checkpoint covers

Every file starts with one line ``sha256:<hex of the rest>``; a file whose bytes
do not match it, that does not parse, or whose seq differs from its name is
ignored (the reader falls back to an older checkpoint, or to folding every
manifest). The checkpoint at ``seq`` is exactly the fold of manifests ``1..seq``:
offsets of manifest ``seq``, files = added minus removed, lost ranges in commit
order, and the run index; its manifests are all published (a checkpoint is
never written over an unfinished roll-forward).

Writers only (the load, reset-offsets and compaction, after their commit:
:func:`ingest.loader.checkpoint_writer.maybe_checkpoint` from
:func:`ingest.loader.commit.commit_files`); a reader never writes one. This
module reads and verifies; :mod:`ingest.loader.checkpoint_writer` writes, in
steps that are each safe to crash after:

1. write the parts, then the top-level file (atomic writes; a crash leaves files
   no pointer names, ignored, and overwritten by the next try);
2. replace ``_last_checkpoint`` (atomic);
3. archive: move each manifest below the checkpoint's seq, then its marker, from
   ``_ingest/commits/`` to ``_ingest/archive/`` (the manifest at ``seq`` itself
   stays, so a listing of ``commits/`` always holds the latest commit and
   committers keep taking ``latest + 1`` with a no-replace rename); a crash
   leaves some covered manifests in ``commits/``, which readers skip (they fold
   only manifests after the checkpoint) and the next archive moves;
4. delete checkpoints older than the newest :data:`KEEP`.

Readers read the pointer (one small file), verify the top level, list the short
``commits/`` directory, and fold only the manifests after the checkpoint. The
parts are read lazily: ``LoaderState.load`` reads the offsets only (the top
level holds nothing that grows with commits); ``state.files(topic)`` reads that
topic's part, ``state.lost_ranges()`` the lost part.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, fields
from typing import Any, Iterable

from ingest.errors import CheckpointCorruptError, StorageError
from ingest.loader import layout
from ingest.loader.records import FileRecord, OffsetRecord
from ingest.lost_ranges import LostRange
from ingest.storage import Storage

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 100
"""Commits between checkpoints (config key ``state.checkpoint.interval``)."""
KEEP = 3
"""Checkpoints kept; older ones are deleted once a newer one is the pointer's."""
CHECKPOINT_VERSION = 1


FILES, RUNS, LOST = "files", "runs", "lost"
"""Kinds of part: one topic's files, the run index, the lost ranges."""


@dataclass(frozen=True, slots=True)
class Part:
    name: str          # file name under CHECKPOINTS_DIR
    kind: str          # FILES, RUNS or LOST
    topic: str | None  # the topic of a FILES part
    count: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The top level of the checkpoint at ``seq``."""

    seq: int
    offsets: tuple[OffsetRecord, ...]
    parts: tuple[Part, ...]
    written_at_ms: int = 0

    def files_parts(self, topic: str | None = None) -> list[Part]:
        return [p for p in self.parts if p.kind == FILES and (topic is None or p.topic == topic)]

    @property
    def topics(self) -> list[str]:
        return sorted({p.topic for p in self.parts if p.kind == FILES})


def seal(body: bytes) -> bytes:
    """``body`` behind one line ``sha256:<hex of body>`` (every checkpoint file's form; also the audit's)."""
    return b"sha256:" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def unseal(data: bytes, what: str) -> bytes:
    """The body of sealed ``data``. Raises :class:`CheckpointCorruptError` (naming ``what``) on a mismatch."""
    head, sep, body = data.partition(b"\n")
    if not sep or not head.startswith(b"sha256:") or hashlib.sha256(body).hexdigest().encode() != head[7:]:
        raise CheckpointCorruptError(f"{what}: checksum mismatch ({len(data)} bytes)")
    return body


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _read_sealed(storage: Storage, name: str) -> tuple[Any, str]:
    path = storage.join(layout.CHECKPOINTS_DIR, name)
    try:
        data = storage.read_bytes(path)
    except (StorageError, OSError) as exc:
        raise CheckpointCorruptError(f"{path}: unreadable ({exc})") from exc
    try:
        return json.loads(unseal(data, path)), hashlib.sha256(data).hexdigest()
    except ValueError as exc:
        raise CheckpointCorruptError(f"{path}: not JSON ({exc})") from exc


def read_checkpoint(storage: Storage, seq: int) -> Checkpoint:
    """The top level of checkpoint ``seq``, verified. Raises :class:`CheckpointCorruptError`."""
    body, _ = _read_sealed(storage, layout.checkpoint_name(seq))
    try:
        if body["version"] != CHECKPOINT_VERSION or body["seq"] != seq:
            raise CheckpointCorruptError(f"checkpoint {seq}: version {body['version']} / seq {body['seq']} unexpected")
        return Checkpoint(
            seq=seq, offsets=tuple(OffsetRecord.from_json(o) for o in body["offsets"]),
            parts=tuple(Part(p["name"], p["kind"], p["topic"], p["count"], p["sha256"]) for p in body["parts"]),
            written_at_ms=body.get("written_at_ms", 0),
        )
    except (KeyError, TypeError) as exc:
        raise CheckpointCorruptError(f"checkpoint {seq}: malformed ({exc!r})") from exc


def _read_part(storage: Storage, part: Part) -> Any:
    """A files part: (field names, rows); the runs part: {run_id: seq}; the lost part: [LostRange JSON].
    Raises :class:`CheckpointCorruptError`."""
    body, _ = _read_sealed(storage, part.name)
    data = body.get(part.kind)
    if not isinstance(data, (list, dict)) or len(data) != part.count:
        raise CheckpointCorruptError(f"checkpoint part {part.name}: {len(data or ())} entries, the top level says {part.count}")
    return (body.get("fields", ()), data) if part.kind == FILES else data


FILE_FIELDS = tuple(f.name for f in fields(FileRecord))
"""A files part stores each FileRecord as a row of these fields, in this order (``fields`` in the part)."""


def file_rows(records: Iterable[FileRecord]) -> list[list]:
    return [[getattr(r, f) if f != "sources" else [list(s) for s in r.sources] for f in FILE_FIELDS] for r in records]


def read_files(storage: Storage, cp: Checkpoint, topic: str | None = None) -> dict[str, FileRecord]:
    """The committed files (of ``topic``) at ``cp.seq``, by path. Raises :class:`CheckpointCorruptError`."""
    out: dict[str, FileRecord] = {}
    for part in cp.files_parts(topic):
        names, rows = _read_part(storage, part)
        if tuple(names) == FILE_FIELDS:  # written by this version: positional, the fast way
            src = FILE_FIELDS.index("sources")
            for row in rows:
                if row[src]:
                    row[src] = tuple(tuple(s) for s in row[src])
                rec = FileRecord(*row)
                out[rec.path] = rec
        else:  # another version's fields: by name (unknown ones dropped, missing ones default)
            for row in rows:
                rec = FileRecord.from_json(dict(zip(names, row)))
                out[rec.path] = rec
    return out


def read_runs(storage: Storage, cp: Checkpoint) -> dict[str, int]:
    """Run id -> the seq of its (last) commit, for every commit up to ``cp.seq``."""
    out: dict[str, int] = {}
    for part in cp.parts:
        if part.kind == RUNS:
            out.update(_read_part(storage, part))
    return out


def read_lost(storage: Storage, cp: Checkpoint) -> list[LostRange]:
    """The lost ranges up to ``cp.seq``, in commit order."""
    return [LostRange.from_json(r) for part in cp.parts if part.kind == LOST for r in _read_part(storage, part)]


def pointer_seq(storage: Storage) -> int:
    """The seq ``_last_checkpoint`` names (0: none, or unreadable)."""
    try:
        body, _ = _read_sealed(storage, layout.LAST_CHECKPOINT)
        return int(body["seq"])
    except (CheckpointCorruptError, KeyError, TypeError, ValueError):
        return 0


def checkpoint_seqs(storage: Storage) -> list[int]:
    """Seqs of the top-level checkpoint files present, descending (one listing of a short directory)."""
    seqs = (layout.parse_checkpoint_name(i.name) for i in storage.list(storage.join(layout.CHECKPOINTS_DIR)))
    return sorted((s for s in seqs if s is not None), reverse=True)


def find(storage: Storage, *, below: int | None = None) -> Checkpoint | None:
    """The newest valid checkpoint (with seq < ``below`` when given): the pointer's, else by listing.

    Corrupt or partial checkpoints are skipped with a warning; None when no valid one exists.
    """
    tried = set()
    first = pointer_seq(storage)
    candidates: Iterable[int] = [first] if first and (below is None or first < below) else []
    for seq in _chain(candidates, lambda: checkpoint_seqs(storage)):
        if seq in tried or (below is not None and seq >= below):
            continue
        tried.add(seq)
        try:
            return read_checkpoint(storage, seq)
        except CheckpointCorruptError as exc:
            log.warning("ignoring checkpoint %d of %s: %s; using an older one or the manifests", seq, storage.uri, exc)
    return None


def _chain(first: Iterable[int], rest):
    yield from first
    yield from rest()
