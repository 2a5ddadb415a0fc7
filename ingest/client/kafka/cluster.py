"""A Kafka-protocol client's view of the cluster: bootstrap, Metadata, and one connection per broker.

Bootstrap (Kafka's ``bootstrap.servers``): Metadata is asked of any reachable address, the known
brokers first and the bootstrap servers after them, each tried once per refresh (until the caller's
deadline; at least one); an address whose Metadata failed is asked after the others until it answers
again, so a dead leader is not asked first by every refresh; the answer names
every broker (node id, host, port) and, for each topic asked, its partitions with leader, leader
epoch, replicas and in-sync replicas. Every request then goes to the partition's leader over that
broker's one :class:`~ingest.wire.kafka.connection.KafkaConnection`, which agrees API versions with
it when it connects.

Refresh: the metadata of a topic is read again when it is older than ``metadata.max.age.ms``, when
a caller reports a leader error (:meth:`KafkaCluster.invalidate`: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, a fenced or unknown leader epoch) or a failed
connection, when a caller asks for a partition beyond those cached (the topic may have grown: it is
read once more before the partition is refused), and while a topic is unknown or a partition has no
leader, within the caller's deadline. Refreshes that fail or find no leader are spaced by
:class:`Backoff` (``retry.backoff.ms`` doubling to ``retry.backoff.max.ms``), as Kafka's ``Metadata``
backs off.

Concurrency: not thread-safe; a client (producer or fetcher) owns its cluster view and uses it from
one thread at a time.
"""
from __future__ import annotations

import logging
from typing import NamedTuple, Sequence

from ingest.clock import Clock
from ingest.client.kafka.config import sasl_login, ssl_context_of
from ingest.config import Config
from ingest.errors import (BrokerUnavailableError, IngestError, InvalidTopicError, LeaderNotAvailableError,
                           MalformedResponseError, UnknownTopicError, WrongPartitionError)
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire.errors import KafkaErrorCode, kafka_error_for, kafka_error_name
from ingest.wire.kafka.connection import KafkaConnection
from ingest.wire.kafka.metadata import MetadataRequest, MetadataRequestTopic

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log, interval_s=60.0)

METADATA_API_KEY = 3
MIN_METADATA_VERSION = 1
"""v1: a null topic list means all topics and an empty one none (v0's empty list means all)."""

REFRESH_CODES = frozenset({KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, KafkaErrorCode.LEADER_NOT_AVAILABLE,
                           KafkaErrorCode.NOT_LEADER_OR_FOLLOWER, KafkaErrorCode.FENCED_LEADER_EPOCH,
                           KafkaErrorCode.UNKNOWN_LEADER_EPOCH})
"""Partition errors that mean the client's metadata is stale: read it again and retry (Kafka's
``InvalidMetadataException`` subclasses)."""


class Node(NamedTuple):
    """One broker as Metadata names it."""

    node_id: int
    host: str
    port: int


class PartitionInfo(NamedTuple):
    """One partition as Metadata describes it; ``leader`` -1 while it has none."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int


class Backoff:
    """Exponential back-off: ``retry.backoff.ms``, doubling per attempt, capped at ``retry.backoff.max.ms``."""

    def __init__(self, base_ms: int, max_ms: int) -> None:
        self.base_ms, self.max_ms = base_ms, max(max_ms, base_ms)

    def delay_s(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (1 for the first retry)."""
        return min(self.max_ms, self.base_ms * (2 ** min(max(attempt - 1, 0), 30))) / 1000.0


class KafkaCluster:
    """Metadata and connections of one Kafka-protocol cluster.

    Args:
        config: a Kafka client config (:mod:`ingest.client.kafka.config`).
        clock: time for deadlines and back-off.
        allow_auto_create: Metadata's ``allow_auto_topic_creation`` (a producer's, or
            ``allow.auto.create.topics`` of a consumer).
    """

    def __init__(self, config: Config, clock: Clock, *, allow_auto_create: bool) -> None:
        self.bootstrap: tuple[tuple[str, int], ...] = config["bootstrap.servers"]
        self.client_id: str = config["client.id"]
        self.sasl = sasl_login(config)
        self.timeout_s = config["request.timeout.ms"] / 1000.0
        self.ssl_context = ssl_context_of(config)   # security.protocol=SSL or SASL_SSL: TLS
        self.max_age_s = config["metadata.max.age.ms"] / 1000.0
        self.backoff = Backoff(config["retry.backoff.ms"], config["retry.backoff.max.ms"])
        self.clock = clock
        self.allow_auto_create = allow_auto_create
        self.nodes: dict[int, Node] = {}
        self.cluster_id: str | None = None
        self._topics: dict[str, tuple[PartitionInfo, ...]] = {}
        self._read_at: dict[str, float] = {}
        self._stale: set[str] = set()
        self._connections: dict[int, KafkaConnection] = {}
        self._bootstrap_connections: dict[tuple[str, int], KafkaConnection] = {}
        self._failed_refreshes = 0
        self._next_refresh_at = 0.0
        self._unanswered: dict[tuple[str, int], float] = {}   # address -> when its Metadata last failed

    # --- connections --------------------------------------------------------------------------

    def connection(self, node_id: int) -> KafkaConnection:
        """The connection to broker ``node_id`` (as the latest Metadata names it).

        Raises:
            BrokerUnavailableError: Metadata named no such broker.
        """
        node = self.nodes.get(node_id)
        if node is None:
            raise BrokerUnavailableError(f"broker {node_id} is not in the cluster's metadata (brokers: "
                                         f"{sorted(self.nodes)})")
        conn = self._connections.get(node_id)
        if conn is None or (conn.host, conn.port) != (node.host, node.port):
            if conn is not None:
                conn.close()
            conn = self._connections[node_id] = KafkaConnection(node.host, node.port, client_id=self.client_id,
                                                                timeout_s=self.timeout_s, node_id=node_id,
                                                                ssl_context=self.ssl_context, sasl=self.sasl)
        return conn

    def settle(self) -> None:
        """Wait until every broker has read the unanswered requests (acks-0 Produce) sent to it
        (:meth:`~ingest.wire.kafka.connection.KafkaConnection.settle`); a broker that cannot be reached is
        logged and skipped: what it had not read is lost, as acks 0 allows."""
        for conn in self._connections.values():
            try:
                conn.settle()
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                log.warning("could not confirm that %r read the last acks-0 requests: %s", conn, exc)

    def close(self) -> None:
        for conn in [*self._connections.values(), *self._bootstrap_connections.values()]:
            conn.close()
        self._connections.clear()
        self._bootstrap_connections.clear()

    # --- metadata -------------------------------------------------------------------------------

    def partitions(self, topic: str, deadline: float) -> tuple[PartitionInfo, ...]:
        """The partitions of ``topic``, read again if stale; waits (refreshing with back-off) while the
        topic is unknown or a partition has no leader, until ``deadline`` (a ``clock.monotonic()`` time).

        Raises:
            UnknownTopicError: the topic still does not exist at the deadline.
            LeaderNotAvailableError: a partition still has no leader at the deadline.
            InvalidTopicError: the broker refuses the name (INVALID_TOPIC_EXCEPTION: invalid, or a topic
                of the other kind, docs/kafka-protocol.md D2).
            BrokerUnavailableError: no broker or bootstrap server answered Metadata by the deadline.
        """
        while True:
            now = self.clock.monotonic()
            known = self._topics.get(topic)
            fresh = (known is not None and topic not in self._stale
                     and now - self._read_at.get(topic, 0.0) < self.max_age_s)
            if fresh and all(p.leader >= 0 for p in known):
                return known
            error: IngestError | None = None
            try:
                self._refresh_once(topic, deadline)
                known = self._topics.get(topic)
                if known is not None and all(p.leader >= 0 for p in known):
                    return known
                error = self._topic_error(topic)
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                error = exc
            if self.clock.monotonic() >= deadline:
                raise error
            self._wait_before_refresh(deadline)

    def partition(self, topic: str, partition: int, deadline: float) -> PartitionInfo:
        """One partition of ``topic`` with a leader (see :meth:`partitions`).

        Raises:
            WrongPartitionError: ``partition`` is not one of the topic's, naming the range.
        """
        read_at = self._read_at.get(topic)
        parts = self.partitions(topic, deadline)
        if partition >= len(parts) and self._read_at.get(topic) == read_at:   # answered from the cache
            # the topic may have grown since it was read (partitions added): a partition beyond the
            # cached ones is asked of the cluster once more before it is refused, as Kafka's producer
            # requests a metadata update for a partition it does not know
            self.invalidate(topic)
            parts = self.partitions(topic, deadline)
        if not 0 <= partition < len(parts):
            raise WrongPartitionError(f"topic {topic!r} has partitions 0-{len(parts) - 1}; there is no "
                                      f"partition {partition}")
        return parts[partition]

    def topic_names(self, deadline: float, *, include_internal: bool = False) -> list[str]:
        """Every topic of the cluster (Metadata with a null topic list, v1+), its partitions read too
        (:meth:`partitions` then answers from them). Tried on one broker or bootstrap server after
        another until one answers or ``deadline`` passes. Internal topics (``__consumer_offsets``:
        Metadata's ``is_internal``) only with ``include_internal``, as Kafka's consumers leave them out
        (``exclude.internal.topics``).

        Raises:
            BrokerUnavailableError: no broker or bootstrap server answered Metadata.
        """
        tried: list[str] = []
        for conn in self._candidates():
            if tried and self.clock.monotonic() >= deadline:
                break
            try:
                version = conn.version(METADATA_API_KEY, lo=MIN_METADATA_VERSION)
                answer = conn.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), version)
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                tried.append(f"{conn!r} ({exc})")
                self._unanswered[(conn.host, conn.port)] = self.clock.monotonic()
                _refusals.warning(f"{conn.host}:{conn.port}", "metadata", "Metadata from %r failed: %s", conn, exc)
                continue
            self._unanswered.pop((conn.host, conn.port), None)
            self._apply(answer, ())
            self._failed_refreshes = 0
            return sorted(t.name for t in answer.topics
                          if t.name in self._topics and (include_internal or not t.is_internal))
        raise BrokerUnavailableError(f"no broker answered Metadata; tried {'; '.join(tried) or 'nothing'} "
                                     f"(bootstrap.servers {_servers(self.bootstrap)})")

    def known_partitions(self, topic: str) -> tuple[PartitionInfo, ...]:
        """The partitions of ``topic`` as Metadata last described them (no request; () when unknown)."""
        return self._topics.get(topic, ())

    def invalidate(self, topic: str | None = None) -> None:
        """The metadata of ``topic`` (all topics when None) is stale: the next use reads it again."""
        self._stale.update(self._topics if topic is None else (topic,))

    def _topic_error(self, topic: str) -> IngestError:
        known = self._topics.get(topic)
        if known is None:
            return UnknownTopicError(f"topic {topic!r} does not exist on the cluster at "
                                     f"{_servers(self.bootstrap)} (Metadata answered UNKNOWN_TOPIC_OR_PARTITION)")
        leaderless = [p.partition for p in known if p.leader < 0]
        return LeaderNotAvailableError(f"topic {topic!r}: partitions {leaderless} have no leader")

    def _wait_before_refresh(self, deadline: float) -> None:
        self._failed_refreshes += 1
        delay = self.backoff.delay_s(self._failed_refreshes)
        self.clock.sleep(max(0.0, min(delay, deadline - self.clock.monotonic())))

    def _refresh_once(self, topic: str, deadline: float) -> None:
        """Ask Metadata about the topics in use (and ``topic``) of one broker that answers."""
        names = sorted({topic, *self._topics})
        tried: list[str] = []
        for conn in self._candidates():
            if tried and self.clock.monotonic() >= deadline:
                break
            try:
                version = conn.version(METADATA_API_KEY, lo=MIN_METADATA_VERSION)
                request = MetadataRequest(topics=tuple(MetadataRequestTopic(n) for n in names),
                                          allow_auto_topic_creation=self.allow_auto_create)
                answer = conn.call(request, version)
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                tried.append(f"{conn!r} ({exc})")
                self._unanswered[(conn.host, conn.port)] = self.clock.monotonic()
                _refusals.warning(f"{conn.host}:{conn.port}", "metadata", "Metadata from %r failed: %s", conn, exc)
                continue
            self._unanswered.pop((conn.host, conn.port), None)
            self._apply(answer, names)
            self._failed_refreshes = 0
            return
        raise BrokerUnavailableError(f"no broker answered Metadata; tried {'; '.join(tried) or 'nothing'} "
                                     f"(bootstrap.servers {_servers(self.bootstrap)})")

    def _candidates(self) -> list[KafkaConnection]:
        """Known brokers, then bootstrap servers; those whose Metadata failed last go after the others
        (the longest ago first), so that a dead broker is not the only one a refresh with little time
        left asks (a refresh asks at least one address even past its deadline)."""
        out = self._addresses()
        return sorted(out, key=lambda c: self._unanswered.get((c.host, c.port), float("-inf")))

    def _addresses(self) -> list[KafkaConnection]:
        out = [self.connection(node_id) for node_id in sorted(self.nodes)]
        for host, port in self.bootstrap:
            if any((c.host, c.port) == (host, port) for c in out):
                continue
            conn = self._bootstrap_connections.get((host, port))
            if conn is None:
                conn = self._bootstrap_connections[(host, port)] = KafkaConnection(
                    host, port, client_id=self.client_id, timeout_s=self.timeout_s, ssl_context=self.ssl_context,
                    sasl=self.sasl)
            out.append(conn)
        return out

    def _apply(self, answer, asked: Sequence[str]) -> None:
        now = self.clock.monotonic()
        self.nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in answer.brokers}
        self.cluster_id = answer.cluster_id
        for gone in set(self._connections) - set(self.nodes):
            self._connections.pop(gone).close()
        for t in answer.topics:
            if t.error_code == KafkaErrorCode.INVALID_TOPIC_EXCEPTION:
                raise InvalidTopicError(f"the cluster refuses topic {t.name!r}: INVALID_TOPIC_EXCEPTION (17): "
                                        "not a valid name, or a topic of the other kind (docs/kafka-protocol.md)")
            if t.error_code in (KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, KafkaErrorCode.LEADER_NOT_AVAILABLE) \
                    and not t.partitions:
                self._topics.pop(t.name, None)
                self._read_at.pop(t.name, None)
                continue
            if t.error_code not in (KafkaErrorCode.NONE, KafkaErrorCode.LEADER_NOT_AVAILABLE):
                raise kafka_error_for(t.error_code, f"Metadata of topic {t.name!r}")
            parts = sorted(t.partitions, key=lambda p: p.partition_index)
            if [p.partition_index for p in parts] != list(range(len(parts))):
                raise MalformedResponseError(f"Metadata of topic {t.name!r} lists partitions "
                                             f"{[p.partition_index for p in parts]}, not 0..n-1")
            self._topics[t.name] = tuple(
                PartitionInfo(t.name, p.partition_index,
                              p.leader_id if p.leader_id in self.nodes else -1, p.leader_epoch,
                              tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
                for p in parts)
            self._read_at[t.name] = now
            self._stale.discard(t.name)
        for name in asked:
            if name not in {t.name for t in answer.topics}:
                log.debug("Metadata did not answer about topic %r", name)


def needs_refresh(code: int) -> bool:
    """True for a partition error after which the client reads the metadata again and retries."""
    return code in REFRESH_CODES


def describe_code(code: int) -> str:
    return f"{kafka_error_name(code)} ({code})"


def _servers(servers: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{h}:{p}" for h, p in servers)
