"""What the Kafka listener's handlers see of the cluster: brokers, Kafka topics, and the partitions this broker leads.

The seam between the Kafka APIs and where partitions live. The handlers (Metadata, Produce, Fetch,
ListOffsets, OffsetForLeaderEpoch) ask a :class:`KafkaCluster` and never look at ZooKeeper or the
replica manager themselves:

- :class:`LocalCluster` (no ZooKeeper): the broker alone is the cluster and its controller; its Kafka
  topics are its own Kafka-format logs, each partition led by it in leader epoch 0, its high watermark
  the log end (docs/kafka-protocol.md, D2);
- :class:`ingest.broker.kafka.zk_cluster.ZkCluster` (ZooKeeper): cluster topics in Kafka's model,
  read from the broker's replication view, and the partitions the replica manager leads here.

A :class:`ServedPartition` is one partition this broker leads: its log, its leader epoch, the high
watermark readers stop at, ``append`` for a producer's batch and ``append_copied`` for the mirror's
(AppendAt); with ZooKeeper also
``follower_fetch`` (a Fetch with a ``replica_id``: the follower's position, D4) and ``epoch_end``
(OffsetForLeaderEpoch from the leader-epoch history).

Thread-safety: every method may be called from any network thread and the coordination thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Protocol

from ingest.broker.kafka_log import AppendInfo, KafkaLog, ProducedBatch
from ingest.broker.listeners import Listeners
from ingest.broker.topic_kind import TopicKind, wrong_kind
from ingest.broker.topics import validate_partition, validate_topic
from ingest.errors import IngestError, UnknownTopicError

LOCAL_LEADER_EPOCH = 0
"""The leader epoch of every partition of a broker without ZooKeeper: it is the only leader there ever is."""


@dataclass(frozen=True)
class BrokerNode:
    """A broker as Metadata lists it: its id and the endpoint of the listener the request came in on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionView:
    """One partition as Metadata describes it (``error``: a Kafka error code, e.g. LEADER_NOT_AVAILABLE)."""

    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()
    error: int = 0


class Appended(NamedTuple):
    """What an append did: ``info`` (offsets, sizes), and for an acks=-1 write that the in-sync replicas
    do not all have yet, ``outcome()``: True once acknowledged, an error to answer, None to wait on."""

    info: AppendInfo
    outcome: Callable[[], "bool | IngestError | None"] | None = None


class ServedPartition(Protocol):
    """A partition this broker leads, as the Kafka handlers use it."""

    topic: str
    partition: int
    log: KafkaLog

    def leader_epoch(self) -> int: ...

    def high_watermark(self) -> int: ...

    def append(self, batch: ProducedBatch, acks: int) -> Appended: ...

    def append_copied(self, records, acks: int, expected: int) -> Appended: ...


class KafkaCluster(Protocol):
    """The cluster as the Kafka handlers see it (see the module docstring)."""

    broker_id: int
    cluster_id: str

    def controller_id(self) -> int: ...

    def brokers(self, listener: str) -> tuple[BrokerNode, ...]: ...

    def topic_names(self) -> list[str]: ...

    def describe(self, topic: str) -> tuple[PartitionView, ...] | None: ...

    def leader(self, topic: str, partition: int) -> ServedPartition: ...

    def create_topic(self, topic: str, partitions: int | None = None, replication_factor: int | None = None) -> bool: ...

    def topic_configs(self, topic: str) -> dict[str, str]: ...


class LocalPartition:
    """A partition of a broker without ZooKeeper: its own log, leader epoch 0, visible once appended."""

    __slots__ = ("topic", "partition", "log")

    def __init__(self, topic: str, partition: int, log: KafkaLog) -> None:
        self.topic, self.partition, self.log = topic, partition, log

    def leader_epoch(self) -> int:
        return LOCAL_LEADER_EPOCH

    def high_watermark(self) -> int:
        return self.log.end_offset

    def append(self, batch: ProducedBatch, acks: int) -> Appended:
        """acks 1 and -1 alike: the only replica has it once appended."""
        return Appended(self.log.append(batch, leader_epoch=LOCAL_LEADER_EPOCH))

    def append_copied(self, records, acks: int, expected: int) -> Appended:
        """AppendAt: another log's batches with their offsets, only if the log end is ``expected``."""
        return Appended(self.log.append_copied(records, expected, LOCAL_LEADER_EPOCH))


class LocalCluster:
    """A broker without ZooKeeper as a one-broker cluster (see the module docstring).

    Args:
        logs: the broker's LogManager (its Kafka-format logs are the Kafka topics).
        broker_id: this broker, the only one and the controller.
        listeners: its Kafka listeners (what Metadata advertises).
        cluster_id: the id Metadata answers (stable across restarts: :mod:`ingest.broker.kafka.cluster_id`).
    """

    def __init__(self, logs, broker_id: int, listeners: Listeners, cluster_id: str) -> None:
        self.logs = logs
        self.broker_id = broker_id
        self.listeners = listeners
        self.cluster_id = cluster_id
        self.admin = None   # no ZooKeeper: the admin API's writes are refused (docs/kafka-protocol.md)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """No per-topic configs without ZooKeeper: every topic has the broker's settings."""
        return {}

    def controller_id(self) -> int:
        return self.broker_id

    def brokers(self, listener: str) -> tuple[BrokerNode, ...]:
        e = self.listeners.advertised_for(listener)
        return () if e is None else (BrokerNode(self.broker_id, e.host, e.port),)

    def topic_names(self) -> list[str]:
        return sorted(self.logs.topics(TopicKind.KAFKA))

    def _kind(self, topic: str) -> TopicKind | None:
        kind = self.logs.topic_kind(validate_topic(topic))
        if kind is TopicKind.V07:
            raise wrong_kind(topic, TopicKind.V07)
        return kind

    def describe(self, topic: str) -> tuple[PartitionView, ...] | None:
        """The topic's partitions, None when it has no log here.

        Raises:
            InvalidTopicError / WrongTopicKindError: a bad name, or a 0.7 topic.
        """
        if self._kind(topic) is None:
            return None
        me = (self.broker_id,)
        out = []
        for p in range(self.logs.partition_count(topic)):
            lg = self.logs.get_log(topic, p)
            out.append(PartitionView(p, self.broker_id, LOCAL_LEADER_EPOCH, me, me,
                                     me if lg is not None and lg.offline else ()))
        return tuple(out)

    def leader(self, topic: str, partition: int) -> ServedPartition:
        """The partition, its log created on first use (a topic that exists has all its partitions).

        Raises:
            InvalidTopicError / WrongTopicKindError / UnknownTopicError / WrongPartitionError.
        """
        if self._kind(topic) is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist on this broker")
        validate_partition(topic, partition, self.logs.partition_count(topic))
        return LocalPartition(topic, partition, self.logs.get_or_create_log(topic, partition, TopicKind.KAFKA))

    def create_topic(self, topic: str, partitions: int | None = None, replication_factor: int | None = None) -> bool:
        """Create every partition's log of a new Kafka topic (``partitions``, by default ``num.partitions`` or
        ``topic.partition.count.map``; the replication factor is 1 whatever is asked); True: it can be used
        at once.

        Raises:
            TopicCreationRefusedError: auto-creation is off, or a creation limit is reached.
            WrongTopicKindError: the topic is a 0.7 topic.
        """
        if self._kind(topic) is None:
            for p in range(partitions or self.logs.partition_count(topic)):
                self.logs.get_or_create_log(topic, p, TopicKind.KAFKA)
        return True
