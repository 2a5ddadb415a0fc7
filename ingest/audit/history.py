"""Audit revisions kept under ``<destination>/_audit/`` as Parquet, one file per audit run.

Layout::

    <destination>/_audit/revisions/<audited_at_ms:015d>-<run_id>.revision          the newest revisions
    <destination>/_audit/archive/<audited_at_ms[:6]>/<...>.revision                older ones
    <destination>/_audit/checkpoints/<audited_at_ms:015d>-<run_id>.latest          latest rows up to that revision

A revision is a Parquet file; its name does not end in ``.parquet`` so that a
``<destination>/**/*.parquet`` glob of duckdb or polars (which, unlike Spark,
Hive and pyarrow, do not skip ``_`` directories) never reads it as warehouse
data. Revisions written before that change are named ``...-<run_id>.parquet``;
every reader here takes both names (:data:`SUFFIXES`), so existing
destinations keep their history.

Each file holds the run's report rows (the JSON lines fields; ``causes`` as a
map, ``tiers`` as a struct; revisions written before tiers existed read with
them null) plus ``audit_run_id``, ``audited_at_ms``, ``range_start_ms`` and
``range_end_ms``. File names sort by audit time, so the latest revision of a
window is the row from the last file that has it. Files are written with
``Storage.write_atomic``: a reader sees a whole revision or none.

Readers: operators comparing reports over time use :func:`read_history` or
:func:`latest_rows`; the compaction gate reads the verdict of one audit run
(the one its Airflow DAG run started) with :func:`run_revision` and
:func:`read_revision`, so the verdict travels through the destination's
storage and reaches compaction wherever the Spark driver ran.
"""
from __future__ import annotations

import io
import logging
import re
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import CheckpointCorruptError, ConfigError
from ingest.loader.checkpoint import seal, unseal
from ingest.storage import open_storage

log = logging.getLogger(__name__)

AUDIT_DIR = "_audit"
REVISIONS_DIR = f"{AUDIT_DIR}/revisions"
SUFFIX = ".revision"
LEGACY_SUFFIX = ".parquet"
SUFFIXES = (SUFFIX, LEGACY_SUFFIX)
"""Revision file name endings: written, and read too (revisions written before the rename)."""
ARCHIVE_DIR = f"{AUDIT_DIR}/archive"
CHECKPOINTS_DIR = f"{AUDIT_DIR}/checkpoints"
CHECKPOINT_SUFFIX = ".latest"
KEEP = 24
"""Revisions left in ``revisions/`` after a checkpoint (``run_revision`` of a recent run lists only those)."""
INTERVAL = 24
"""A checkpoint is written once ``revisions/`` holds KEEP + INTERVAL revisions."""

SCHEMA = pa.schema([
    ("topic", pa.string()), ("row_type", pa.string()), ("producer", pa.string()),
    ("window_start_ms", pa.int64()), ("window_end_ms", pa.int64()), ("status", pa.string()),
    ("judged", pa.bool_()), ("produced_attempted", pa.int64()), ("produced_acked", pa.int64()),
    ("produced_failed", pa.int64()), ("loaded_rows", pa.int64()), ("loaded_distinct", pa.int64()),
    ("duplicates", pa.int64()), ("missing", pa.int64()), ("completeness", pa.float64()),
    ("threshold", pa.float64()), ("producers_reported", pa.int64()), ("sessions", pa.list_(pa.string())),
    ("heartbeat", pa.bool_()), ("missing_report_seqs", pa.list_(pa.string())), ("retention_lost", pa.int64()),
    ("missing_id_sample", pa.list_(pa.string())), ("causes", pa.map_(pa.string(), pa.int64())),
    ("tiers", pa.struct([("producers", pa.int64()), ("broker", pa.int64()), ("source", pa.int64()),
                         ("target", pa.int64()), ("warehouse", pa.int64())])),
    ("loss_tier", pa.string()),
    ("audit_run_id", pa.string()), ("audited_at_ms", pa.int64()),
    ("range_start_ms", pa.int64()), ("range_end_ms", pa.int64()),
])


RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,200}")
"""An audit run id: part of a revision's file name, so only file-name-safe characters."""


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can name a revision file.

    Raises:
        ConfigError: naming the id and the allowed characters.
    """
    if not RUN_ID_PATTERN.fullmatch(run_id or ""):
        raise ConfigError(f"invalid audit run id {run_id!r}: allowed are 1-200 characters of [A-Za-z0-9._-]")
    return run_id


def revision_name(audited_at_ms: int, run_id: str) -> str:
    return f"{audited_at_ms:015d}-{run_id}{SUFFIX}"


def _stem(name: str) -> str | None:
    """``<audited_at_ms:015d>-<run_id>`` of a revision file name (either suffix), None for other files."""
    if name.startswith("."):
        return None
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) >= 17 and stem[15] == "-" and stem[:15].isdigit():
                return stem
    return None


def _run_of(name: str) -> str | None:
    """The run id in a revision file name, or None for other files."""
    stem = _stem(name)
    return None if stem is None else stem[16:]


def is_revision_path(path: str) -> bool:
    """True when ``path`` names a revision file (a Parquet file: ``.revision``, or ``.parquet`` as before), not a report."""
    return str(path).endswith(SUFFIXES)


def _revision_files(storage, *, archived: bool = False) -> list:
    """Revision files under ``_audit/revisions/`` (and, with ``archived``, ``_audit/archive/``), oldest
    first (by time, then run id; both suffixes)."""
    infos = storage.list(storage.join(REVISIONS_DIR))
    if archived:
        infos = [i for shard in storage.list(storage.join(ARCHIVE_DIR)) if shard.is_dir
                 for i in storage.list(shard.path)] + infos
    found = [(_stem(info.name), info) for info in infos]
    return [info for stem, info in sorted((f for f in found if f[0] is not None), key=lambda f: (f[0], f[1].name))]


def write_revision(
    destination: str, rows: Sequence[dict], *, run_id: str, audited_at_ms: int, range_start_ms: int, range_end_ms: int,
) -> str:
    """Write one audit run's rows; returns the storage path written."""
    storage = open_storage(destination)
    extra = {"audit_run_id": run_id, "audited_at_ms": audited_at_ms,
             "range_start_ms": range_start_ms, "range_end_ms": range_end_ms}
    records = [{**{k: r.get(k) for k in SCHEMA.names if k in r}, **extra,
                "causes": list((r.get("causes") or {}).items())} for r in rows]
    table = pa.Table.from_pylist(records, schema=SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy")
    path = storage.join(REVISIONS_DIR, revision_name(audited_at_ms, run_id))
    storage.mkdirs(storage.join(REVISIONS_DIR))
    storage.write_atomic(path, buf.getvalue())
    log.info("audit revision %s: %d rows", path, len(records))
    maybe_checkpoint(storage)
    return path


def _conform(table: pa.Table) -> pa.Table:
    """A revision table in SCHEMA: columns an older revision lacks (``tiers``, ``loss_tier``) are null."""
    for f in SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(len(table), f.type))
    tiers_type = SCHEMA.field("tiers").type
    old = table.column("tiers").combine_chunks()
    if old.type != tiers_type:   # written before a tier existed (the broker tier): that tier is null
        have = {old.type.field(i).name for i in range(old.type.num_fields)}
        fields = [old.field(f.name).cast(f.type) if f.name in have else pa.nulls(len(old), f.type)
                  for f in tiers_type]
        table = table.set_column(table.column_names.index("tiers"), "tiers",
                                 pa.StructArray.from_arrays(fields, fields=list(tiers_type), mask=old.is_null()))
    return table.select(SCHEMA.names).cast(SCHEMA)


def run_revision(destination: str, run_id: str) -> str:
    """URI of the latest revision written by audit run ``run_id`` (a retried run writes one per try).

    Raises:
        ConfigError: the run wrote no revision (it has not run, failed before writing, or ran
            with ``history.enabled=false``), naming the directory searched.
    """
    check_run_id(run_id)
    storage = open_storage(destination)
    found = [info.name for info in _revision_files(storage) if _run_of(info.name) == run_id]
    directory = REVISIONS_DIR
    if not found:  # an older run: its revision was archived
        archived = [info for info in _revision_files(storage, archived=True) if _run_of(info.name) == run_id]
        if archived:
            return storage.spark_path(archived[-1].path)
    if not found:
        raise ConfigError(f"no audit revision of run {run_id!r} under {storage.join(REVISIONS_DIR)}: the audit run "
                          f"has not written one (did it run with history.enabled=true against this destination?)")
    return storage.spark_path(storage.join(directory, found[-1]))  # a URI: it names its storage


def read_revision(uri: str) -> list[dict]:
    """The report rows of one revision file (a storage URI or local path), ``causes`` as a dict."""
    storage = open_storage(uri)  # rooted at the file itself
    rows = _conform(pq.read_table(io.BytesIO(storage.read_bytes(storage.root)))).to_pylist()
    for row in rows:
        row["causes"] = dict(row["causes"] or [])
    return rows


def _read_table(storage, path: str) -> pa.Table:
    return _conform(pq.read_table(io.BytesIO(storage.read_bytes(path))))


def read_history(destination: str) -> pa.Table:
    """Every revision's rows (archived ones too), oldest revision first (empty table with SCHEMA when none)."""
    storage = open_storage(destination)
    tables = [_read_table(storage, info.path) for info in _revision_files(storage, archived=True)]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def _key(row: dict) -> tuple:
    return (row["topic"], row["row_type"], row["producer"], row["window_start_ms"])


def _checkpoints(storage) -> list:
    """Checkpoint files, newest first."""
    found = [i for i in storage.list(storage.join(CHECKPOINTS_DIR))
             if i.name.endswith(CHECKPOINT_SUFFIX) and not i.name.startswith(".")]
    return sorted(found, key=lambda i: i.name, reverse=True)


def _newest_checkpoint(storage, *, upto: str | None = None) -> tuple[str | None, list[dict], bool]:
    """(stem, latest rows, a newer one was corrupt) of the newest valid checkpoint with stem <= ``upto``;
    (None, [], ...) when none is valid."""
    skipped = False
    for info in _checkpoints(storage):
        stem = info.name[: -len(CHECKPOINT_SUFFIX)]
        if upto is not None and stem > upto:
            continue
        try:
            body = unseal(storage.read_bytes(info.path), info.path)
            return stem, _conform(pq.read_table(io.BytesIO(body))).to_pylist(), skipped
        except (CheckpointCorruptError, OSError, pa.ArrowException) as exc:
            log.warning("ignoring audit checkpoint %s: %s; using an older one or every revision", info.path, exc)
            skipped = True
    return None, [], skipped


def _fold(storage, *, upto: str | None = None) -> dict[tuple, dict]:
    """The latest row of every window over the revisions up to stem ``upto`` (all when None)."""
    stem, rows, skipped = _newest_checkpoint(storage, upto=upto)
    latest = {_key(r): r for r in rows}
    # Revisions after the newest checkpoint are all in revisions/; after an older one some are archived.
    for info in _revision_files(storage, archived=stem is None or skipped):
        s = _stem(info.name)
        if (stem is not None and s <= stem) or (upto is not None and s > upto):
            continue  # covered by the checkpoint (maybe not yet archived), or after ``upto``
        for row in _read_table(storage, info.path).to_pylist():
            latest[_key(row)] = row  # rows come oldest revision first
    return latest


def latest_rows(destination: str) -> list[dict]:
    """The latest revision of every (topic, row_type, producer, window) ever audited."""
    latest = _fold(open_storage(destination))
    for row in latest.values():
        row["causes"] = dict(row["causes"] or [])
    return sorted(latest.values(), key=lambda r: (r["topic"], r["row_type"], r["window_start_ms"] or 0, r["producer"] or ""))


def maybe_checkpoint(storage, *, keep: int | None = None, interval: int | None = None) -> str | None:
    """The writer's step after a revision: checkpoint and archive when ``revisions/`` holds keep + interval
    (default :data:`KEEP`, :data:`INTERVAL`). Returns the checkpoint's path, or None when none was due.
    """
    keep = KEEP if keep is None else keep
    interval = INTERVAL if interval is None else interval
    hot = _revision_files(storage)
    if len(hot) < keep + interval:
        return None
    covered = hot[: len(hot) - keep]
    stem = _stem(covered[-1].name)
    rows = list(_fold(storage, upto=stem).values())
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), buf, compression="snappy")
    path = storage.join(CHECKPOINTS_DIR, stem + CHECKPOINT_SUFFIX)
    storage.mkdirs(storage.join(CHECKPOINTS_DIR))
    storage.write_atomic(path, seal(buf.getvalue()))
    for info in covered:  # after the checkpoint: readers skip covered revisions by name until they move
        shard = storage.join(ARCHIVE_DIR, info.name[:6])
        storage.mkdirs(shard)
        storage.rename(info.path, storage.join(shard, info.name))
    for old in _checkpoints(storage)[2:]:
        storage.delete(old.path)
    log.info("audit checkpoint %s: %d latest rows; %d revisions archived", path, len(rows), len(covered))
    return path
