"""What compaction did, recorded under ``<destination>/_compaction/``.

Layout::

    _compaction/runs/<compaction_id>.json                 one record per run: the newest ones
    _compaction/archive/<id[1:5]>/<compaction_id>.json     settled records beyond the newest KEEP

Record (JSON)::

    {"id": "...", "state": "started" | "committed" | "abandoned" | "nothing-to-do",
     "started_ms": ..., "finished_ms": ..., "manifest_seq": 12 | null,
     "hours": [Outcome...], "old": ["<relative path>"...], "new": ["<relative path>"...]}

``started`` is written before the commit; the id is also the ``run_id`` of the
loader manifest that swaps the files and the name of its staging directory, so
:func:`reconcile` can tell after a crash whether the run committed (a manifest
with that run id exists: ``committed``) or not (``abandoned``, staging removed).

One record is written per compaction run that had work, so ``runs/`` grows per
run, and :func:`reconcile`, which every compaction run calls first, read every
record ever written. Like the loader's manifests (:mod:`ingest.loader.checkpoint`),
settled records (anything but ``started``: they never change again) beyond the
newest :data:`KEEP` are moved to ``_compaction/archive/`` by :func:`archive_settled`,
a writer step at the end of :func:`reconcile`; a crash between two moves leaves
some in ``runs/``, which the next run moves. Readers of recent runs
(:func:`reconcile`, ``ingest compaction status``) read ``runs/`` only;
``read_records(storage, archived=True)`` reads every record.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Iterator

from ingest.loader.commit import gc_staging

log = logging.getLogger(__name__)

RUNS_DIR = "_compaction/runs"
ARCHIVE_DIR = "_compaction/archive"
KEEP = 100
"""Settled records left in ``runs/``; older ones are archived."""


def record_path(storage: Any, cid: str) -> str:
    return storage.join(RUNS_DIR, f"{cid}.json")


def write_record(storage: Any, record: dict) -> None:
    storage.mkdirs(storage.join(RUNS_DIR))
    storage.write_atomic(record_path(storage, record["id"]), json.dumps(record, indent=1, sort_keys=True).encode())


def _record_files(storage: Any, directory: str) -> list:
    return [i for i in storage.list(storage.join(directory)) if i.name.endswith(".json") and not i.name.startswith(".")]


def _archived_files(storage: Any) -> list:
    return [i for shard in storage.list(storage.join(ARCHIVE_DIR)) if shard.is_dir
            for i in _record_files(storage, f"{ARCHIVE_DIR}/{shard.name}")]


def read_records(storage: Any, *, archived: bool = False) -> Iterator[dict]:
    """The recent run records (``runs/``; with ``archived``, every record), oldest first (ids start with
    the start time in ms)."""
    infos = _record_files(storage, RUNS_DIR) + (_archived_files(storage) if archived else [])
    for info in sorted(infos, key=lambda i: i.name):
        yield json.loads(storage.read_bytes(info.path))


def archived_count(storage: Any) -> int:
    """How many records the archive holds (one listing per shard)."""
    return len(_archived_files(storage))


def archive_shard(cid: str) -> str:
    """``<id[1:5]>``: ids are ``c<start ms:013d>-...``, so one shard per ~11.6 days (``other`` otherwise)."""
    return cid[1:5] if len(cid) > 5 and cid[1:5].isdigit() else "other"


def archive_settled(storage: Any, keep: int = KEEP) -> int:
    """Move settled records beyond the newest ``keep`` from ``runs/`` to the archive; returns how many.

    A writer step (the end of :func:`reconcile`). ``started`` records are never moved.
    """
    infos = sorted(_record_files(storage, RUNS_DIR), key=lambda i: i.name)
    moved = 0
    for info in infos[: max(0, len(infos) - keep)]:
        record = json.loads(storage.read_bytes(info.path))
        if record.get("state") == "started":
            continue
        shard = storage.join(ARCHIVE_DIR, archive_shard(info.name[:-len(".json")]))
        storage.mkdirs(shard)
        storage.rename(info.path, storage.join(shard, info.name))
        moved += 1
    if moved:
        log.info("archived %d settled compaction record(s) of %s", moved, storage.uri)
    return moved


def reconcile(storage: Any, state: Any, clock: Any) -> int:
    """Settle records left ``started`` by a crash, then archive old settled ones; returns how many were settled.

    A writer step: run it after :func:`ingest.loader.commit.roll_forward`. Reads ``runs/`` only.
    """
    settled = 0
    for record in list(read_records(storage)):
        if record["state"] != "started":
            continue
        cid = record["id"]
        seq = state.commit_of_run(cid)  # the commits since the checkpoint, then its run index
        if seq is not None:
            record.update(state="committed", manifest_seq=seq, finished_ms=clock.time_ms(),
                          note="crashed after its commit point; the roll-forward published it")
        else:
            gc_staging(storage, [cid])
            record.update(state="abandoned", finished_ms=clock.time_ms(),
                          note="crashed before its commit point; staged files removed, nothing changed")
        log.warning("compaction %s was interrupted: now %s", cid, record["state"])
        write_record(storage, record)
        settled += 1
    archive_settled(storage)
    return settled
