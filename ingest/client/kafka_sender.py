"""The producer's path to Kafka-format topics: each batch of the producer is one record batch v2, Produce.

:class:`~ingest.client.producer.Producer` hands a Kafka topic's batches (one ``send`` call's payloads,
or the payloads its async queue gathered for one partition) to a :class:`KafkaSender`, which sends
each as one record batch through :meth:`ingest.client.kafka.producer.KafkaProducer.produce`: the
batch is built once (one CRC-32C, the producer's ``compression.codec``) and retried there (stale
leaders, elections, NOT_ENOUGH_REPLICAS, lost connections) within ``delivery.timeout.ms``. Nothing
of the 0.7 path's batching or retrying is repeated here; this module only translates.

Settings: the producer's keys become the Kafka client's (Kafka's name <- the producer's):
``acks`` <- ``request.required.acks``; ``compression.type`` <- ``compression.codec``; ``retries`` <-
``message.send.max.retries``; ``delivery.timeout.ms`` and ``max.block.ms`` (the wait for a topic's
metadata) <- ``delivery.timeout.ms``; ``request.timeout.ms`` (the socket wait, and the broker's
acks=all wait) <- the larger of ``socket.timeout.ms`` and ``request.timeout.ms``;
``retry.backoff.ms``, ``retry.backoff.max.ms``, ``security.protocol``, ``ssl.*``, ``sasl.*`` the same; ``metadata.max.age.ms`` <-
``topic.metadata.refresh.interval.ms``.

Partitions: with ``partitioner.class`` the custom partitioner picks (as on 0.7 topics); otherwise a
key goes where Kafka's Java client puts it (murmur2, :mod:`ingest.client.kafka.partitioner`) and a
batch without a key to a random partition. Keys are kept in the records (a Kafka consumer sees
them); a ``str`` key is sent as its UTF-8 bytes.

Offsets are record offsets: a batch's ``first_offset`` is the offset of its first record and the
records that follow it take the next numbers (D7).

Concurrency: one lock serialises the sends (the Kafka client is single-threaded); a sync producer's
callers and an async producer's sender thread may share a KafkaSender.
"""
from __future__ import annotations

import logging
import threading
from typing import Sequence

from ingest.client.cluster import partition_index
from ingest.client.kafka.partitioner import partition_for_key
from ingest.client.kafka.producer import KafkaProducer
from ingest.client.kafka.security import SECURITY_KEY_NAMES
from ingest.client.partitioner import DefaultPartitioner, key_bytes, load_partitioner
from ingest.client.send_batch import SendResult
from ingest.clock import Clock
from ingest.config import Config
from ingest.errors import IngestError
from ingest.records.builder import SimpleRecord

log = logging.getLogger(__name__)

KAFKA_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy"}
"""The producer's wire codec number -> Kafka's ``compression.type`` (the numbers agree for these)."""


def kafka_settings(config: Config, servers: Sequence[tuple[str, int]], codec: int) -> dict:
    """The :class:`KafkaProducer` settings of a producer configured with ``config`` (module docstring)."""
    security = {k: config[k] for k in SECURITY_KEY_NAMES if k in config}   # TLS, SASL: the producer's own keys
    return {
        **security,
        "bootstrap.servers": tuple(servers),
        "client.id": "ingest-producer",
        "acks": str(config["request.required.acks"]),
        "compression.type": KAFKA_CODEC_NAMES[codec],
        "retries": config["message.send.max.retries"],
        "retry.backoff.ms": config["retry.backoff.ms"],
        "retry.backoff.max.ms": config["retry.backoff.max.ms"],
        "delivery.timeout.ms": max(1, config["delivery.timeout.ms"]),
        "max.block.ms": config["delivery.timeout.ms"],
        "request.timeout.ms": max(config["socket.timeout.ms"], config["request.timeout.ms"]),
        "metadata.max.age.ms": config["topic.metadata.refresh.interval.ms"],
        "linger.ms": 0,
    }


class KafkaSender:
    """Sends a producer's batches of Kafka-format topics (module docstring).

    Args:
        config: the producer's Config.
        servers: the Kafka listeners to bootstrap from.
        codec: the producer's wire codec number (0 none, 1 gzip, 2 snappy).
    """

    record_offsets = True
    """Offsets number records (a 0.7 sender's are byte positions)."""

    def __init__(self, config: Config, servers: Sequence[tuple[str, int]], *, codec: int, clock: Clock) -> None:
        self.clock = clock
        self._spec = config["partitioner.class"]
        self._custom = load_partitioner(self._spec) if self._spec else None
        self._random = DefaultPartitioner()
        self._lock = threading.Lock()
        self.kafka = KafkaProducer(kafka_settings(config, servers, codec), clock=clock)
        self.give_up_at: float | None = None
        """Set by a producer closing with a timeout (monotonic): no batch is retried past it."""

    def __repr__(self) -> str:
        return f"KafkaSender({','.join(f'{h}:{p}' for h, p in self.kafka.cluster.bootstrap)})"

    def route(self, topic: str, key: bytes | str | None) -> int:
        """The partition a batch of ``key`` goes to (waits up to ``delivery.timeout.ms`` for the topic's
        metadata; a new topic is created by the Kafka listener, as Kafka's producer creates it)."""
        with self._lock:
            return self._route(topic, key)

    def _route(self, topic: str, key: bytes | str | None) -> int:
        count = self.kafka.partitions_for(topic)
        if self._custom is not None:
            return partition_index(self._custom, self._spec, topic, key, count)
        if key is None:
            return self._random.partition(None, count)
        return partition_for_key(key_bytes(key), count)

    def send(self, topic: str, payloads: list[bytes], key: bytes | str | None, route: int | None = None,
             keys: Sequence[bytes | str | None] | None = None) -> SendResult:
        """Send ``payloads`` to partition ``route`` (or the one of ``key``) as one record batch.

        ``keys``: one key per payload (an async producer's batch gathers several ``send`` calls);
        default ``key`` for all. Never raises for a failed batch: the result carries the error.
        """
        count = len(payloads)
        partition = -1
        with self._lock:
            try:
                partition = self._route(topic, key) if route is None else route
                if keys is None:
                    keys = (key,) * count
                records = [p if k is None else SimpleRecord(p, key_bytes(k)) for p, k in zip(payloads, keys)]
                delivery = self.kafka.produce(topic, partition, records, deadline=self.give_up_at)
            except IngestError as exc:
                return SendResult(topic, -1, partition, count, None, exc)
            known = self.kafka.cluster.known_partitions(topic)
            leader = known[partition].leader if partition < len(known) else -1
        first = delivery.base_offset if delivery.base_offset >= 0 else None
        return SendResult(topic, leader, partition, count, first, None)

    def leaders(self, topic: str) -> list[tuple[int, int]]:
        """``(leader, partition)`` per partition of ``topic``, in partition order (leader -1 while none)."""
        with self._lock:
            self.kafka.partitions_for(topic)
            return [(p.leader, p.partition) for p in self.kafka.cluster.known_partitions(topic)]

    def close(self) -> None:
        with self._lock:
            self.kafka.cluster.close()
