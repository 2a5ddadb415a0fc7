"""What compaction did, recorded under ``<destination>/_compaction/``.

Layout::

    _compaction/runs/<compaction_id>.json   one record per run

Record (JSON)::

    {"id": "...", "state": "started" | "committed" | "abandoned" | "nothing-to-do",
     "started_ms": ..., "finished_ms": ..., "manifest_seq": 12 | null,
     "hours": [Outcome...], "old": ["<relative path>"...], "new": ["<relative path>"...]}

``started`` is written before the commit; the id is also the ``run_id`` of the
loader manifest that swaps the files and the name of its staging directory, so
:func:`reconcile` can tell after a crash whether the run committed (a manifest
with that run id exists: ``committed``) or not (``abandoned``, staging removed).
"""
from __future__ import annotations

import json
import logging
from typing import Any, Iterator

from ingest.loader.commit import gc_staging

log = logging.getLogger(__name__)

RUNS_DIR = "_compaction/runs"


def record_path(storage: Any, cid: str) -> str:
    return storage.join(RUNS_DIR, f"{cid}.json")


def write_record(storage: Any, record: dict) -> None:
    storage.mkdirs(storage.join(RUNS_DIR))
    storage.write_atomic(record_path(storage, record["id"]), json.dumps(record, indent=1, sort_keys=True).encode())


def read_records(storage: Any) -> Iterator[dict]:
    """Every run record, oldest first (ids start with the start time in ms)."""
    for info in storage.list(storage.join(RUNS_DIR)):
        if info.name.endswith(".json") and not info.name.startswith("."):
            yield json.loads(storage.read_bytes(info.path))


def reconcile(storage: Any, state: Any, clock: Any) -> int:
    """Settle records left ``started`` by a crash; returns how many were settled.

    A writer step: run it after :func:`ingest.loader.commit.roll_forward`.
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
    return settled
