"""LeaderConsumer: pulls from replicated partitions at their current leaders, following failovers.

A replicated partition is served by its leader alone: another replica answers
NOT_LEADER_FOR_PARTITION (LEADER_NOT_AVAILABLE during an election) and a dead
leader cannot be reached at all. A LeaderConsumer asks
:class:`~ingest.client.replica_metadata.ReplicaMetadata` where the partition is
served now, makes the request there with a
:class:`~ingest.client.simple_consumer.SimpleConsumer` (one per leader address),
and on one of those failures refreshes the metadata and repeats the *same*
request on the new leader (byte offsets are identical on every replica, so the
offset stays valid), with a doubling back-off, until ``leader_wait_s`` has
passed since the first failure; then it raises the last error, naming the
partition and the wait.

Reads see only the high watermark: OFFSETS latest is the high watermark and a
fetch between it and the log end returns no message ("not yet there").

Concurrency: the per-address consumers are created under a lock; each
SimpleConsumer serialises its own requests, so a LeaderConsumer may be shared,
but threads wanting parallel fetches should each have their own.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, TypeVar

from ingest.client.discovery import BrokerAddress
from ingest.client.fetch_settings import DEFAULT_FETCH, FetchSettings
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.simple_consumer import FetchResult, SimpleConsumer
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import BrokerUnavailableError, LeaderNotAvailableError, NotLeaderForPartitionError
from ingest.records.message_batch import MessageBatch

log = logging.getLogger(__name__)

T = TypeVar("T")

FAILOVER_ERRORS = (NotLeaderForPartitionError, LeaderNotAvailableError, BrokerUnavailableError)
"""What a request to a partition's (former) leader fails with while leadership moves."""


def static_metadata(addresses: str, *, timeout_s: float = 10.0) -> ReplicaMetadata:
    """A :class:`ReplicaMetadata` bootstrapped from ``"host:port,host:port"`` (e.g. what a load plan ships).

    Raises:
        ValueError: an entry is not ``host:port``.
    """
    boot = []
    for item in (a.strip() for a in addresses.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not (port.isascii() and port.isdigit()):
            raise ValueError(f"broker address {item!r} is not host:port (in {addresses!r})")
        boot.append(BrokerAddress(-1, host, int(port)))
    if not boot:
        raise ValueError(f"no broker address in {addresses!r}; expected host:port,...")
    return ReplicaMetadata(lambda: boot, timeout_s=timeout_s)


class LeaderConsumer:
    """SimpleConsumer calls on the current leader of a replicated partition, retried across failovers.

    Args:
        metadata: where leaders are looked up.
        settings: the fetch size, its ceiling and the socket timeout of each per-leader
            SimpleConsumer, and ``leader_wait_s``: how long one call keeps retrying after its
            first failover error (:class:`~ingest.client.fetch_settings.FetchSettings`).
        timeout_s, fetch_size, max_fetch_size, leader_wait_s: override one field of ``settings`` each.
    """

    def __init__(self, metadata: ReplicaMetadata, *, timeout_s: float | None = None, fetch_size: int | None = None,
                 max_fetch_size: int | None = None, leader_wait_s: float | None = None,
                 settings: FetchSettings = DEFAULT_FETCH, clock: Clock = SYSTEM_CLOCK) -> None:
        self.metadata = metadata
        self.timeout_s = settings.socket_timeout_s if timeout_s is None else timeout_s
        self.fetch_size = settings.fetch_size if fetch_size is None else fetch_size
        self.max_fetch_size = settings.max_fetch_size if max_fetch_size is None else max_fetch_size
        self.leader_wait_s = settings.leader_wait_s if leader_wait_s is None else leader_wait_s
        self.clock = clock
        self._lock = threading.Lock()
        self._consumers: dict[tuple[str, int], SimpleConsumer] = {}

    def __repr__(self) -> str:
        return f"LeaderConsumer({', '.join(f'{h}:{p}' for h, p in self._consumers) or 'no leader yet'})"

    def consumer_at(self, addr: BrokerAddress) -> SimpleConsumer:
        """The (cached) SimpleConsumer of the broker at ``addr``."""
        key = (addr.host, addr.port)
        with self._lock:
            c = self._consumers.get(key)
            if c is None:
                c = self._consumers[key] = SimpleConsumer(
                    addr.host, addr.port, timeout_s=self.timeout_s, fetch_size=self.fetch_size,
                    max_fetch_size=self.max_fetch_size)
            return c

    def leader(self, topic: str, partition: int, *, refresh: bool = False) -> SimpleConsumer:
        """The SimpleConsumer of the partition's current leader (one metadata lookup, no retry)."""
        return self.consumer_at(self.metadata.leader(topic, partition, refresh=refresh))

    def call(self, topic: str, partition: int, fn: Callable[[SimpleConsumer], T]) -> T:
        """``fn(leader's consumer)``, repeated on the new leader after a failover error.

        Raises:
            NotLeaderForPartitionError, LeaderNotAvailableError, BrokerUnavailableError: still failing
                ``leader_wait_s`` after the first failure (the message names the partition and the wait).
            ValueError: ``topic`` is not replicated or has no such partition.
            anything else ``fn`` raises, at once.
        """
        deadline = None
        delay = 0.05
        refresh = False
        while True:
            try:
                return fn(self.leader(topic, partition, refresh=refresh))
            except FAILOVER_ERRORS as exc:
                now = self.clock.monotonic()
                if deadline is None:
                    deadline = now + self.leader_wait_s
                if now + delay > deadline:
                    raise type(exc)(f"{topic}-{partition}: no leader served the request within "
                                    f"{self.leader_wait_s:.1f} s: {exc}") from exc
                log.info("%s-%d: %s; looking up the leader again in %.2f s", topic, partition, exc, delay)
                self.metadata.invalidate(topic)
                self.clock.sleep(delay)
                delay = min(1.0, delay * 2)
                refresh = True

    # --- the SimpleConsumer calls, on the leader --------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None) -> FetchResult:
        return self.call(topic, partition, lambda c: c.fetch(topic, partition, offset, max_bytes))

    def fetch_batch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None, *,
                    strict: bool = True) -> MessageBatch:
        """:meth:`SimpleConsumer.fetch_batch` from the partition's current leader."""
        return self.call(topic, partition, lambda c: c.fetch_batch(topic, partition, offset, max_bytes, strict=strict))

    def fetch_raw(self, topic: str, partition: int, offset: int, max_bytes: int | None = None) -> bytes:
        return self.call(topic, partition, lambda c: c.fetch_raw(topic, partition, offset, max_bytes))

    def offsets_before(self, topic: str, partition: int, time_ms: int, max_offsets: int) -> list[int]:
        return self.call(topic, partition, lambda c: c.offsets_before(topic, partition, time_ms, max_offsets))

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.call(topic, partition, lambda c: c.earliest_offset(topic, partition))

    def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark: the end of what every in-sync replica has."""
        return self.call(topic, partition, lambda c: c.latest_offset(topic, partition))

    def close(self) -> None:
        with self._lock:
            consumers, self._consumers = list(self._consumers.values()), {}
        for c in consumers:
            c.close()

    def __enter__(self) -> "LeaderConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
