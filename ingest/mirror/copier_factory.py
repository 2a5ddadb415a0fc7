"""make_copier: a PartitionCopier from the mirror process's shared parts (discoveries, metadata, producer).

The mirror process (ingest/mirror/mirror_maker.py) keeps one Discovery and one
ReplicaMetadata per source cluster and one of each for the target, one fallback
Producer for the target (made on first need with :func:`make_fallback_producer`),
and calls :func:`make_copier` for each unit it owns. A Kafka topic's unit reads and writes through the
clusters' Kafka listeners (:mod:`ingest.mirror.kafka_io`).
"""
from __future__ import annotations

import logging
import socket
from typing import Callable

from ingest.client.discovery import Discovery
from ingest.client.producer import Producer
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.fetch_settings import FetchSettings
from ingest.client.kafka.security import ClientSecurity
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import MirrorError
from ingest.mirror.copier import PartitionCopier
from ingest.mirror.fallback import FallbackSender, make_fallback_producer
from ingest.mirror.kafka_io import KafkaSourceReader, KafkaTargetWriter, port07_endpoint
from ingest.mirror.config import MIRROR_FETCH
from ingest.mirror.mapping import MirrorUnit
from ingest.mirror.source_reader import SourceReader
from ingest.mirror.target_writer import TargetWriter

log = logging.getLogger(__name__)

__all__ = ["make_copier", "make_fallback_producer"]


def make_copier(unit: MirrorUnit, *, group: str, zk, source_discovery: Discovery, target_metadata: ReplicaMetadata,
                source_metadata: ReplicaMetadata | None = None, fallback_producer: Producer | None = None,
                counter_factory: Callable | None = None, publisher=None, header_reader=None,
                fetch: FetchSettings = MIRROR_FETCH, acks: int = -1, timeout_ms: int = 10_000,
                checkpoint_interval_ms: int = 1000, mirror_server: str | None = None,
                kafka_bootstrap: tuple[str, str] | None = None,
                kafka_security: tuple[ClientSecurity, ClientSecurity] | None = None, clock: Clock = SYSTEM_CLOCK) -> PartitionCopier:
    """The copier of ``unit``.

    Args:
        zk: started kazoo client of the target ZooKeeper (checkpoints, lost ranges).
        source_discovery / source_metadata: the unit's source cluster (metadata made from the discovery if None).
        target_metadata: the target cluster's TOPIC_METADATA cache.
        fallback_producer: required for a fallback unit (``unit.target_partition is None``).
        counter_factory: ``state -> PartitionCounter`` (state from the checkpoint, None the first time).
        publisher: TierEventPublisher (``publish_counts``, ``publish_lost_range``).
        header_reader: HeaderReader (session keys in fallback, lost-range bounds, lag seconds).
        kafka_bootstrap: for a Kafka topic's unit, the Kafka listeners (``host:port,...``) of the source and of
            the target cluster; None for a 0.7 topic's.
        kafka_security: how the mirror connects to the Kafka listeners (source's, target's); default PLAINTEXT.
            A 0.7 topic's unit takes the target's for APPEND_AT on a secured target's Kafka listener.

    Raises:
        MirrorError: a Kafka topic's unit without a target partition (the at-least-once fallback copies
            0.7 topics only).
    """
    if kafka_bootstrap is not None:
        if unit.fallback:
            raise MirrorError(f"{unit}: a Kafka topic is copied one to one only (the at-least-once fallback copies "
                              "0.7 topics); give the target topic enough partitions (docs/mirroring.md)")
        source_at, target_at = kafka_bootstrap
        source_security, target_security = kafka_security or (ClientSecurity(), ClientSecurity())
        return PartitionCopier(
            unit, group=group, zk=zk,
            source=KafkaSourceReader(source_at, unit.topic, unit.partition, settings=fetch,
                                     security=source_security, clock=clock),
            target=KafkaTargetWriter(target_at, unit.topic, unit.target_partition, acks=acks, timeout_ms=timeout_ms,
                                     settings=fetch, security=target_security, clock=clock),
            counter_factory=counter_factory, publisher=publisher, header_reader=header_reader,
            checkpoint_interval_ms=checkpoint_interval_ms, mirror_server=mirror_server or socket.gethostname(),
            clock=clock)
    target_security = kafka_security[1] if kafka_security else ClientSecurity()
    source = SourceReader(source_discovery, unit.topic, unit.broker_id, unit.partition, metadata=source_metadata,
                          settings=fetch, clock=clock)
    target = fallback = None
    if unit.fallback:
        fallback = FallbackSender(fallback_producer, unit.topic, header_reader) if fallback_producer else None
    else:
        target = TargetWriter(target_metadata, unit.topic, unit.target_partition, acks=acks, timeout_ms=timeout_ms,
                              settings=fetch, clock=clock, security=target_security,
                              kafka_endpoint=None if zk is None else
                              (lambda bid: port07_endpoint(zk, bid, target_security.protocol)))
    return PartitionCopier(unit, group=group, zk=zk, source=source, target=target, fallback=fallback,
                           counter_factory=counter_factory, publisher=publisher, header_reader=header_reader,
                           checkpoint_interval_ms=checkpoint_interval_ms,
                           mirror_server=mirror_server or socket.gethostname(), clock=clock)
