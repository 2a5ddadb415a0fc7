"""Atomic replacement of an hour's file set: a manifest plus renames.

No file system offers an atomic swap of a *set* of files (HDFS and POSIX
rename one path at a time), so the commit point is one small manifest written
atomically (``Storage.write_atomic``: temp + rename), and the renames after it
are a roll-forward that any later run finishes. Readers resolve an hour
through :func:`visible_files`, which gives the old set before the commit point
and the new set after it, never both or neither, at every moment of a crash.

Layout (under the destination)::

    _compaction/staging/<id>/<file>                    new files, written before the commit point
    _compaction/commits/<topic>/dt=D/hour=HH/<id>.json one record per compaction of an hour

Record (JSON): ``{"id", "topic", "dt", "hour", "format", "state", "old": [name...],
"new": [name...], "rows_in", "rows_out", "duplicates", "bytes_in", "bytes_out",
"started_ms", "committed_ms", "done_ms"}``; ``state`` is ``committed`` from the
commit point until the roll-forward finished, then ``done``.

Protocol for compaction ``id`` of hour ``H`` with old set ``O`` and new set ``N``:

1. write every file of ``N`` to ``staging/<id>/`` (crash: garbage, removed by :func:`recover`)
2. write the record with ``state=committed`` atomically  <- COMMIT POINT
3. rename each file of ``N`` from staging into ``H`` (skipping those already there)
4. delete each file of ``O`` still in ``H``
5. delete ``staging/<id>/``, rewrite the record with ``state=done``

:func:`visible_files` = (listing of ``H`` minus ``O``) plus ``N`` (from wherever each
file is now) while a record is ``committed``; the plain listing otherwise. Files
the loader adds to ``H`` meanwhile are never in ``O`` and stay visible.

Concurrency: one compaction per hour at a time (the Airflow DAG runs with
``max_active_runs=1``); the loader may add files to an hour concurrently.
"""
from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any, Iterator

from ingest.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

COMPACTION_DIR = "_compaction"
CRASH_ENV = "INGEST_COMPACTION_CRASH_AT"
"""Test hook: ``staged`` / ``committed`` / ``renamed`` / ``deleted`` makes the process
SIGKILL itself right after that step, so crash tests hit an exact point."""


def crash_point(step: str) -> None:
    """SIGKILL this process if the crash test hook names ``step``."""
    if os.environ.get(CRASH_ENV) == step:
        log.warning("crash point %s reached: SIGKILL self (test hook %s)", step, CRASH_ENV)
        os.kill(os.getpid(), signal.SIGKILL)


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def is_data_file(name: str) -> bool:
    """Visible data files: not hidden (``_``/``.`` prefix, like Hive and Spark), Avro or Parquet."""
    return not name.startswith(("_", ".")) and name.rsplit(".", 1)[-1] in ("avro", "parquet")


@dataclass(frozen=True)
class HourRef:
    """One hour of one topic: ``<destination>/<topic>/dt=<dt>/hour=<hour>``."""

    topic: str
    dt: str      # YYYY-MM-DD
    hour: str    # HH

    def rel(self) -> tuple[str, str, str]:
        return (self.topic, f"dt={self.dt}", f"hour={self.hour}")

    def __str__(self) -> str:
        return f"{self.topic}/dt={self.dt}/hour={self.hour}"


class Replacer:
    """The manifest + rename protocol over one destination's storage (paths relative to its root)."""

    def __init__(self, storage: Any, clock: Clock = SYSTEM_CLOCK) -> None:
        self.storage = storage  # rooted at the destination (ingest.storage.open_storage)
        self.clock = clock

    # --- paths ---------------------------------------------------------------

    def hour_dir(self, hour: HourRef) -> str:
        return self.storage.join(*hour.rel())

    def staging_dir(self, cid: str) -> str:
        return self.storage.join(COMPACTION_DIR, "staging", cid)

    def commits_dir(self, hour: HourRef) -> str:
        return self.storage.join(COMPACTION_DIR, "commits", *hour.rel())

    # --- records -------------------------------------------------------------

    def records(self, hour: HourRef) -> list[dict]:
        """Every compaction record of the hour, oldest first."""
        d = self.commits_dir(hour)
        if not self.storage.exists(d):
            return []
        out = []
        for info in sorted(self.storage.list(d), key=lambda i: basename(i.path)):
            if not info.is_dir and basename(info.path).endswith(".json"):
                out.append(json.loads(self.storage.read_bytes(info.path)))
        return out

    def all_records(self) -> Iterator[dict]:
        root = self.storage.join(COMPACTION_DIR, "commits")
        if not self.storage.exists(root):
            return
        for info in self.storage.walk_files(root):
            if basename(info.path).endswith(".json"):
                yield json.loads(self.storage.read_bytes(info.path))

    def _write_record(self, record: dict) -> None:
        hour = HourRef(record["topic"], record["dt"], record["hour"])
        self.storage.mkdirs(self.commits_dir(hour))
        path = self.storage.join(self.commits_dir(hour), f"{record['id']}.json")
        self.storage.write_atomic(path, json.dumps(record, indent=1, sort_keys=True).encode())

    # --- readers -------------------------------------------------------------

    def listing(self, hour: HourRef) -> dict[str, Any]:
        """name -> FileInfo of the data files physically in the hour directory."""
        d = self.hour_dir(hour)
        if not self.storage.exists(d):
            return {}
        return {basename(i.path): i for i in self.storage.list(d)
                if not i.is_dir and is_data_file(basename(i.path))}

    def visible_files(self, hour: HourRef) -> list[str]:
        """Full paths of the hour's current file set (old before a commit point, new after)."""
        present = self.listing(hour)
        pending = [r for r in self.records(hour) if r["state"] == "committed"]
        if not pending:
            return sorted(i.path for i in present.values())
        record = pending[-1]
        names = {n: i.path for n, i in present.items() if n not in set(record["old"])}
        staging = self.staging_dir(record["id"])
        for name in record["new"]:
            if name not in names:
                names[name] = self.storage.join(staging, name)
        return [names[n] for n in sorted(names)]

    # --- writers -------------------------------------------------------------

    def stage(self, cid: str, files: dict[str, bytes]) -> None:
        """Step 1: write the new files where no reader looks."""
        d = self.staging_dir(cid)
        self.storage.mkdirs(d)
        for name, data in files.items():
            self.storage.write_bytes(self.storage.join(d, name), data, overwrite=True)
        crash_point("staged")

    def commit(self, record: dict) -> None:
        """Step 2, the commit point: after it, readers see the new set."""
        record = dict(record, state="committed")
        self._write_record(record)
        crash_point("committed")
        self.roll_forward(record)

    def roll_forward(self, record: dict) -> None:
        """Steps 3-5; idempotent, so a re-run after a crash at any step finishes the job."""
        hour = HourRef(record["topic"], record["dt"], record["hour"])
        hour_dir = self.hour_dir(hour)
        staging = self.staging_dir(record["id"])
        self.storage.mkdirs(hour_dir)
        for name in record["new"]:
            src, dst = self.storage.join(staging, name), self.storage.join(hour_dir, name)
            if self.storage.exists(src) and not self.storage.exists(dst):
                self.storage.rename(src, dst)
            elif not self.storage.exists(dst):
                raise FileNotFoundError(f"compaction {record['id']}: new file {name} is neither staged nor in {hour_dir}")
            crash_point("renamed")
        for name in record["old"]:
            path = self.storage.join(hour_dir, name)
            if self.storage.exists(path):
                self.storage.delete(path)
            crash_point("deleted")
        if self.storage.exists(staging):
            self.storage.delete(staging, recursive=True)
        record = dict(record, state="done", done_ms=self.clock.time_ms())
        self._write_record(record)
        log.info("compaction %s of %s done: %d files -> %d", record["id"], hour, len(record["old"]), len(record["new"]))

    def recover(self) -> int:
        """Finish committed compactions and drop staging left by uncommitted ones; returns count fixed."""
        fixed = 0
        committed = set()
        for record in sorted(self.all_records(), key=lambda r: r["id"]):
            committed.add(record["id"])
            if record["state"] == "committed":
                log.warning("rolling forward compaction %s of %s/dt=%s/hour=%s interrupted after its commit point",
                            record["id"], record["topic"], record["dt"], record["hour"])
                self.roll_forward(record)
                fixed += 1
        root = self.storage.join(COMPACTION_DIR, "staging")
        if self.storage.exists(root):
            for info in self.storage.list(root):
                cid = basename(info.path)
                if cid not in committed:
                    log.warning("removing staging of compaction %s that crashed before its commit point", cid)
                    self.storage.delete(info.path, recursive=True)
                    fixed += 1
        return fixed
