"""Where a replicated partition is served now: TOPIC_METADATA answers, cached per topic.

Every client of a replicated topic (producer, consumers, consumer groups, the
loader) finds its partitions' current leaders here. The answers come from any
reachable broker (each broker with ZooKeeper answers TOPIC_METADATA from its view
of the partition states); a topic that the answer lists with no partitions is
not replicated (``topic`` returns None) and is served the Kafka 0.7 way, by the
broker that holds it.

A partition the cached answer does not list (the topic grew: ``ingest topics alter``) is asked of a
broker once more by :meth:`ReplicaMetadata.leader` before it is refused.

Failover: a client that gets NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE or a
connection failure from a leader calls :meth:`ReplicaMetadata.leader` with
``refresh=True`` (or :meth:`wait_for_leader`, which also waits out an election,
bounded by a deadline) and retries at the same byte offset: offsets are the same
on every replica.

Concurrency: thread-safe; the cache is replaced whole under a lock, requests to
brokers are made outside it.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from ingest.client.discovery import BrokerAddress
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import BrokerUnavailableError, IngestError, LeaderNotAvailableError
from ingest.wire import protocol
from ingest.wire.connection import BrokerConnection
from ingest.wire.errors import check

log = logging.getLogger(__name__)

Bootstrap = Callable[[], Iterable[BrokerAddress]]


class ReplicaMetadata:
    """A cache of TOPIC_METADATA answers.

    Args:
        bootstrap: returns the brokers to ask (e.g. ``lambda: discovery.brokers().values()``);
            the brokers named in the last answer are asked too.
        timeout_s: socket timeout of a metadata request.
        max_age_s: how long an answer is used before it is asked again.
    """

    def __init__(self, bootstrap: Bootstrap, *, timeout_s: float = 10.0, max_age_s: float = 60.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[float, protocol.ReplicatedTopic | None]] = {}
        self._brokers: dict[int, BrokerAddress] = {}

    def _candidates(self) -> list[BrokerAddress]:
        seen: dict[tuple[str, int], BrokerAddress] = {}
        for a in list(self._bootstrap()) + list(self._brokers.values()):
            seen.setdefault((a.host, a.port), a)
        return list(seen.values())

    def _ask(self, topics: tuple[str, ...]) -> protocol.TopicMetadataResponse:
        errors = []
        for addr in self._candidates():
            conn = BrokerConnection(addr.host, addr.port, timeout_s=self._timeout_s, broker_id=addr.broker_id)
            try:
                resp = conn.request(protocol.TopicMetadataRequest(topics).encode(), protocol.TopicMetadataResponse)
                check(resp.error, f"TOPIC_METADATA from {conn!r}")
                return resp
            except IngestError as exc:
                errors.append(f"{addr}: {exc}")
            finally:
                conn.close()
        raise BrokerUnavailableError("no broker answered TOPIC_METADATA: " + ("; ".join(errors) or "none known"))

    def refresh(self, topics: Iterable[str] = ()) -> list[str]:
        """Ask a broker about ``topics`` (every replicated topic when empty) and cache the answer;
        returns the replicated topics the answer lists (sorted).

        Raises:
            BrokerUnavailableError: no broker answered.
        """
        names = tuple(topics)
        resp = self._ask(names)
        now = self._clock.monotonic()
        with self._lock:
            self._brokers = {b: BrokerAddress(b, h, p) for b, h, p in resp.brokers}
            listed = {t.name for t in resp.topics}
            for t in resp.topics:
                self._topics[t.name] = (now, t if t.partitions else None)
            for name in names:
                if name not in listed:
                    self._topics[name] = (now, None)
        return sorted(t.name for t in resp.topics if t.partitions)

    def topics(self) -> list[str]:
        """Every replicated topic the cluster has now (a fresh answer), sorted."""
        return self.refresh(())

    def topic(self, name: str, *, refresh: bool = False) -> protocol.ReplicatedTopic | None:
        """The replicated topic's partitions, or None if ``name`` is not a replicated topic."""
        entry = self._topics.get(name)
        if refresh or entry is None or self._clock.monotonic() - entry[0] >= self._max_age_s:
            self.refresh((name,))
            entry = self._topics[name]
        return entry[1]

    def is_replicated(self, name: str) -> bool:
        return self.topic(name) is not None

    def broker(self, broker_id: int) -> BrokerAddress | None:
        return self._brokers.get(broker_id)

    def leader(self, topic: str, partition: int, *, refresh: bool = False) -> BrokerAddress:
        """The address of the partition's current leader.

        Raises:
            LeaderNotAvailableError: the partition has no leader now, or its leader is not registered.
            BrokerUnavailableError: no broker answered the metadata request.
            ValueError: ``topic`` is not replicated or has no such partition.
        """
        t = self.topic(topic, refresh=refresh)
        part = None if t is None else next((p for p in t.partitions if p.partition == partition), None)
        if t is not None and part is None and not refresh:
            # a cached answer: the topic may have grown since (partitions added), so it is asked of a
            # broker once more before the partition is refused
            t = self.topic(topic, refresh=True)
            part = None if t is None else next((p for p in t.partitions if p.partition == partition), None)
        if t is None:
            raise ValueError(f"topic {topic!r} is not a replicated topic")
        if part is None:
            raise ValueError(f"replicated topic {topic!r} has no partition {partition} "
                             f"(it has 0..{len(t.partitions) - 1})")
        addr = self._brokers.get(part.leader) if part.leader >= 0 else None
        if addr is None:
            raise LeaderNotAvailableError(
                f"{topic}-{partition} has no live leader now (leader {part.leader}, in-sync {list(part.isr)})")
        return addr

    def wait_for_leader(self, topic: str, partition: int, deadline: float, *,
                        backoff_s: float = 0.1, max_backoff_s: float = 1.0) -> BrokerAddress:
        """:meth:`leader` with a fresh answer, retried with a doubling back-off until ``deadline``
        (monotonic seconds) while there is no leader or no broker answers; then the last error."""
        delay = backoff_s
        while True:
            try:
                return self.leader(topic, partition, refresh=True)
            except (LeaderNotAvailableError, BrokerUnavailableError) as exc:
                now = self._clock.monotonic()
                if now + delay > deadline:
                    raise
                log.debug("waiting for a leader of %s-%d: %s", topic, partition, exc)
                self._clock.sleep(delay)
                delay = min(max_backoff_s, delay * 2)

    def invalidate(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)
