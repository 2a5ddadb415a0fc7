"""The partitions of the topic a ``format("ingest")`` read names, with their offsets, found read-only.

Reuses the loader's discovery (:func:`ingest.loader.discover.discover`): brokers
from ``brokers`` (each answers METADATA) or from ZooKeeper ``/brokers/ids``
(``zk.connect``; only read, nothing is written or watched afterwards); a Kafka
0.7 topic's partitions per broker; a replicated topic's partitions from
TOPIC_METADATA with the leader's earliest offset and high watermark (nothing
above the high watermark is read). The loader's discovery is not changed: it is
given a mapping with the keys it reads.
"""
from __future__ import annotations

import logging

from ingest.errors import UnknownTopicError
from ingest.loader.plan import PartitionSnapshot

log = logging.getLogger(__name__)


def discovery_config(cfg) -> dict:
    """The keys :func:`ingest.loader.discover.discover` reads, from the source's options."""
    return {"brokers": cfg["brokers"], "zk.connect": cfg["zk.connect"],
            "zk.connectiontimeout.ms": cfg["zk.connectiontimeout.ms"], "socket.timeout.ms": cfg["socket.timeout.ms"],
            "fetch.size": cfg["fetch.size"], "max.fetch.size": cfg["max.fetch.size"]}


def topic_partitions(cfg) -> list[PartitionSnapshot]:
    """Every partition of ``cfg["topic"]``, ordered (0.7: by broker id, partition; replicated: by partition).

    Raises:
        UnknownTopicError: no broker holds the topic (the message lists the topics that exist).
        ConfigError / BrokerUnavailableError: as the loader's discovery raises them.
    """
    from ingest.loader.discover import discover  # deferred: imports kazoo

    topic = cfg["topic"]
    snapshots = discover(discovery_config(cfg))
    parts = [s for s in snapshots if s.topic == topic]
    if not parts:
        known = sorted({s.topic for s in snapshots})
        where = ",".join(cfg["brokers"]) or cfg["zk.connect"]
        raise UnknownTopicError(f"topic {topic!r} is on no broker of {where}; topics: {', '.join(known) or 'none'}")
    if any(p.replicated for p in parts) and not all(p.replicated for p in parts):
        log.warning("topic %s is both replicated and a Kafka 0.7 topic on some broker; reading both", topic)
    parts.sort(key=lambda p: (not p.replicated, 0 if p.replicated else p.broker_id, p.partition))
    log.info("topic %s: %d partitions, %d bytes between earliest and latest", topic, len(parts),
             sum(p.latest - p.earliest for p in parts))
    return parts
