"""The partitions of the topic a ``format("ingest")`` read names, with their offsets, found read-only.

Reuses the loader's discovery (:func:`ingest.loader.discover.discover`): brokers
from ``brokers`` (each answers METADATA) or from ZooKeeper ``/brokers/ids``
(``zk.connect``; only read, nothing is written or watched afterwards); a Kafka
0.7 topic's partitions per broker; a replicated topic's partitions from
TOPIC_METADATA with the leader's earliest offset and high watermark (nothing
above the high watermark is read); a Kafka-format topic's partitions from the
Metadata of the Kafka listeners in ``bootstrap.servers``, offsets by ListOffsets
from each leader (earliest, and the high watermark as latest). The loader's
discovery is not changed: it is given a mapping with the keys it reads.

A topic has one kind (docs/kafka-protocol.md, D2): found both as a 0.7 topic and as
a Kafka-format topic (two clusters named in one read), the read is refused.
"""
from __future__ import annotations

import logging

from ingest.client.kafka.security import SECURITY_KEY_NAMES
from ingest.errors import ConfigError, UnknownTopicError
from ingest.loader.plan import PartitionSnapshot

log = logging.getLogger(__name__)


def discovery_config(cfg) -> dict:
    """The keys :func:`ingest.loader.discover.discover` reads, from the source's options."""
    return {"brokers": cfg["brokers"], "zk.connect": cfg["zk.connect"], "bootstrap.servers": cfg["bootstrap.servers"],
            "zk.connectiontimeout.ms": cfg["zk.connectiontimeout.ms"], "socket.timeout.ms": cfg["socket.timeout.ms"],
            "fetch.size": cfg["fetch.size"], "max.fetch.size": cfg["max.fetch.size"],
            **{k: cfg[k] for k in SECURITY_KEY_NAMES}}


def topic_partitions(cfg) -> list[PartitionSnapshot]:
    """Every partition of ``cfg["topic"]``, ordered (0.7: by broker id, partition; replicated: by partition).

    Raises:
        UnknownTopicError: no broker holds the topic (the message lists the topics that exist).
        ConfigError: the topic is a 0.7 topic on some broker and a Kafka-format topic on some listener;
            or as the loader's discovery raises it.
        BrokerUnavailableError: as the loader's discovery raises it.
    """
    from ingest.loader.discover import discover  # deferred: imports kazoo

    topic = cfg["topic"]
    snapshots = discover(discovery_config(cfg))
    parts = [s for s in snapshots if s.topic == topic]
    if not parts:
        known = sorted({s.topic for s in snapshots})
        where = " and ".join(w for w in (",".join(cfg["brokers"]) or cfg["zk.connect"],
                                         ",".join(cfg["bootstrap.servers"])) if w)
        raise UnknownTopicError(f"topic {topic!r} is on no broker of {where}; topics: {', '.join(known) or 'none'}")
    kafka = [p for p in parts if p.kafka]
    if kafka and len(kafka) < len(parts):
        other = next(p for p in parts if not p.kafka)
        raise ConfigError(f"topic {topic!r} is a Kafka-format topic at {kafka[0].metadata_brokers} "
                          f"(bootstrap.servers) and a 0.7 topic at {other.host}:{other.port}; a read takes one kind: "
                          f"give only bootstrap.servers, or only brokers/zk.connect")
    if any(p.replicated for p in parts) and not all(p.replicated for p in parts):
        log.warning("topic %s is both replicated and a Kafka 0.7 topic on some broker; reading both", topic)
    parts.sort(key=lambda p: (not p.replicated, 0 if p.replicated else p.broker_id, p.partition))
    log.info("topic %s: %d partitions, %d %s between earliest and latest", topic, len(parts),
             sum(p.latest - p.earliest for p in parts), "records" if kafka else "bytes")
    return parts


def offset_for_time(cfg, part: PartitionSnapshot, time_ms: int) -> int | None:
    """The first offset of a Kafka-format partition whose record timestamp is at or after ``time_ms``
    (ListOffsets by time, the broker's time index), None when no record is."""
    from ingest.client.fetch_settings import FetchSettings  # deferred, as discover
    from ingest.client.partition_reader import open_kafka_fetcher

    with open_kafka_fetcher(part, FetchSettings.from_config(cfg)) as f:
        return f.offset_for_time(part.topic, part.partition, time_ms)
