"""The options of the public Spark data source ``spark.read.format("ingest")``.

Spark passes data source options as strings and matches their names without
regard to case (``startingoffsets`` = ``startingOffsets``); :func:`parse_options`
restores the declared spelling, then validates like every other config of the
product (unknown name: the closest known ones; bad value: the value and what is
allowed). The offset and timestamp options are JSON or keywords whose grammar is
:mod:`ingest.explore.offsets`'; here they are strings.

Names follow Spark's Kafka source where it has one (``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``endingTimestamp``, ``endingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy``, ``failOnDataLoss``, ``maxRecordsPerPartition``); the rest are
this product's client keys (``bootstrap.servers`` is Kafka's).
"""
from __future__ import annotations

import logging
from typing import Mapping

from ingest.config import Bool, Choice, Config, ConfigDef, Int, Key, Str, StrList
from ingest.errors import ConfigError
from ingest.client.kafka.security import security_keys
from ingest.loader.kafka_topics import bootstrap_servers
from ingest.registry_client_config import REGISTRY_CLIENT_KEYS

log = logging.getLogger(__name__)

MB = 1024 * 1024

SOURCE_CONFIG = ConfigDef(
    "spark source",
    (
        Key("topic", Str(nonempty=True), doc="the topic to read"),
        Key("brokers", StrList(), (), "host:port list of brokers (0.7 ports; each answers METADATA for itself); or use zk.connect"),
        Key("zk.connect", Str(), None, "ZooKeeper connect string to discover brokers from /brokers/ids (read only)"),
        Key("bootstrap.servers", StrList(), (), "host:port list of Kafka listeners: a Kafka-format topic is read through them (partitions and leaders from Metadata); beside or instead of brokers/zk.connect"),
        *security_keys(whose="the Kafka listeners (planning and every reader; not the 0.7 ports)"),
        Key("zk.connectiontimeout.ms", Int(100, 600_000), 6000, "ZooKeeper connection timeout"),
        Key("registry.url", Str(nonempty=True), doc="schema registry base URL; the columns are the latest schema of subject <topic>-value"),
        *REGISTRY_CLIENT_KEYS,
        Key("startingOffsets", Str(nonempty=True), "earliest", 'earliest, or JSON {"topic":{"<partition>":offset}} naming every partition (-2: earliest)'),
        Key("endingOffsets", Str(nonempty=True), "latest", 'latest, or JSON {"topic":{"<partition>":offset}} naming every partition (-1: latest); exclusive'),
        Key("startingTimestamp", Int(0, None), None, "time (ms): every partition starts at its first message with header.time >= it (a Kafka-format topic: its first record whose timestamp is >= it, by ListOffsets) (beats the two below)"),
        Key("startingOffsetsByTimestamp", Str(), None, 'JSON {"topic":{"<partition>":ms}} naming every partition; beats startingOffsets'),
        Key("startingOffsetsByTimestampStrategy", Choice(("error", "latest")), "error", "a partition with no message at or after its starting timestamp: fail the query, or read nothing from it"),
        Key("endingTimestamp", Int(0, None), None, "time (ms): every partition ends before its first message with header.time >= it (a Kafka-format topic: record timestamp, by ListOffsets), or at latest (beats the one below)"),
        Key("endingOffsetsByTimestamp", Str(), None, 'JSON {"topic":{"<partition>":ms}} naming every partition; beats endingOffsets'),
        Key("maxBytesPerPartition", Int(1024, None), None, "0.7 topics: cut a partition's range into Spark partitions of at most about this many bytes, at segment starts (offset bounds only; empty: one Spark partition per topic partition)"),
        Key("maxRecordsPerPartition", Int(1, None), None, "Kafka-format topics: cut a partition's range into Spark partitions of at most this many offsets (empty: one Spark partition per topic partition)"),
        Key("socket.timeout.ms", Int(100, None), 30_000, "broker socket timeout"),
        Key("fetch.size", Int(1024, None), 1 * MB, "bytes per fetch request"),
        Key("max.fetch.size", Int(1024, None), 64 * MB, "largest fetch size the reader grows to for one big message"),
        Key("failOnDataLoss", Bool(), True, "a damaged range of a broker's log, a message or record batch failing its CRC: fail the query (true), or skip it with a WARNING and read every intact message (false)"),
    ),
)

_BY_LOWER = {k.name.lower(): k.name for k in SOURCE_CONFIG.keys}


def parse_options(options: Mapping[str, str]) -> Config:
    """The validated options of one read (names matched without regard to case, as Spark does).

    Raises:
        ConfigError: an unknown option (with the closest known names), a bad value
            (the value and what is allowed), a missing ``topic``/``registry.url``, or
            none of ``brokers``, ``zk.connect`` and ``bootstrap.servers``; an item of
            ``bootstrap.servers`` that is not host:port.
    """
    raw = {_BY_LOWER.get(str(name).lower(), str(name)): value for name, value in options.items()}
    cfg = SOURCE_CONFIG.parse(raw, source='spark.read.format("ingest")')
    if not cfg["brokers"] and not cfg["zk.connect"] and not cfg["bootstrap.servers"]:
        raise ConfigError('spark.read.format("ingest") needs the option brokers (host:port,...), zk.connect, or '
                          'bootstrap.servers (Kafka listeners, host:port,...; for a Kafka-format topic)')
    bootstrap_servers(cfg)   # each item host:port, or a ConfigError naming it
    return cfg
