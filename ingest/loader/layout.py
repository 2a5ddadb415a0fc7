"""Where the loader puts things under its destination, and how data files are named.

::

    <destination>/<topic>/dt=YYYY-MM-DD/hour=H/<topic>.b<broker>.p<partition>.<start>-<end>[.<n>].(avro|parquet)
    <destination>/_ingest/commits/<seq:012d>.json        commit manifests (the commit point: no-replace rename)
    <destination>/_ingest/commits/<seq:012d>.published   marker: every file of that manifest is in place
    <destination>/_ingest/checkpoints/_last_checkpoint   pointer to the newest checkpoint (ingest.loader.checkpoint)
    <destination>/_ingest/checkpoints/<seq:012d>.checkpoint.json   the state at commit seq (+ its parts:
    <destination>/_ingest/checkpoints/<seq:012d>.<part>.json       files.<i>: one topic's files; runs)
    <destination>/_ingest/archive/<seq//10000:08d>/<seq:012d>.json (.published)  manifests a checkpoint covers
    <destination>/_ingest/runs/<run_id>.json             one run record per run (JSON)
    <destination>/_ingest/staging/<run_id>/...<name>.staged  task output before the commit (attempt-unique names)
    <destination>/_ingest/quarantine/<topic>/<topic>.b<broker>.p<partition>.<start>-<end>.jsonl

``dt``/``hour`` are the UTC date and hour of the event's ``header.time``; ``hour``
is written as Spark and Hive write an integer partition value, without a leading
zero (``hour=5``), so duckdb, polars, pyarrow and Spark all type it as an integer.
Destinations written before this change hold ``hour=HH`` (``hour=05``)
directories: those files stay where they are (every reader of this project takes
a file's path from the manifests, never from the directory name), and compaction
rewrites an hour into the new spelling. ``start``
and ``end`` are the task's offset range ``[start, end)``; ``n`` disambiguates, present
only when needed: the writer-schema id when one bucket of one range holds records of
several schemas, and the commit number when a replay reloads a range whose plain
name is still committed (the old file is withdrawn by the same commit).
Every state path starts with ``_`` so that Hadoop, Hive, Spark and pyarrow readers skip
it, and no state file ends in ``.avro`` or ``.parquet`` (staged files end in
``.staged``; audit revisions in ``.revision``), so that a ``**/*.parquet`` glob of
duckdb or polars, which do not skip ``_`` directories, matches data only
(docs/reading-the-warehouse.md).
All paths in records are *relative* to the destination root (portable between
``file://`` and ``hdfs://`` views of the same data).
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from datetime import datetime, timezone

STATE_DIR = "_ingest"
COMMITS_DIR = f"{STATE_DIR}/commits"
RUNS_DIR = f"{STATE_DIR}/runs"
STAGING_DIR = f"{STATE_DIR}/staging"
QUARANTINE_DIR = f"{STATE_DIR}/quarantine"
CHECKPOINTS_DIR = f"{STATE_DIR}/checkpoints"
ARCHIVE_DIR = f"{STATE_DIR}/archive"
LAST_CHECKPOINT = "_last_checkpoint"
"""The pointer's file name under :data:`CHECKPOINTS_DIR` (Delta Lake's name for it)."""
CHECKPOINT_SUFFIX = ".checkpoint.json"
ARCHIVE_SHARD = 10_000
"""Manifests per archive directory (keeps every directory listing bounded)."""
MANIFEST_SUFFIX = ".json"
PUBLISHED_SUFFIX = ".published"
SEQ_DIGITS = 12

PATH_COLUMNS = ("_topic", "dt", "hour")
"""Columns readers take from a data file's path, not from the file: ``dt`` and ``hour`` (every
Hive-style reader) and ``_topic`` (the topic directory, in the documented reads of the whole
warehouse). A reader replaces a top-level data field of one of these names without a word, so the
loader refuses a schema that has one (:func:`path_columns_in`)."""

FORMATS = ("avro", "parquet")
STAGED_SUFFIX = ".staged"
"""Appended to every file written under ``_ingest/staging/``: staged bytes never look like data to a glob."""

_DATA_NAME = re.compile(
    r"^(?P<topic>[A-Za-z0-9._-]+)\.b(?P<broker>\d+)\.p(?P<partition>\d+)\.(?P<start>\d+)-(?P<end>\d+)"
    r"(?:\.(?P<n>\d+))?\.(?P<format>avro|parquet)$"
)


def manifest_path(seq: int) -> str:
    return f"{COMMITS_DIR}/{seq:0{SEQ_DIGITS}d}{MANIFEST_SUFFIX}"


def published_marker(seq: int) -> str:
    return f"{COMMITS_DIR}/{seq:0{SEQ_DIGITS}d}{PUBLISHED_SUFFIX}"


def _parse_seq_name(name: str, suffix: str) -> int | None:
    if name.endswith(suffix):
        stem = name[: -len(suffix)]
        if len(stem) == SEQ_DIGITS and stem.isdigit():
            return int(stem)
    return None


def parse_manifest_name(name: str) -> int | None:
    """The sequence number of a manifest file name, None for anything else (temp files, markers)."""
    return _parse_seq_name(name, MANIFEST_SUFFIX)


def parse_published_name(name: str) -> int | None:
    """The sequence number of a ``.published`` marker's file name, None for anything else."""
    return _parse_seq_name(name, PUBLISHED_SUFFIX)


def archive_shard(seq: int) -> str:
    return f"{ARCHIVE_DIR}/{seq // ARCHIVE_SHARD:08d}"


def archived_manifest_path(seq: int) -> str:
    return f"{archive_shard(seq)}/{seq:0{SEQ_DIGITS}d}{MANIFEST_SUFFIX}"


def archived_marker_path(seq: int) -> str:
    return f"{archive_shard(seq)}/{seq:0{SEQ_DIGITS}d}{PUBLISHED_SUFFIX}"


def checkpoint_name(seq: int) -> str:
    """The top-level checkpoint file's name under :data:`CHECKPOINTS_DIR`."""
    return f"{seq:0{SEQ_DIGITS}d}{CHECKPOINT_SUFFIX}"


def checkpoint_part_name(seq: int, part: str) -> str:
    return f"{seq:0{SEQ_DIGITS}d}.{part}.json"


def parse_checkpoint_name(name: str) -> int | None:
    """The seq of a top-level checkpoint file name, None for anything else (parts, the pointer, temp files)."""
    return _parse_seq_name(name, CHECKPOINT_SUFFIX)


def checkpoint_seq_of(name: str) -> int | None:
    """The seq of any checkpoint file (top level or part), None for the pointer and temp files."""
    stem = name[:SEQ_DIGITS]
    if len(name) > SEQ_DIGITS and name[SEQ_DIGITS] == "." and stem.isdigit() and name.endswith(".json"):
        return int(stem)
    return None


def run_record_path(run_id: str) -> str:
    return f"{RUNS_DIR}/{run_id}.json"


def staging_dir(run_id: str) -> str:
    return f"{STAGING_DIR}/{run_id}"


def path_columns_in(schema: dict) -> list[str]:
    """The top-level fields of an event schema named like a :data:`PATH_COLUMNS` column, sorted."""
    return sorted(f["name"] for f in schema.get("fields", ()) if f.get("name") in PATH_COLUMNS)


def hour_bucket(time_ms: int) -> tuple[str, int]:
    """(``YYYY-MM-DD``, hour) in UTC of an event time in ms.

    Raises:
        ValueError: the time is outside years 1..9999 (the record is quarantined).
    """
    dt = datetime.fromtimestamp(time_ms / 1000.0, tz=timezone.utc)
    return dt.strftime("%Y-%m-%d"), dt.hour


def data_file_name(topic: str, broker_id: int, partition: int, start: int, end: int, fmt: str, n: int | None = None) -> str:
    suffix = "" if n is None else f".{n}"
    return f"{topic}.b{broker_id}.p{partition}.{start}-{end}{suffix}.{fmt}"


def hour_dir(topic: str, dt: str, hour: int) -> str:
    """``<topic>/dt=YYYY-MM-DD/hour=H``: the directory new files of that hour go to (no leading zero)."""
    return f"{topic}/dt={dt}/hour={int(hour)}"


def data_file_path(topic: str, dt: str, hour: int, name: str) -> str:
    return f"{hour_dir(topic, dt, hour)}/{name}"


def staged_name(name: str) -> str:
    """The name a file is staged under (``name`` + :data:`STAGED_SUFFIX`)."""
    return name + STAGED_SUFFIX


def quarantine_file_path(topic: str, broker_id: int, partition: int, start: int, end: int) -> str:
    return f"{QUARANTINE_DIR}/{topic}/{topic}.b{broker_id}.p{partition}.{start}-{end}.jsonl"


@dataclass(frozen=True, slots=True)
class DataFileName:
    topic: str
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    n: int | None
    format: str


def parse_data_file_name(name: str) -> DataFileName | None:
    """Parse a data file's base name; None when it is not one of ours."""
    m = _DATA_NAME.match(posixpath.basename(name))
    if not m:
        return None
    return DataFileName(
        m["topic"], int(m["broker"]), int(m["partition"]), int(m["start"]), int(m["end"]),
        int(m["n"]) if m["n"] is not None else None, m["format"],
    )
