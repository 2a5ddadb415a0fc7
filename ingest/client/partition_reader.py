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


@dataclass(frozen=True, slots=True)
class BrokerPartition:
    """One partition of a topic on a broker (module docstring); small, frozen and picklable."""

    topic: str
    broker_id: int
    partition: int
    host: str
    port: int
    metadata_brokers: str = ""

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
