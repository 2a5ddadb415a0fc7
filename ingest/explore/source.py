"""The public Spark data source ``format("ingest")``: read a topic's events as decoded columns.

::

    df = (spark.read.format("ingest")
          .option("brokers", "h1:9092,h2:9092")          # or .option("zk.connect", "zk:2181/chroot"),
                                                          # or .option("bootstrap.servers", "h1:29092")
          .option("topic", "page-views")
          .option("registry.url", "http://registry:8081")
          .option("startingOffsets", "earliest")          # or JSON, or a *Timestamp option
          .option("endingOffsets", "latest")
          .load())

Columns: the fields of the latest schema of subject ``<topic>-value`` (as Spark's
``from_avro`` types them, :mod:`ingest.explore.avro_types`); for a Kafka-format
topic the record columns the loader writes, ``_key``, ``_headers`` and ``_timestamp``
(:mod:`ingest.loader.record_columns`); then ``topic``, ``partition``, ``broker_id``
(the broker holding a Kafka 0.7 topic's partition; null for a replicated or
Kafka-format topic), ``offset`` (a 0.7 message's byte offset, the messages of one
compressed set sharing their wrapper's; a Kafka-format record's own offset, 0, 1,
2, ...) and ``event_time`` (``header.time`` as a timestamp; on a Kafka-format topic
an event without the product's header has its record's timestamp, as the loader
buckets it). Options: :mod:`ingest.explore.source_config`;
offset forms: :mod:`ingest.explore.offsets`.

One Spark input partition per topic partition (cut at segment starts with
``maxBytesPerPartition`` on a 0.7 topic, into pieces of ``maxRecordsPerPartition``
offsets on a Kafka-format topic: :mod:`ingest.explore.split`). Read-only: no consumer group, no
offsets stored, no file or znode written (docs/spark-source.md).

Spark finds the source by name without a register call when the top-level module
``pyspark_ingest`` is importable by Spark's Python workers (Spark 4's
auto-discovery of ``pyspark_*`` modules with a ``DefaultSource``); otherwise
:func:`register` does it (``ingest.explore.register(spark)``).
"""
from __future__ import annotations

import logging
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ingest.client.fetch_settings import FetchSettings
from ingest.errors import ConfigError, SchemaError, SchemaNotFoundError
from ingest.explore.avro_types import record_type
from ingest.explore.offsets import ReadRange, partition_name, plan_ranges
from ingest.explore.partitions import discovery_config, offset_for_time, topic_partitions
from ingest.explore.read import META_COLUMNS, ReadSettings, rows
from ingest.explore.source_config import parse_options
from ingest.explore.split import segment_starts, split_range, split_records
from ingest.loader.record_columns import RECORD_COLUMNS, record_columns_in, with_record_columns
from ingest.registry_client_config import RegistryAuth

log = logging.getLogger(__name__)

FORMAT_NAME = "ingest"


def subject_of(topic: str) -> str:
    """The registry subject whose latest schema gives the columns (the event serializer's ``<topic>-value``)."""
    return f"{topic}-value"


def reader_schema(cfg) -> tuple[int, dict]:
    """(id, schema) of the latest version of the topic's subject.

    Raises:
        SchemaNotFoundError: no such subject (names the topic, the subject and the registry).
        RegistryUnavailableError: the registry cannot be reached.
    """
    from ingest.events.registry_client import RegistryClient  # deferred: imports fastavro

    subject = subject_of(cfg["topic"])
    try:
        return RegistryClient(cfg["registry.url"], auth=RegistryAuth.from_config(cfg)).latest(subject)
    except SchemaNotFoundError as exc:
        raise SchemaNotFoundError(f"topic {cfg['topic']!r} has no schema: subject {subject!r} is not in the registry "
                                  f"{cfg['registry.url']} (its events are written by the event producer, which "
                                  f"registers it); {exc}") from exc


def spark_schema(avro: dict, *, kafka: bool = False):
    """The StructType of a read: the event's columns, for a Kafka-format topic the record's key, headers
    and timestamp (:data:`~ingest.loader.record_columns.CONTENT_COLUMNS`, as the loader writes them), then
    :data:`~ingest.explore.read.META_COLUMNS`.

    Raises:
        SchemaError: a field type without a Spark type, or a field named like a metadata column (or,
            on a Kafka-format topic, like a record column).
    """
    from pyspark.sql import types as T  # pyspark is loaded anyway; types is its own module

    if kafka and record_columns_in(avro):
        raise SchemaError(f"schema {avro.get('name')!r} has top-level fields named "
                          f"{', '.join(record_columns_in(avro))}, like the record columns the loader writes for a "
                          f"Kafka-format topic ({', '.join(RECORD_COLUMNS)}); not supported "
                          f"(the loader refuses it too): register a version without them")
    struct, _ = record_type(with_record_columns(avro, position=False) if kafka else avro)
    taken = sorted({f.name for f in struct.fields} & {name for name, _, _ in META_COLUMNS})
    if taken:
        raise SchemaError(f"schema {avro.get('name')!r} has fields named {', '.join(taken)}, like the source's own "
                          f"columns ({', '.join(n for n, _, _ in META_COLUMNS)}); not supported")
    kinds = {"string": T.StringType(), "int": T.IntegerType(), "long": T.LongType(), "timestamp": T.TimestampType()}
    return T.StructType(struct.fields + [T.StructField(n, kinds[k], nullable) for n, k, nullable in META_COLUMNS])


def _has_header_time(avro: dict) -> bool:
    for f in avro.get("fields", []):
        t = f.get("type")
        if f.get("name") == "header" and isinstance(t, dict):
            return any(g.get("name") == "time" for g in t.get("fields", []))
    return False


class RangePartition(InputPartition):
    """One Spark input partition = one topic partition's range (picklable: frozen dataclasses inside)."""

    def __init__(self, index: int, r: ReadRange) -> None:
        super().__init__(index)
        self.range = r


class IngestReader(DataSourceReader):
    """Plans one input partition per topic partition, or per piece of it (``maxBytesPerPartition``), on the
    driver; reads each on an executor."""

    def __init__(self, options, schema) -> None:
        self.cfg = dict(parse_options(options).items())  # a plain dict: the reader is pickled to executors
        schema_id, avro = reader_schema(self.cfg)
        self.parts = topic_partitions(self.cfg)   # frozen snapshots, found once, on the driver
        self.kafka = self.parts[0].kafka
        if schema is not None and spark_schema(avro, kafka=self.kafka) != schema:
            raise SchemaError(f"the schema given differs from the latest schema of {subject_of(self.cfg['topic'])} "
                              f"(id {schema_id}): the columns are the registry's (do not pass .schema(...)); if "
                              f"the subject changed while the read was planned, load() again")
        timed = [k for k in ("startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
                             "endingOffsetsByTimestamp") if self.cfg[k] is not None]
        if timed and not self.kafka and not _has_header_time(avro):
            raise ConfigError(f"{timed[0]}: schema id {schema_id} of {subject_of(self.cfg['topic'])} has no "
                              f"header.time, so events have no event time to cut at; use startingOffsets/endingOffsets")
        self.settings = ReadSettings(
            registry_url=self.cfg["registry.url"], reader_schema=avro, reader_schema_id=schema_id,
            fetch=FetchSettings.from_config(self.cfg), start_strategy=self.cfg["startingOffsetsByTimestampStrategy"],
            fail_on_data_loss=self.cfg["failOnDataLoss"], registry_auth=RegistryAuth.from_config(self.cfg))

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan_ranges(self.cfg, self.parts, lambda p, t: offset_for_time(self.cfg, p, t))
        limit, records = self.cfg["maxBytesPerPartition"], self.cfg["maxRecordsPerPartition"]
        if self.kafka and records is not None:
            ranges = [piece for r in ranges for piece in split_records(r, records)]
        elif not self.kafka and limit is not None:
            ranges = [piece for r in ranges
                      for piece in (split_range(r, segment_starts(r, discovery_config(self.cfg)), limit)
                                    if r.end - r.start > limit and r.start_time is None and r.end_time is None
                                    else [r])]
        for r in ranges:
            log.info("format(ingest) %s partition %s: [%d, %d) start_time=%s end_time=%s", r.part.topic,
                     partition_name(r.part), r.start, r.end, r.start_time, r.end_time)
        return [RangePartition(i, r) for i, r in enumerate(ranges)]

    def read(self, partition: RangePartition) -> Iterator[tuple]:
        schema = self.settings.reader_schema
        _, convert = record_type(with_record_columns(schema, position=False) if self.kafka else schema)
        yield from rows(partition.range, self.settings, convert)


class IngestDataSource(DataSource):
    """``spark.read.format("ingest")``: a topic's events, decoded (batch, read-only)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self):
        cfg = parse_options(self.options)
        avro = reader_schema(cfg)[1]
        return spark_schema(avro, kafka=topic_partitions(cfg)[0].kafka)   # the kind decides the columns

    def reader(self, schema) -> DataSourceReader:
        return IngestReader(self.options, schema)


def register(spark) -> None:
    """Make ``spark.read.format("ingest")`` available in ``spark`` (idempotent; needed only where Spark's
    auto-discovery of the ``pyspark_ingest`` module does not reach, e.g. an editable install)."""
    spark.dataSource.register(IngestDataSource)
