"""The cluster as the Kafka listener sees it with ZooKeeper: Kafka topics are cluster topics (D2, D3, D4).

- **Brokers**: the live brokers (``/brokers/ids``) that registered a Kafka endpoint for the listener the
  request came in on (``/brokers/endpoints/[id]``); the controller from ``/controller``; the cluster id from
  ``/cluster/id``.
- **Topics**: the topics whose assignment in ZooKeeper says ``"format":"kafka"``; per partition the
  leader, replicas, in-sync replicas and leader epoch of its state, and as offline replicas those whose
  broker is not alive or cannot write (Kafka's controller counts both). A 0.7 topic (replicated, a local
  0.7 log, or registered by 0.7 brokers) is the other kind: INVALID_TOPIC_EXCEPTION, never created over.
- **Leaders**: a partition this broker leads is served through its
  :class:`~ingest.broker.partition.ReplicatedPartition` (:class:`LedPartition`); a replica that does not
  lead answers NOT_LEADER_OR_FOLLOWER, a partition without leader LEADER_NOT_AVAILABLE.
- **Deletion**: a topic marked for deletion (``/admin/delete_topics``) is no longer listed, and is
  UNKNOWN_TOPIC_OR_PARTITION to every request, while its replicas are being deleted.
- **Configs**: a partition's ``min.insync.replicas`` is its topic's (``/config/topics``), else the broker's;
  :attr:`ZkCluster.admin` (:mod:`ingest.broker.kafka.zk_admin`) serves the admin API.
- **Creation**: a new topic's assignment (``num.partitions``, ``default.replication.factor`` capped by the
  live brokers, ``(i + j) mod n``) is written on the coordination thread (never a network thread:
  :class:`~ingest.errors.NeedsZooKeeperError` sends the request there); the controller elects its
  leaders, and until then it is answered LEADER_NOT_AVAILABLE.

Thread-safety: reads go to the replication view's snapshots; any thread may call.
"""
from __future__ import annotations

import logging

from kazoo.exceptions import KazooException, NoNodeError

from ingest import znodes
from ingest.broker import topic_config
from ingest.broker.kafka import versions
from ingest.broker.kafka.cluster import Appended, BrokerNode, PartitionView
from ingest.broker.kafka.zk_admin import ZkTopicAdmin
from ingest.broker.listeners import parse_protocol_map
from ingest.broker.partition import Role
from ingest.broker.topic_kind import TopicKind, wrong_kind
from ingest.broker.topics import validate_partition, validate_topic
from ingest.errors import (LeaderNotAvailableError, NeedsZooKeeperError, NotLeaderForPartitionError,
                           TopicCreationRefusedError, UnknownTopicError)
from ingest.wire.errors import KafkaErrorCode

log = logging.getLogger(__name__)


class LedPartition:
    """A partition of a Kafka topic this broker leads, as the Kafka handlers use it (ServedPartition)."""

    __slots__ = ("part", "topic", "partition", "log", "min_isr", "replicas")

    def __init__(self, part, min_isr: int, replicas) -> None:
        self.part = part
        self.topic, self.partition, self.log = part.topic, part.partition, part.log
        self.min_isr = min_isr
        self.replicas = replicas   # the ReplicaManager: in-sync set changes are its thread's

    def leader_epoch(self) -> int:
        return self.part.epoch

    def high_watermark(self) -> int:
        return self.part.read_limit()

    def append(self, batch, acks: int) -> Appended:
        """Append as leader; for acks=-1 the outcome tells when the in-sync replicas have it (or why not)."""
        info, generation = self.part.append_records(batch, acks, self.min_isr)
        if acks != -1:
            return Appended(info)
        end = info.last_offset + 1

        def outcome():
            return self.part.ack_outcome(end, generation, self.min_isr)

        return Appended(info, None if outcome() is True else outcome)

    def append_copied(self, records, acks: int, expected: int) -> Appended:
        """AppendAt as leader: batches with their offsets, only at ``expected`` (the outcome as :meth:`append`)."""
        info, generation = self.part.append_copied(records, acks, self.min_isr, expected)
        if acks != -1:
            return Appended(info)
        end = info.last_offset + 1

        def outcome():
            return self.part.ack_outcome(end, generation, self.min_isr)

        return Appended(info, None if outcome() is True else outcome)

    def follower_fetch(self, replica_id: int, epoch: int, offset: int) -> int:
        """A follower fetches at ``offset`` (its log end) in ``epoch``: recorded; returns the limit of what it
        may read (the log end, not the high watermark).

        Raises:
            NotLeaderForPartitionError / StaleLeaderEpochError: not the leader, or another epoch.
        """
        hw = self.part.hw
        _hw, _start, end, wants = self.part.on_follower_fetch(replica_id, epoch, offset)
        if wants:
            self.replicas.wants_isr_check()
        if _hw > hw:
            self.part.wake()   # consumers waiting for the high watermark
        return end

    def leader_throttled(self, replica_id: int) -> bool:
        """The leader's replication throttle holds back ``replica_id``'s fetch of this partition now: the
        partition is throttled here, the replica is not in sync, and the quota is exceeded (Kafka's
        ``shouldLeaderThrottle``)."""
        q = self.replicas.throttles.leader
        return q.is_throttled(self.topic, self.partition) and replica_id not in self.part.isr and q.is_exceeded()

    def record_replicated(self, n: int) -> None:
        """``n`` bytes of this partition sent to a follower: counted by the leader's quota when throttled."""
        q = self.replicas.throttles.leader
        if q.is_throttled(self.topic, self.partition):
            q.record(n)

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch', end offset)`` from this leader's epoch history."""
        return self.part.epochs.end_offset_for(epoch, self.log.log_end)


class ZkCluster:
    """The Kafka listener's cluster with ZooKeeper (see the module docstring).

    Args:
        config: the broker's config (``num.partitions``, ``default.replication.factor``, ...).
        broker_id, cluster_id: this broker and the cluster's id (``/cluster/id``).
        logs: the LogManager (a name it holds a 0.7 log of is a 0.7 topic).
        replicas: the ReplicaManager (its view, its partitions, its ZooKeeper calls).
        coordinated: the coordination thread (where ZooKeeper may be called).
    """

    def __init__(self, config, broker_id: int, cluster_id: str, logs, replicas, coordinated) -> None:
        self.config = config
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.logs = logs
        self.replicas = replicas
        self.view = replicas.view
        self.coordinated = coordinated
        self.admin = ZkTopicAdmin(config, self.view, replicas, logs, coordinated)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The Kafka topic's configs (its overrides of the broker's settings), as this broker's watch has them."""
        return self.view.topic_configs.get(topic, {})

    def controller_id(self) -> int:
        return self.view.controller_id

    def brokers(self, listener: str) -> tuple[BrokerNode, ...]:
        out = []
        endpoints = self.view.endpoints
        for bid in sorted(self.view.brokers):
            e = endpoints.get(bid, {}).get(listener)
            if e is not None:
                out.append(BrokerNode(bid, e[0], e[1]))
        return tuple(out)

    def topic_names(self) -> list[str]:
        return sorted(t for t in self.view.assignments if self.view.is_kafka(t) and not self.view.is_deleting(t))

    def _check_kind(self, topic: str) -> bool:
        """True for a Kafka cluster topic, False for a name not known here as either kind.

        Raises:
            InvalidTopicError: a bad name. WrongTopicKindError: a 0.7 topic.
        """
        validate_topic(topic)
        if self.view.is_deleting(topic):
            raise UnknownTopicError(f"topic {topic!r} is marked for deletion")
        if self.view.is_kafka(topic):
            return True
        if self.view.is_replicated(topic) or self.logs.topic_kind(topic) is not None:
            raise wrong_kind(topic, TopicKind.V07)
        return False

    def describe(self, topic: str) -> tuple[PartitionView, ...] | None:
        if not self._check_kind(topic):
            return None
        live = set(self.view.brokers)
        out = []
        for p, replicas in sorted(self.view.assignments.get(topic, {}).items()):
            st = self.view.state(topic, p)
            cannot = self.view.cannot_write(topic, p)
            offline = tuple(r for r in replicas if r not in live or r in cannot)
            if st is None or st.leader < 0 or st.leader not in live:
                out.append(PartitionView(p, -1, -1 if st is None else st.leader_epoch, tuple(replicas),
                                         () if st is None else tuple(st.isr), offline,
                                         KafkaErrorCode.LEADER_NOT_AVAILABLE))
            else:
                out.append(PartitionView(p, st.leader, st.leader_epoch, tuple(replicas), tuple(st.isr), offline))
        return tuple(out)

    def leader(self, topic: str, partition: int) -> LedPartition:
        """The partition if this broker leads it now.

        Raises:
            InvalidTopicError / WrongTopicKindError / UnknownTopicError / WrongPartitionError,
            NotLeaderForPartitionError / LeaderNotAvailableError.
        """
        if not self._check_kind(topic):
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        assignment = self.view.assignments.get(topic, {})
        validate_partition(topic, partition, len(assignment))
        part = self.replicas.partition(topic, partition, TopicKind.KAFKA)
        if part is None or part.role is not Role.LEADER:
            st = self.view.state(topic, partition)
            if st is None or st.leader < 0:
                raise LeaderNotAvailableError(f"{topic}-{partition} has no leader now")
            if st.leader != self.broker_id:
                raise NotLeaderForPartitionError(f"broker {self.broker_id} does not lead {topic}-{partition}; broker "
                                                 f"{st.leader} does (leader epoch {st.leader_epoch})")
            raise LeaderNotAvailableError(f"{topic}-{partition}: broker {self.broker_id} is becoming its leader")
        return LedPartition(part, topic_config.min_insync_replicas(self.view.topic_configs.get(topic),
                                                                   self.replicas.min_isr), self.replicas)

    def create_topic(self, topic: str, partitions: int | None = None, replication_factor: int | None = None) -> bool:
        """Write a new Kafka topic's assignment (on the coordination thread); False: its leaders are being
        elected (the caller answers LEADER_NOT_AVAILABLE). ``partitions`` and ``replication_factor`` default
        to the broker's keys for auto-created topics.

        Raises:
            NeedsZooKeeperError: on a network thread (the request is served again on the coordination thread).
            WrongTopicKindError: ZooKeeper knows the name as a 0.7 topic.
            TopicCreationRefusedError: too few live brokers for ``min.insync.replicas`` to be reachable.
            CoordinationUnavailableError: ZooKeeper did not answer in time.
        """
        if self._check_kind(topic):
            return False
        if not self.coordinated.on_worker():
            raise NeedsZooKeeperError(f"creating topic {topic!r} needs ZooKeeper")
        deadline = self.coordinated.deadline
        zk = self.replicas.zk
        client = self.replicas.client
        try:
            data, stat = zk.call(deadline, client.get_async, znodes.topic_dir(topic), what=f"read topic {topic}")
            if znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT:
                return False            # created a moment ago; the watch has not told us yet
            raise wrong_kind(topic, TopicKind.V07)   # a 0.7 topic (replicated, or registered by brokers)
        except NoNodeError:
            pass
        except (KazooException, ValueError) as exc:
            raise TopicCreationRefusedError(f"cannot read topic {topic!r} in ZooKeeper: {exc}") from exc
        cfg = self.config
        rf = max(1, replication_factor or cfg.get("default.replication.factor", 1))
        live = len(self.view.brokers)
        min_isr = self.replicas.min_isr
        if rf > 1 and 0 < live < rf and live < min_isr:
            raise TopicCreationRefusedError(
                f"cannot auto-create topic {topic!r}: with {live} live broker(s) it would get replication factor "
                f"{live} (default.replication.factor={rf}), below min.insync.replicas={min_isr}, so every acks=-1 "
                "write would be refused; start more brokers or create it with `ingest topics create`")
        self.replicas.create_topic(topic, partitions or self.logs.configured_partition_count(topic), rf, deadline,
                                   TopicKind.KAFKA)
        return False


def endpoints_value(listeners, protocol_map: str, principal: str | None = None, port07_keys: bool = False) -> bytes:
    """The ``/brokers/endpoints/[id]`` value of a broker's advertised Kafka listeners (:mod:`ingest.znodes`);
    ``protocol_map``: ``listener.security.protocol.map``, of which the listeners' entries are published;
    ``principal``: the broker's inter-broker principal. The private api keys served are registered too, those
    that carry the 0.7 port's broker-only requests (:data:`versions.PORT07_KEYS`) only with ``port07_keys``:
    when this broker refuses them on its 0.7 port or has none, so that other brokers and the mirror send
    them here; an unsecured broker keeps taking them on its 0.7 port (docs/replication.md)."""
    protocols = parse_protocol_map(protocol_map)
    private = tuple(k for k in versions.PRIVATE if port07_keys or k not in versions.PORT07_KEYS)
    return znodes.broker_endpoints_value([(e.name, e.host, e.port) for e in listeners.advertised],
                                         {e.name: protocols[e.name] for e in listeners.advertised},
                                         principal=principal, private_apis=private)

