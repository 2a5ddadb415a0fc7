"""Compaction keys (``conf/compaction.properties``)."""
from __future__ import annotations

from ingest.compaction.formats import DEFAULT_BATCH_BYTES
from ingest.config import Bool, ConfigDef, Int, Key, Str, StrList

COMPACTION_CONFIG = ConfigDef(
    "compaction",
    (
        Key("destination", Str(nonempty=True), "./warehouse",
            "storage URI the loader writes to (local path, file://, webhdfs://, hdfs://)"),
        Key("compaction.target.bytes", Int(1024, 16 * 1024**3), 128 * 1024 * 1024,
            "size the merged files of an hour aim for (bytes, estimated from the input)"),
        Key("compaction.batch.bytes", Int(64 * 1024, 4 * 1024**3), DEFAULT_BATCH_BYTES,
            "decoded bytes a compaction task reads and writes at a time (Parquet batches and row groups; "
            "Avro streams record by record): a task's memory grows with this, not with the hour"),
        Key("compaction.min.files", Int(2, 1_000_000), 2,
            "an hour with fewer visible files than this is left alone"),
        Key("compaction.topics", StrList(), (),
            "topics to compact; empty means every topic under the destination"),
        Key("compaction.grace.ms", Int(0, None), 10 * 60 * 1000,
            "an hour is compacted only once its end plus this grace has passed"),
        Key("compaction.include.open.hours", Bool(), False,
            "also compact hours not yet closed (demo and tests; in production late data would re-fragment them)"),
        Key("compaction.require.audit", Bool(), True,
            "compact only hours that an audit report judged complete (jobs/compact.py --audit-report)"),
        Key("state.checkpoint.interval", Int(0, 1_000_000), 100,
            "every this many commits the committer writes a checkpoint of the loader state and archives the manifests it covers, so reading the state costs the same after a year (0: never; docs/storage.md)"),
        Key("compaction.parquet.compression", Str(pattern=r"none|snappy|gzip|zstd|lz4|brotli"), "snappy",
            "Parquet codec of merged files (Avro files keep the codec of their input)"),
    ),
    prefixes=("spark.",),
)
