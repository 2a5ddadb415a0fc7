"""A partition on a broker (:class:`BrokerPartition`): where to read it, and the consumer that reads it.

A Kafka 0.7 partition lives on one broker: ``host``/``port``. A replicated
partition is named by its home broker (``broker_id`` = its first replica, fixed
for the topic's life, so what a reader committed for it survives failovers) and
read from its current leader, found through TOPIC_METADATA at
``metadata_brokers`` (``host:port,...``; empty for a 0.7 partition); ``host``
and ``port`` are then the leader's when the partition was discovered.

The loader's plan (:class:`~ingest.loader.plan.PartitionSnapshot`, and each Spark
task's :class:`~ingest.loader.plan.TaskRange`) and the public Spark source read
partitions as this one type; :func:`open_consumer` opens the right consumer for
one, with one :class:`~ingest.client.fetch_settings.FetchSettings`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.client.fetch_settings import DEFAULT_FETCH, FetchSettings
from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import SYSTEM_CLOCK, Clock

PartitionKey = tuple[str, int, int]
"""(topic, broker_id, partition)"""

V07 = "0.7"
"""A 0.7 topic's partition: byte offsets, read with the 0.7 protocol."""
KAFKA = "kafka"
"""A Kafka-format topic's partition: logical offsets (record numbers), read with the Kafka protocol."""


@dataclass(frozen=True, slots=True)
class BrokerPartition:
    """One partition of a topic on a broker (module docstring); small, frozen and picklable."""

    topic: str
    broker_id: int
    partition: int
    host: str
    port: int
    metadata_brokers: str = ""
    kind: str = "0.7"
    """:data:`V07` (byte offsets, the 0.7 protocol) or :data:`KAFKA` (a Kafka-format topic: logical
    offsets, read through the Kafka listeners, ``host``/``port`` its leader's Kafka listener and
    ``metadata_brokers`` the Kafka listeners that answer Metadata for its cluster)."""

    @property
    def kafka(self) -> bool:
        """A Kafka-format topic's partition (read with the Kafka protocol)."""
        return self.kind == KAFKA

    @property
    def replicated(self) -> bool:
        """Read from the current leader (found through ``metadata_brokers``), not from ``host:port``."""
        return bool(self.metadata_brokers)

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)


def open_consumer(part: BrokerPartition, settings: FetchSettings = DEFAULT_FETCH, *, clock: Clock = SYSTEM_CLOCK):
    """A consumer of ``part`` (the caller closes it): a SimpleConsumer connected to its broker, or for a
    replicated partition a LeaderConsumer that finds the current leader through the partition's own
    ``metadata_brokers`` (an executor has no driver state) and follows failovers for
    ``settings.leader_wait_s``."""
    if part.replicated:
        from ingest.client.leader_consumer import LeaderConsumer, static_metadata  # deferred: imports kazoo

        return LeaderConsumer(static_metadata(part.metadata_brokers, timeout_s=settings.socket_timeout_s),
                              settings=settings, clock=clock)
    return SimpleConsumer(part.host, part.port, settings=settings)


def open_kafka_fetcher(part: BrokerPartition, settings: FetchSettings = DEFAULT_FETCH, *, clock: Clock = SYSTEM_CLOCK):
    """A :class:`~ingest.client.kafka.fetcher.KafkaFetcher` (the caller closes it) of a Kafka-format
    partition's cluster, bootstrapped from ``part.metadata_brokers``: ``fetch.size`` is the partition's
    bytes per Fetch (a larger batch still comes whole, as Kafka sends it), ``socket.timeout.ms`` the
    request timeout, within which leader changes are retried. Batches are not checked by the fetcher:
    the caller checks each one, to set a damaged batch aside instead of failing the whole fetch. It connects
    as ``settings.security`` says (TLS, SASL)."""
    from ingest.client.kafka.fetcher import KafkaFetcher  # deferred: 0.7 readers never need it

    timeout_ms = max(1, int(settings.socket_timeout_s * 1000))
    return KafkaFetcher({**settings.security.client_keys(),"bootstrap.servers": part.metadata_brokers or f"{part.host}:{part.port}",
                         "client.id": "ingest-loader", "request.timeout.ms": timeout_ms,
                         "max.partition.fetch.bytes": settings.fetch_size,
                         "fetch.max.bytes": max(settings.fetch_size, settings.max_fetch_size),
                         "fetch.max.wait.ms": 100, "check.crcs": False}, clock=clock)
