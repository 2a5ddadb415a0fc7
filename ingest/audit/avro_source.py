"""A Spark Python data source that reads the loader's Avro files with fastavro.

Spark's own Avro module is an external Maven package that cannot be fetched
here, so Avro container files are read by this source: one Spark input
partition per group of files, each yielding ``pyarrow.RecordBatch``es whose
types match the declared schema exactly (Spark rejects int32 for int64).

Two fixed projections, chosen with the option ``projection``:

``ids``         topic string, session string, seq long, time long, server string
                (from each record's ``header``; ``topic`` comes from the file's place
                in the layout, records do not carry it)
``monitoring``  the monitoring event fields of docs/events.md (``revision`` widened
                to long)
``mirror_lost`` the mirror's lost ranges (conf/schemas/mirror_lost_range.avsc;
                ints widened to long, ``session_bounds`` as JSON text)

Options: ``files`` = JSON list of ``[topic, storage_uri, path]``; ``projection``;
``files.per.partition`` (default 8).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ingest.storage import open_storage

log = logging.getLogger(__name__)

SOURCE_NAME = "ingest_audit_avro"

POSITION_SESSION = "partition:"
"""A Kafka-format row without the product's header is identified by its record's position: session
``partition:<n>``, seq = its offset, time = its record timestamp (docs/loader.md, "Record columns")."""
IDS_FIELDS: tuple[tuple[str, str], ...] = (
    ("topic", "string"), ("session", "string"), ("seq", "long"), ("time", "long"), ("server", "string"),
)

MONITORING_FIELDS: tuple[tuple[str, str], ...] = (
    ("event_id", "string"), ("producer_session_id", "string"), ("producer_server", "string"),
    ("service", "string"), ("report_seq", "long"), ("topic", "string"), ("window_start_ms", "long"),
    ("window_end_ms", "long"), ("window_size_ms", "long"), ("revision", "long"),
    ("count_attempted", "long"), ("count_acked", "long"), ("count_failed", "long"),
    ("bytes_acked", "long"), ("seq_min", "long"), ("seq_max", "long"), ("is_final", "boolean"),
    ("heartbeat", "boolean"), ("emitted_at_ms", "long"),
)

MIRROR_LOST_FIELDS: tuple[tuple[str, str], ...] = (
    ("event_id", "string"), ("source_cluster", "string"), ("topic", "string"), ("broker_id", "long"),
    ("partition", "long"), ("start_offset", "long"), ("end_offset", "long"), ("bytes", "long"),
    ("messages", "long"), ("messages_exact", "boolean"), ("cause", "string"), ("after_time_ms", "long"),
    ("before_time_ms", "long"),
    ("session_bounds", "string"), ("detected_at_ms", "long"),
)
"""MirrorLostRange records (conf/schemas/mirror_lost_range.avsc); ``session_bounds`` as JSON text."""

PROJECTIONS = {"ids": IDS_FIELDS, "monitoring": MONITORING_FIELDS, "mirror_lost": MIRROR_LOST_FIELDS}


def ddl(fields: Sequence[tuple[str, str]]) -> str:
    """Spark DDL schema string for a projection."""
    return ", ".join(f"{name} {kind}" for name, kind in fields)


def read_file_bytes(storage_uri: str, path: str) -> bytes:
    """Bytes of a loaded file: the storage is re-opened from its URI (clients do not pickle)."""
    return open_storage(storage_uri).read_bytes(path)


@dataclass(frozen=True)
class FilesPartition(InputPartition):
    """A picklable group of ``(topic, storage_uri, path)`` to read in one Spark task."""

    files: tuple[tuple[str, str, str], ...]


class AvroAuditReader(DataSourceReader):
    def __init__(self, files: list[tuple[str, str, str]], projection: str, per_partition: int) -> None:
        self.files = files
        self.projection = projection
        self.per_partition = per_partition

    def partitions(self) -> Sequence[InputPartition]:
        step = self.per_partition
        groups = [tuple(self.files[i:i + step]) for i in range(0, len(self.files), step)]
        return [FilesPartition(g) for g in groups] or [FilesPartition(())]

    def read(self, partition: InputPartition) -> Iterator:
        import io

        import fastavro
        import pyarrow as pa

        fields = PROJECTIONS[self.projection]
        arrow_types = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}
        schema = pa.schema([(n, arrow_types[k]) for n, k in fields])
        assert isinstance(partition, FilesPartition)
        for topic, uri, path in partition.files:
            reader = fastavro.reader(io.BytesIO(read_file_bytes(uri, path)))
            cols: dict[str, list] = {n: [] for n, _ in fields}
            for record in reader:
                if self.projection == "ids":
                    header = record.get("header")
                    cols["topic"].append(topic)
                    if header is None and record.get("_offset") is not None:
                        # a Kafka-format record without the product's header: its position is its id
                        cols["session"].append(f"{POSITION_SESSION}{record['_partition']}")
                        cols["seq"].append(record["_offset"])
                        cols["time"].append(record["_timestamp"])
                        cols["server"].append(None)
                        continue
                    cols["session"].append(header["session"])
                    cols["seq"].append(header["seq"])
                    cols["time"].append(header["time"])
                    cols["server"].append(header["server"])
                elif self.projection == "mirror_lost":
                    for name, _ in fields:
                        value = record.get(name)
                        cols[name].append(json.dumps(value) if name == "session_bounds" else value)
                else:
                    for name, _ in fields:
                        cols[name].append(record.get(name))
                if len(cols[fields[0][0]]) >= 65_536:
                    yield pa.RecordBatch.from_pydict(cols, schema=schema)
                    cols = {n: [] for n, _ in fields}
            if cols[fields[0][0]]:
                yield pa.RecordBatch.from_pydict(cols, schema=schema)


class AvroAuditSource(DataSource):
    """``spark.read.format("ingest_audit_avro").option("files", ...).option("projection", ...)``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return ddl(PROJECTIONS[self.options.get("projection", "ids")])

    def reader(self, schema) -> DataSourceReader:
        projection = self.options.get("projection", "ids")
        if projection not in PROJECTIONS:
            raise ValueError(f"projection {projection!r} is not one of {sorted(PROJECTIONS)}")
        files = [tuple(x) for x in json.loads(self.options.get("files", "[]"))]
        return AvroAuditReader(files, projection, int(self.options.get("files.per.partition", "8")))


_registered: set[int] = set()


def register(spark) -> None:
    """Register the source with ``spark`` once per session."""
    key = id(spark)
    if key not in _registered:
        spark.dataSource.register(AvroAuditSource)
        _registered.add(key)
