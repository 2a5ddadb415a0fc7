"""The producer's view of the cluster: connections, broker liveness, partition lists, routes.

Routes: :meth:`ClusterView.route` decides where a batch of one key goes. A
*replicated* topic (TOPIC_METADATA lists its partitions, through the shared
:class:`~ingest.client.replica_metadata.ReplicaMetadata` cache) is routed by
partition number: the partitioner picks an index into the topic's partitions
``0..P-1``, so a key keeps its partition whichever broker leads it, and the batch
goes to that partition's current leader (:meth:`ClusterView.leader`, which logs
each leader change once at INFO). Any other topic is an *unreplicated* (Kafka 0.7)
topic, routed as below. When no broker answers TOPIC_METADATA (all down, or
brokers without replication) the topic is routed the 0.7 way and asked again
after :data:`UNANSWERED_RECHECK_S`.

Unreplicated topics: a topic's partitions are listed as sorted ``(broker_id, partition)`` pairs over
the live brokers, from each broker's METADATA answer (cached for
``topic.metadata.refresh.interval.ms``). A broker that does not know the topic
contributes its partition 0: sending there creates the topic with that broker's
``num.partitions`` (Kafka 0.7's producer bootstrapped new topics this way).

Waiting for a broker: :meth:`ClusterView.choose_within` waits, up to a
deadline, while discovery lists no broker at all (brokers re-registering after a
ZooKeeper outage), waking on the discovery change.

Liveness: a broker whose connection fails is *down* for a back-off that starts
at ``retry.backoff.ms`` and doubles up to ``reconnect.backoff.max.ms``; while
down its partitions are left out. The first request after the back-off tries it
again, and a success brings it back.

Concurrency: shared by the producer's callers and its sender thread. Mutations
take ``_lock``; the hot paths (a cached partition list, an existing connection)
read dicts without it (single dict reads are atomic under the GIL).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ingest.client.discovery import BrokerAddress, Discovery
from ingest.client.partitioner import Partitioner, load_partitioner
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import BrokerUnavailableError, ConfigError, LeaderNotAvailableError, UnknownTopicError
from ingest.wire import protocol
from ingest.wire.connection import BrokerConnection
from ingest.wire.errors import check

log = logging.getLogger(__name__)

UNANSWERED_RECHECK_S = 1.0
"""No broker answered TOPIC_METADATA: route the topic unreplicated, ask again after this long."""

ACKS_ALL_SOCKET_MARGIN_S = 5.0
"""acks=-1: the socket timeout is at least ``request.timeout.ms`` plus this (the broker's own answer
after its timeout must arrive before the client gives up on the connection)."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where one batch goes.

    Unreplicated topic: ``addr`` is the broker holding ``partition``. Replicated topic
    (``replicated``): ``partition`` is the topic's partition number and ``addr`` is None;
    the partition's current leader is looked up when sending.
    """

    partition: int
    addr: BrokerAddress | None = None
    replicated: bool = False


def partition_index(partitioner: Partitioner, spec: str | None, topic: str, key: bytes | str | None,
                    count: int) -> int:
    """The partitioner's index for ``key`` among ``count`` partitions, checked.

    A custom partitioner's bad answer must not wrap (-1 is a valid Python index) nor escape
    as IndexError from the async sender thread: it is refused as a config error, not retried.
    """
    index = partitioner.partition(key, count)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
        raise ConfigError(
            f"partitioner.class {spec!r} returned {index!r} for topic "
            f"{topic!r}; allowed is an int in [0, {count - 1}] ({count} partitions)")
    return index


def replicated_partition(partitioner: Partitioner, spec: str | None, topic: protocol.ReplicatedTopic,
                         key: bytes | str | None) -> int:
    """The partition number of a replicated topic for ``key``: an index into its partitions in
    partition order, so the same key maps to the same partition whichever brokers lead them."""
    numbers = sorted(p.partition for p in topic.partitions)
    return numbers[partition_index(partitioner, spec, topic.name, key, len(numbers))]


class ClusterView:
    """Connections (one per broker, reused), liveness and partition lists for one producer.

    Args:
        config: the producer's Config (reads socket, back-off, refresh and partitioner keys).
        nodelay: TCP_NODELAY for the connections (off for fire-and-forget producers).
    """

    def __init__(self, config: Config, discovery: Discovery, *, clock: Clock = SYSTEM_CLOCK,
                 nodelay: bool = True) -> None:
        self.config = config
        self.clock = clock
        self.nodelay = nodelay
        self.timeout_s = config["socket.timeout.ms"] / 1000.0
        if config["request.required.acks"] == -1:
            self.timeout_s = max(self.timeout_s, config["request.timeout.ms"] / 1000.0 + ACKS_ALL_SOCKET_MARGIN_S)
        self._discovery = discovery
        self._partitioner = load_partitioner(config["partitioner.class"])
        self._refresh_s = config["topic.metadata.refresh.interval.ms"] / 1000.0
        self._lock = threading.Lock()
        self._conns: dict[int, BrokerConnection] = {}
        self._down: dict[int, tuple[float, float]] = {}            # broker -> (until, backoff_s)
        self._meta: dict[int, tuple[float, dict[str, int]]] = {}   # broker -> (fetched_at, topic -> #parts)
        self._parts: dict[str, tuple[float, list[tuple[int, int]]]] = {}  # topic -> (valid_until, list)
        self.replicas = ReplicaMetadata(self._metadata_brokers,
                                        timeout_s=config["socket.timeout.ms"] / 1000.0,
                                        max_age_s=self._refresh_s, clock=clock)
        self._unanswered: dict[str, float] = {}                    # topic -> when to ask TOPIC_METADATA again
        self._leaders: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) -> (leader, epoch) used
        discovery.add_listener(self._on_change)

    def _metadata_brokers(self) -> list[BrokerAddress]:
        """Brokers to ask TOPIC_METADATA: the registered ones not marked down (a hung broker must not
        stall every lookup; the brokers of the last answer are asked after these)."""
        now = self.clock.monotonic()
        return [a for b, a in sorted(self._discovery.brokers().items()) if not self._is_down(b, now)]

    def _on_change(self) -> None:
        with self._lock:
            self._meta.clear()
            self._parts.clear()

    def conn(self, addr: BrokerAddress) -> BrokerConnection:
        conn = self._conns.get(addr.broker_id)  # lock-free fast path: the usual case
        if conn is not None and conn.port == addr.port and conn.host == addr.host:
            return conn
        with self._lock:
            conn = self._conns.get(addr.broker_id)
            if conn is None or (conn.host, conn.port) != (addr.host, addr.port):
                if conn is not None:
                    conn.close()
                conn = BrokerConnection(addr.host, addr.port, timeout_s=self.timeout_s, broker_id=addr.broker_id,
                                        nodelay=self.nodelay)
                self._conns[addr.broker_id] = conn
            return conn

    def _is_down(self, broker_id: int, now: float) -> bool:
        entry = self._down.get(broker_id)
        return entry is not None and entry[0] > now

    def mark_down(self, broker_id: int, exc: BaseException) -> None:
        now = self.clock.monotonic()
        max_s = self.config["reconnect.backoff.max.ms"] / 1000.0
        with self._lock:
            _, prev = self._down.get(broker_id, (0.0, 0.0))
            backoff = min(max_s, max(prev * 2, self.config["retry.backoff.ms"] / 1000.0, 0.05))
            self._down[broker_id] = (now + backoff, backoff)
            self._meta.pop(broker_id, None)
            self._parts.clear()
        log.warning("broker %d unavailable (%s); avoiding its partitions for %.2f s", broker_id, exc, backoff)

    def mark_up(self, broker_id: int) -> None:
        if broker_id in self._down:
            with self._lock:
                if self._down.pop(broker_id, None) is not None:
                    self._parts.clear()
                    log.info("broker %d is back", broker_id)

    def _broker_topics(self, addr: BrokerAddress, now: float) -> dict[str, int] | None:
        """This broker's topic -> #partitions, from a cached or fresh METADATA (None if unreachable)."""
        interval = self.config["topic.metadata.refresh.interval.ms"] / 1000.0
        with self._lock:
            cached = self._meta.get(addr.broker_id)
        if cached is not None and now - cached[0] < interval:
            return cached[1]
        conn = self.conn(addr)
        try:
            resp = conn.request(protocol.MetadataRequest(()).encode(), protocol.MetadataResponse)
            check(resp.error, f"METADATA from {conn!r}")
        except BrokerUnavailableError as exc:
            self.mark_down(addr.broker_id, exc)
            return None
        topics = {t.name: len(t.partitions) for t in resp.topics}
        self.mark_up(addr.broker_id)
        with self._lock:
            self._meta[addr.broker_id] = (now, topics)
        return topics

    def knows(self, topic: str) -> bool:
        """Whether a live broker's METADATA lists ``topic`` (a 0.7 topic that exists; cached as METADATA is)."""
        now = self.clock.monotonic()
        return any(topic in (self._broker_topics(addr, now) or {})
                   for bid, addr in sorted(self._discovery.brokers().items()) if not self._is_down(bid, now))

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """Sorted ``(broker_id, partition)`` of ``topic`` over the live brokers (not marked down).

        Cached per topic until the metadata refresh interval passes, a down broker's back-off
        ends, or the cluster view changes (discovery event, broker marked down or up).
        """
        now = self.clock.monotonic()
        cached = self._parts.get(topic)
        if cached is not None and now < cached[0]:
            return cached[1]
        out = self._compute_partitions(topic, now)
        with self._lock:
            downs = [until for until, _ in self._down.values() if until > now]
        self._parts[topic] = (min([now + self._refresh_s] + downs), out)
        return out

    def _compute_partitions(self, topic: str, now: float) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for bid, addr in sorted(self._discovery.brokers().items()):
            if self._is_down(bid, now):
                continue
            topics = self._broker_topics(addr, now)
            if topics is None:
                continue
            count = topics.get(topic, 0)
            out.extend((bid, p) for p in range(count)) if count else out.append((bid, 0))
        return out

    def choose(self, topic: str, key: bytes | str | None) -> tuple[BrokerAddress, int]:
        """A live ``(broker, partition)`` for ``key``, or BrokerUnavailableError at once if none is live."""
        parts = self.partitions(topic)
        if not parts:
            raise BrokerUnavailableError(f"no live broker to send topic {topic!r} to (brokers: {self._known()})")
        return self._pick(topic, key, parts)

    def choose_within(self, topic: str, key: bytes | str | None, deadline: float) -> tuple[BrokerAddress, int]:
        """As :meth:`choose`, but while discovery lists no broker at all, wait for one until ``deadline``.

        An empty registry is a moment in a ZooKeeper-registered cluster (brokers
        re-registering after their sessions expired), so it is waited out (woken by
        the discovery change) rather than failed. Brokers that are listed but down
        fail at once, as with :meth:`choose`: that is a failed attempt, retried with back-off.

        Raises:
            BrokerUnavailableError: no live partition (at once), or no broker registered by ``deadline``.
        """
        waited = False
        while True:
            seen = self._discovery.version
            if self._discovery.brokers():
                if waited:
                    log.info("brokers registered again: %s", self._known())
                return self.choose(topic, key)
            now = self.clock.monotonic()
            if now >= deadline or self._discovery.closed:
                raise BrokerUnavailableError(
                    f"no live broker to send topic {topic!r} to: none registered"
                    + (" within the send's time budget (delivery.timeout.ms)" if waited else ""))
            if not waited:
                log.warning("no broker registered; waiting up to %.1f s for one to send topic %r",
                            deadline - now, topic)
            waited = True
            self._discovery.wait_for_change(seen, deadline - now, self.clock)

    def _known(self) -> str:
        return ", ".join(str(b) for b in sorted(self._discovery.brokers().values())) or "none known"

    def _pick(self, topic: str, key: bytes | str | None, parts: list[tuple[int, int]]) -> tuple[BrokerAddress, int]:
        index = partition_index(self._partitioner, self.config["partitioner.class"], topic, key, len(parts))
        bid, partition = parts[index]
        addr = self._discovery.brokers().get(bid)
        if addr is None:  # vanished from the registry in between
            raise BrokerUnavailableError(f"broker {bid} left the cluster")
        return addr, partition

    # --- replicated topics ----------------------------------------------------------------

    def replicated(self, topic: str) -> protocol.ReplicatedTopic | None:
        """The topic's partitions if it is replicated; None for an unreplicated (Kafka 0.7) topic,
        or for now when no broker answers TOPIC_METADATA (asked again after a second)."""
        retry_at = self._unanswered.get(topic)
        if retry_at is not None and self.clock.monotonic() < retry_at:
            return None
        try:
            return self.replicas.topic(topic)
        except BrokerUnavailableError as exc:
            self._unanswered[topic] = self.clock.monotonic() + UNANSWERED_RECHECK_S
            log.debug("topic %r routed unreplicated for now: %s", topic, exc)
            return None

    def route(self, topic: str, key: bytes | str | None) -> Route:
        """Where a batch of ``key`` goes now (see the module doc); BrokerUnavailableError at once
        when an unreplicated topic has no live partition."""
        t = self.replicated(topic)
        if t is not None:
            return Route(replicated_partition(self._partitioner, self.config["partitioner.class"], t, key),
                         None, True)
        addr, partition = self.choose(topic, key)
        return Route(partition, addr)

    def route_within(self, topic: str, key: bytes | str | None, deadline: float) -> Route:
        """As :meth:`route`; an unreplicated topic waits for a broker as :meth:`choose_within` does."""
        t = self.replicated(topic)
        if t is not None:
            return Route(replicated_partition(self._partitioner, self.config["partitioner.class"], t, key),
                         None, True)
        addr, partition = self.choose_within(topic, key, deadline)
        return Route(partition, addr)

    def forget(self, topic: str) -> None:
        """Ask about ``topic`` afresh (it may have become replicated: a new topic auto-created by
        a broker with ``default.replication.factor`` > 1 is answered LEADER_NOT_AVAILABLE first)."""
        self.replicas.invalidate(topic)
        self._unanswered.pop(topic, None)
        with self._lock:
            self._parts.pop(topic, None)

    def leader(self, topic: str, partition: int, *, refresh: bool,
               deadline: float) -> tuple[BrokerAddress, protocol.PartitionReplicas]:
        """The current leader of a replicated partition and the partition's state.

        ``refresh``: ask TOPIC_METADATA afresh and wait out an election (no leader yet) until
        ``deadline``, backing off from ``retry.backoff.ms`` up to ``retry.backoff.max.ms``.

        Raises:
            LeaderNotAvailableError, BrokerUnavailableError: no leader (or no answer) by ``deadline``.
            UnknownTopicError: the topic is no longer replicated or lacks the partition.
        """
        try:
            addr = None
            if not refresh:
                try:
                    addr = self.replicas.leader(topic, partition)
                except LeaderNotAvailableError:
                    pass  # none known yet (a new topic): wait for the election below
            if addr is None:
                addr = self.replicas.wait_for_leader(
                    topic, partition, deadline, backoff_s=max(self.config["retry.backoff.ms"] / 1000.0, 0.01),
                    max_backoff_s=max(self.config["retry.backoff.max.ms"] / 1000.0, 0.01))
            t = self.replicas.topic(topic)
        except ValueError as exc:
            raise UnknownTopicError(f"cannot send to {topic}-{partition}: {exc}") from exc
        state = next((p for p in t.partitions if p.partition == partition), None) if t is not None else None
        if state is None:
            raise UnknownTopicError(f"cannot send to {topic}-{partition}: no longer a replicated partition")
        self._note_leader(topic, partition, state)
        return addr, state

    def _note_leader(self, topic: str, partition: int, state: protocol.PartitionReplicas) -> None:
        now = (state.leader, state.leader_epoch)
        before = self._leaders.get((topic, partition))
        if before == now:
            return
        self._leaders[(topic, partition)] = now
        if before is None:
            log.debug("%s-%d: leader is broker %d (epoch %d)", topic, partition, *now)
        elif before[0] != now[0]:
            log.info("%s-%d: leader moved from broker %d (epoch %d) to broker %d (epoch %d)",
                     topic, partition, *before, *now)

    def leaders(self, topic: str) -> list[tuple[int, int]] | None:
        """``(leader, partition)`` of each partition of a replicated topic (leader -1 while there is
        none), in partition order; None for an unreplicated topic."""
        t = self.replicated(topic)
        if t is None:
            return None
        return [(p.leader, p.partition) for p in sorted(t.partitions, key=lambda p: p.partition)]

    def sent_ok(self, broker_id: int, topic: str, replicated: bool = False) -> None:
        """A request to ``broker_id`` succeeded: it is up, and (unreplicated) it now knows ``topic``."""
        if broker_id in self._down:
            self.mark_up(broker_id)
        if replicated:
            return
        meta = self._meta.get(broker_id)
        if meta is None or topic not in meta[1]:
            with self._lock:  # the topic was just created there: learn its partitions
                self._meta.pop(broker_id, None)
                self._parts.pop(topic, None)
            self.replicas.invalidate(topic)

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()
