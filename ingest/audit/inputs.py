"""The audit's inputs: the loader's committed files and lost ranges, read with Spark.

Committed files follow the loader's layout (docs/architecture.md)::

    <destination>/<topic>/dt=YYYY-MM-DD/hour=HH/<topic>.b<broker>.p<partition>.<start>-<end>[.<n>].(avro|parquet)

The list of committed files and the lost ranges come from
``ingest.loader.state`` (the loader's own account of what is committed; a
listing of the directories could include files of a crashed publish).

Files are bucketed by the event hour of ``header.time``, so the audit reads
only the hours overlapping the audited windows, plus every hour outside the
plausible time range (out-of-range timestamps, counted separately).

Monitoring files that are small together are read on the driver instead
(:func:`monitoring_on_driver`, ``monitoring.driver.read.max.bytes``): the same
fields and types as :func:`read_monitoring`, without a Spark job.
"""
from __future__ import annotations

import calendar
import functools
import logging
import posixpath
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ingest.audit import avro_source
from ingest.errors import ConfigError
from ingest.loader.state import open_state
from ingest.lost_ranges import TIER_SOURCE, TIER_TARGET, LostRange
from ingest.storage import open_storage

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
IDS_PARQUET_SCHEMA = ("header struct<time: long, server: string, session: string, seq: long>, "
                      "_partition int, _offset long, _timestamp long")
POSITION_SESSION = avro_source.POSITION_SESSION
MONITORING_PARQUET_SCHEMA = ", ".join(
    f"{n} {'int' if n == 'revision' else k}" for n, k in avro_source.MONITORING_FIELDS
)
"""Parquet read schemas: the loader writes Avro ``int`` as int32 (``revision``), ``long`` as int64."""
MIRROR_LOST_PARQUET_SCHEMA = (
    "event_id string, source_cluster string, topic string, broker_id int, partition int, start_offset long, "
    "end_offset long, bytes long, messages long, messages_exact boolean, cause string, after_time_ms long, "
    "before_time_ms long, "
    "session_bounds array<struct<session: string, after_seq: long, before_seq: long>>, detected_at_ms long"
)
"""The fields of MirrorLostRange records (conf/schemas/mirror_lost_range.avsc) the audit reads."""
_HOUR_DIR = re.compile(r"dt=(\d{4})-(\d{2})-(\d{2})$")
FORMATS = ("avro", "parquet")


@dataclass(frozen=True)
class LoadedFile:
    """One committed data file: its topic, path (URI or local), format and event hour."""

    topic: str
    path: str             # path inside the storage (what Storage.read_bytes takes)
    spark_path: str       # what Spark's Hadoop client reads
    format: str
    hour_start_ms: int | None  # None when the record carries no dt/hour bucket
    storage_uri: str = ""
    rows: int | None = None  # events the loader wrote to the file (its commit record); None: not recorded




@dataclass(frozen=True)
class LoadState:
    """What the loader has committed, as the audit sees it."""

    files: tuple[LoadedFile, ...]
    lost_ranges: tuple[LostRange, ...]  # the loader's, as the audit attributes them (tier ``target``)
    commit_seq: int  # the loader commit this snapshot reflects (0 = nothing committed)


def hour_of(dt: str | None, hour: int | None) -> int | None:
    """Epoch ms of a file's ``dt=YYYY-MM-DD/hour=HH`` bucket, or None."""
    if not dt or hour is None:
        return None
    m = _HOUR_DIR.match("dt=" + dt)
    if not m:
        return None
    y, mo, d = (int(x) for x in m.groups())
    return calendar.timegm((y, mo, d, int(hour), 0, 0)) * 1000


def _field(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def lost_range_from(obj, index: int = 0) -> LostRange:
    """The loader's lost-range record (dict or object) as the audit attributes it (tier ``target``).

    Tolerant of records written before ``messages_exact``/``session_bounds``
    (an estimate without bounds) and before ``cause`` (retention).
    """
    return LostRange.from_record(obj, tier=TIER_TARGET, index=index)


def load_state(destination: str) -> LoadState:
    """Committed data files and lost ranges of ``destination``, via ``ingest.loader.state``.

    Reads only: a commit a crashed load left half-published is read as committed
    (its files where they are now), and the destination is left as it is.
    """
    storage = open_storage(destination)
    if not storage.exists(storage.root):
        # A mistyped destination must not pass as "nothing to audit, all complete".
        raise ConfigError(f"destination {destination!r} does not exist; set 'destination' to the loader's destination")
    state = open_state(destination)
    if state.seq == 0:
        log.warning("destination %s has no committed load yet: nothing to audit", destination)
    uri = state.storage.uri
    files = []
    for rec in state.files(kind="data"):
        fmt = rec.format if rec.format in FORMATS else (rec.path.rsplit(".", 1)[-1])
        files.append(LoadedFile(
            topic=rec.topic, path=state.full_path(rec), spark_path=state.spark_path(rec), format=fmt,
            hour_start_ms=hour_of(rec.dt, rec.hour), storage_uri=uri, rows=getattr(rec, "rows", None),
        ))
    # A replayed range damaged on the broker is recorded again by the replay: count it once.
    unique = {(_field(r, "topic"), _field(r, "broker_id"), _field(r, "partition"), _field(r, "start_offset"),
               _field(r, "end_offset"), _field(r, "cause", "retention") or "retention"): r
              for r in state.lost_ranges()}
    lost = [lost_range_from(r, i) for i, r in enumerate(unique.values())]
    log.info("loader state of %s at commit %d: %d data files, %d lost ranges", destination, state.seq, len(files), len(lost))
    return LoadState(tuple(files), tuple(lost), state.seq)


def select_files(
    files: Iterable[LoadedFile], *, topics: Sequence[str] | None, lo_ms: int | None, hi_ms: int | None,
    plausible_lo_ms: int, plausible_hi_ms: int,
) -> list[LoadedFile]:
    """Files of ``topics`` whose event hour overlaps [lo_ms, hi_ms) or may hold out-of-range times.

    An hour may hold out-of-range times when it starts before ``plausible_lo_ms``
    or ends after ``plausible_hi_ms``.

    ``lo_ms``/``hi_ms`` None means unbounded. Files without an hour are always read.
    """
    out = []
    wanted = None if topics is None else set(topics)
    for f in files:
        if wanted is not None and f.topic not in wanted:
            continue
        h = f.hour_start_ms
        if h is None:
            out.append(f)
            continue
        implausible = h < plausible_lo_ms or h + HOUR_MS > plausible_hi_ms
        in_range = (lo_ms is None or h + HOUR_MS > lo_ms) and (hi_ms is None or h < hi_ms)
        if implausible or in_range:
            out.append(f)
    return out


def read_ids(spark, files: Sequence[LoadedFile]):
    """DataFrame ``topic, session, seq, time, server`` of every record in ``files``.

    Every Parquet file is read in one scan, whatever its topic: Spark then packs many small
    files into one task (``spark.sql.files.maxPartitionBytes``), where a union of one scan
    per topic ran a task per file (1,000 tasks for an hour of 1,000 partitions). Each row's
    topic comes from its file's name through a broadcast join on ``_metadata.file_name``.
    """
    from pyspark.sql import functions as F

    frames = []
    parquet = [f for f in files if f.format == "parquet"]
    avro = [(f.topic, f.storage_uri, f.path) for f in files if f.format != "parquet"]
    if parquet:
        frames.append(_read_parquet_ids(spark, parquet))
    if avro:
        frames.append(_read_avro(spark, avro, "ids"))
    if not frames:
        return spark.createDataFrame([], avro_source.ddl(avro_source.IDS_FIELDS))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _read_parquet_ids(spark, files: Sequence[LoadedFile]):
    from pyspark.sql import functions as F

    topic_of: dict[str, str] = {}
    for f in files:
        topic_of.setdefault(posixpath.basename(f.spark_path), f.topic)
    topics = sorted({f.topic for f in files})
    if len(topics) > 1 and any(topic_of[posixpath.basename(f.spark_path)] != f.topic for f in files):
        # Two topics' files share a base name (not a name the loader gives): one scan per topic.
        frames = [_read_parquet_ids(spark, [f for f in files if f.topic == t]) for t in topics]
        out = frames[0]
        for df in frames[1:]:
            out = out.unionByName(df)
        return out
    # An explicit schema spares Spark a schema-inference job per read and prunes columns.
    headerless = F.col("header").isNull() & F.col("_offset").isNotNull()
    df = spark.read.schema(IDS_PARQUET_SCHEMA).parquet(*(f.spark_path for f in files)).select(
        F.when(headerless, F.concat(F.lit(POSITION_SESSION), F.col("_partition").cast("string")))
        .otherwise(F.col("header.session").cast("string")).alias("session"),
        F.when(headerless, F.col("_offset")).otherwise(F.col("header.seq").cast("long")).alias("seq"),
        F.when(headerless, F.col("_timestamp")).otherwise(F.col("header.time").cast("long")).alias("time"),
        F.col("header.server").cast("string").alias("server"),
        F.col("_metadata.file_name").alias("_file"),
    )
    if len(topics) == 1:
        return df.select(F.lit(topics[0]).alias("topic"), "session", "seq", "time", "server")
    names = spark.createDataFrame(sorted(topic_of.items()), "_file string, topic string")
    return df.join(F.broadcast(names), "_file").select("topic", "session", "seq", "time", "server")


SESSION_PREDICATES_MAX = 64
"""Sessions up to which :func:`read_session_seqs` filters each session on its own seq bounds."""


def read_session_seqs(spark, files: Sequence[LoadedFile], bounds: dict[str, tuple[int, int]]):
    """DataFrame ``session, seq`` of the records in ``files`` whose session is in ``bounds``, seq within its bounds.

    Past SESSION_PREDICATES_MAX sessions the seq bounds are the lowest and highest of all sessions (a
    superset, enough for the missing-id sample, which looks up seqs of its ranges only).
    For the missing-id sample, which needs neither topic nor time: no topic join, two columns.
    For Parquet the same condition is also put on the files' own nested columns
    (``header.session``, ``header.seq``, or a null session for headerless rows), which Spark
    pushes into the reader: row groups whose statistics exclude every asked session and seq
    range are skipped instead of decoded. The ``session``/``seq`` columns themselves are
    expressions (headerless payloads take them from the Kafka position), which no reader can push.
    """
    from pyspark.sql import functions as F

    if not bounds:
        raise ValueError("bounds must name at least one session")

    def wanted(session, seq):
        if len(bounds) > SESSION_PREDICATES_MAX:  # one IN list and the overall seq bounds: a flat expression
            return session.isin(sorted(bounds)) & seq.between(min(lo for lo, _ in bounds.values()),
                                                               max(hi for _, hi in bounds.values()))
        return functools.reduce(lambda a, b: a | b, [
            (session == F.lit(s)) & seq.between(lo, hi) for s, (lo, hi) in sorted(bounds.items())])

    frames = []
    parquet = [f for f in files if f.format == "parquet"]
    avro = [(f.topic, f.storage_uri, f.path) for f in files if f.format != "parquet"]
    if parquet:
        raw = spark.read.schema(IDS_PARQUET_SCHEMA).parquet(*(f.spark_path for f in parquet))
        raw = raw.where(wanted(F.col("header.session"), F.col("header.seq")) | F.col("header.session").isNull())
        headerless = F.col("header").isNull() & F.col("_offset").isNotNull()
        frames.append(raw.select(
            F.when(headerless, F.concat(F.lit(POSITION_SESSION), F.col("_partition").cast("string")))
            .otherwise(F.col("header.session").cast("string")).alias("session"),
            F.when(headerless, F.col("_offset")).otherwise(F.col("header.seq").cast("long")).alias("seq"),
        ))
    if avro:
        frames.append(_read_avro(spark, avro, "ids").select("session", "seq"))
    if not frames:
        return spark.createDataFrame([], "session string, seq long")
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out.where(wanted(F.col("session"), F.col("seq")))


def read_monitoring(spark, files: Sequence[LoadedFile]):
    """DataFrame of monitoring events (fields of docs/events.md) from the audit topic's files."""
    from pyspark.sql import functions as F

    fields = avro_source.MONITORING_FIELDS
    frames = []
    parquet = [f.spark_path for f in files if f.format == "parquet"]
    avro = [(f.topic, f.storage_uri, f.path) for f in files if f.format != "parquet"]
    if parquet:
        frames.append(spark.read.schema(MONITORING_PARQUET_SCHEMA).parquet(*parquet)
                      .select(*[F.col(n).cast(k).alias(n) for n, k in fields]))
    if avro:
        frames.append(_read_avro(spark, avro, "monitoring"))
    if not frames:
        return spark.createDataFrame([], avro_source.ddl(fields))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


MONITORING_DRIVER_TYPES = {"string": ("string", "large_string"), "long": ("int64",), "int": ("int32",),
                           "boolean": ("bool",)}
"""Arrow types of the monitoring Parquet columns the driver reads as Spark would (MONITORING_PARQUET_SCHEMA);
any other type is left to Spark, which then fails or converts exactly as it always has."""


def monitoring_on_driver(groups: Sequence[tuple[str, Sequence[LoadedFile]]], max_bytes: int) -> list[dict] | None:
    """Every monitoring event of the ``(origin, files)`` groups as dicts, read on the driver, or None.

    None when the files hold more than ``max_bytes`` together (or ``max_bytes`` is 0),
    or when a file cannot be read here exactly as Spark reads it (an unexpected column
    type, bytes that do not decode): the caller then reads them with Spark
    (:func:`read_monitoring`), whose results and errors are the reference.
    Each dict has the fields of ``avro_source.MONITORING_FIELDS`` and ``origin``.
    """
    files = [(origin, f) for origin, fs in groups for f in fs]
    if max_bytes <= 0:
        return None
    storages: dict[str, object] = {}
    total = 0
    for _, f in files:
        storage = storages.get(f.storage_uri) or storages.setdefault(f.storage_uri, open_storage(f.storage_uri))
        info = storage.status(f.path)
        total += info.size if info is not None else max_bytes + 1  # a file gone: Spark says so
        if total > max_bytes:
            log.info("monitoring files hold more than %d bytes: read with Spark", max_bytes)
            return None
    events: list[dict] = []
    try:
        for origin, f in files:
            events += [dict(e, origin=origin) for e in _monitoring_file(f)]
    except Exception as exc:  # noqa: BLE001 - whatever it is, Spark reads the file again and reports it as always
        log.info("monitoring file not read on the driver (%s: %s): read with Spark", type(exc).__name__, exc)
        return None
    return events


def _monitoring_file(f: LoadedFile) -> list[dict]:
    """The monitoring events of one file, fields and types as :func:`read_monitoring` gives them."""
    import io

    import pyarrow.parquet as pq

    fields = avro_source.MONITORING_FIELDS
    if f.format != "parquet":
        reader = avro_source.AvroAuditReader([(f.topic, f.storage_uri, f.path)], "monitoring", 1)
        return [row for batch in reader.read(avro_source.FilesPartition(((f.topic, f.storage_uri, f.path),)))
                for row in batch.to_pylist()]
    table = pq.read_table(io.BytesIO(avro_source.read_file_bytes(f.storage_uri, f.path)))
    columns = {}
    for name, kind in fields:
        if name not in table.column_names:
            columns[name] = [None] * table.num_rows  # Spark's read schema gives a missing column as nulls
            continue
        column = table.column(name)
        wanted = MONITORING_DRIVER_TYPES["int" if name == "revision" else kind]
        if str(column.type) not in wanted:
            raise TypeError(f"column {name} is {column.type}, not {wanted}")
        columns[name] = column.to_pylist()
    return [{name: columns[name][i] for name, _ in fields} for i in range(table.num_rows)]


def read_mirror_lost(spark, files: Sequence[LoadedFile]) -> list[LostRange]:
    """The mirror's lost ranges (MirrorLostRange records) from the loaded files of ``mirror.lost.topic``.

    Re-published copies (same ``event_id``) count once. Session bounds travel
    as JSON text through Spark (both file formats give the same rows).
    """
    from pyspark.sql import functions as F

    frames = []
    parquet = [f.spark_path for f in files if f.format == "parquet"]
    avro = [(f.topic, f.storage_uri, f.path) for f in files if f.format != "parquet"]
    cols = [F.col(n).cast(k).alias(n) for n, k in avro_source.MIRROR_LOST_FIELDS]
    if parquet:
        df = spark.read.schema(MIRROR_LOST_PARQUET_SCHEMA).parquet(*parquet)
        frames.append(df.withColumn("session_bounds", F.to_json("session_bounds")).select(*cols))
    if avro:
        frames.append(_read_avro(spark, avro, "mirror_lost").select(*cols))
    if not frames:
        return []
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    rows = sorted(out.dropDuplicates(["event_id"]).collect(),
                  key=lambda r: (r.source_cluster or "", r.topic, r.broker_id, r.partition, r.start_offset))
    return [LostRange.from_record(r.asDict(), tier=TIER_SOURCE, index=i) for i, r in enumerate(rows)]


def _read_avro(spark, files: list[tuple[str, str, str]], projection: str):
    import json

    avro_source.register(spark)
    per = max(1, min(64, len(files) // (spark.sparkContext.defaultParallelism * 2) or 1))
    return (
        spark.read.format(avro_source.SOURCE_NAME)
        .option("files", json.dumps(files))
        .option("projection", projection)
        .option("files.per.partition", str(per))
        .load()
    )
