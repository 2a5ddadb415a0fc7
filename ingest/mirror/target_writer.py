"""TargetWriter: conditional appends (APPEND_AT) to one partition of the replicated target topic.

Every append names the offset the set must start at (the target's log end the
copier expects); the broker appends only if its log end is exactly that, so a
set is never written twice (docs/protocol.md, request 15). Requests go to the
partition's current leader, found through TOPIC_METADATA of the target cluster;
NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE and an unreachable leader refresh
the metadata and retry with a doubling back-off up to ``leader_wait_s``
(a retried append that had in fact been appended comes back as OFFSET_MISMATCH,
which the copier resolves from its checkpoint).

Reading back (the lost-range bounds) goes through a LeaderConsumer of the same
cluster. APPEND_AT goes to the leader's Kafka listener as the private api key AppendAt07 (10002) when the
leader registered it (``kafka_endpoint``), to its 0.7 port otherwise.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from ingest.client.append_at import append_at, log_end
from ingest.client.kafka.security import ClientSecurity
from ingest.wire.connection import BrokerConnection
from ingest.wire.kafka.port07_connection import Port07OverKafka
from ingest.client.fetch_settings import FetchSettings
from ingest.client.leader_consumer import FAILOVER_ERRORS, LeaderConsumer
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import LeaderNotAvailableError
from ingest.mirror.config import MIRROR_FETCH

log = logging.getLogger(__name__)


class TargetWriter:
    """APPEND_AT to ``topic``/``partition`` of the target cluster.

    Args:
        metadata: the target cluster's TOPIC_METADATA cache (shared by the copiers of a process).
        acks: -1 every in-sync replica (default), 1 the leader.
        timeout_ms: how long an acks=-1 leader may wait for its followers.
        settings: the socket timeout, and ``leader_wait_s``: how long one call keeps retrying
            through a failover (:data:`ingest.mirror.config.MIRROR_FETCH` when not given).
        kafka_endpoint: broker id -> the Kafka listener on which that broker serves APPEND_AT as a private
            api key (:func:`ingest.mirror.kafka_io.port07_endpoint`), or None: then its 0.7 port (which a broker
            with security configured refuses APPEND_AT on: docs/security.md, "The 0.7 port").
        security: how the mirror connects to the target's Kafka listeners (``target.security.protocol``,
            ``target.ssl.*``, ``target.sasl.*``), for APPEND_AT over ``kafka_endpoint``.
    """

    def __init__(self, metadata: ReplicaMetadata, topic: str, partition: int, *, acks: int = -1,
                 timeout_ms: int = 10_000, settings: FetchSettings = MIRROR_FETCH,
                 clock: Clock = SYSTEM_CLOCK,
                 kafka_endpoint: Callable[[int], tuple[str, int] | None] | None = None,
                 security: ClientSecurity = ClientSecurity()) -> None:
        self.metadata = metadata
        self.topic = topic
        self.partition = partition
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.leader_wait_s = leader_wait_s = settings.leader_wait_s
        socket_timeout_s = settings.socket_timeout_s
        self.socket_timeout_s = max(socket_timeout_s, timeout_ms / 1000.0 + 5.0)
        self.clock = clock
        self._conn: BrokerConnection | None = None
        self._kafka_endpoint = kafka_endpoint
        self._endpoints: dict[int, tuple[str, int] | None] = {}   # the leader's, looked up again on a refresh
        self._security = security
        self._lock = threading.Lock()
        self.reader = LeaderConsumer(metadata, timeout_s=socket_timeout_s, leader_wait_s=leader_wait_s, clock=clock)

    def __repr__(self) -> str:
        return f"TargetWriter({self.topic}-{self.partition})"

    def _leader_conn(self, refresh: bool) -> BrokerConnection:
        try:
            addr = self.metadata.leader(self.topic, self.partition, refresh=refresh)
        except ValueError as exc:  # a topic just created: the brokers' metadata does not list it yet
            raise LeaderNotAvailableError(f"{self}: {exc}") from None
        kafka = None
        if self._kafka_endpoint is not None:
            if refresh or addr.broker_id not in self._endpoints:
                self._endpoints = {addr.broker_id: self._kafka_endpoint(addr.broker_id)}
            kafka = self._endpoints[addr.broker_id]
        host, port = kafka or (addr.host, addr.port)
        c = self._conn
        if c is None or (c.host, c.port) != (host, port):
            if c is not None:
                c.close()
            if kafka is not None:
                c = Port07OverKafka(host, port, timeout_s=self.socket_timeout_s, broker_id=addr.broker_id,
                                    client_id="ingest-mirror", ssl_context=self._security.ssl_context(),
                                    sasl=self._security.sasl_login())
            else:
                c = BrokerConnection(host, port, timeout_s=self.socket_timeout_s, broker_id=addr.broker_id)
            self._conn = c
        return c

    def _call(self, fn):
        deadline = None
        delay = 0.05
        refresh = False
        while True:
            try:
                return fn(self._leader_conn(refresh))
            except FAILOVER_ERRORS as exc:
                now = self.clock.monotonic()
                if deadline is None:
                    deadline = now + self.leader_wait_s
                if now + delay > deadline:
                    raise
                log.info("%s: %s; looking up the leader again in %.2f s", self, exc, delay)
                self.metadata.invalidate(self.topic)
                self.clock.sleep(delay)
                delay = min(1.0, delay * 2)
                refresh = True

    def log_end(self) -> int:
        """The leader's log end (every appended byte): the APPEND_AT query."""
        return self._call(lambda c: log_end(c, self.topic, self.partition))

    def append(self, expected_offset: int, message_set: bytes) -> int:
        """Append ``message_set`` at ``expected_offset``; returns the new log end.

        Raises:
            OffsetMismatchError: the log end is not ``expected_offset`` (``.log_end``); nothing was appended.
            NotEnoughReplicasError, RequestTimedOutError, ...: as APPEND_AT answers (the set may be appended).
        """
        return self._call(lambda c: append_at(c, self.topic, self.partition, expected_offset, message_set,
                                              acks=self.acks, timeout_ms=self.timeout_ms))

    def fetch_raw(self, offset: int, max_bytes: int) -> bytes:
        """Raw bytes of the target partition from ``offset`` (what consumers see: up to the high watermark)."""
        return self.reader.fetch_raw(self.topic, self.partition, offset, max_bytes)

    def earliest(self) -> int:
        return self.reader.earliest_offset(self.topic, self.partition)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.reader.close()
