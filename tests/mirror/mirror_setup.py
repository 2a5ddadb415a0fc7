"""Helpers of the mirror's end-to-end tests: ZooKeeper chroots, produce to one partition, read a
partition's bytes, find a replicated target partition's leader, wait until mirrored."""
from __future__ import annotations

import uuid

from ingest.wire import protocol
from ingest.wire.connection import BrokerConnection
from ingest.records.message_set import encode_message_set, valid_prefix
from ingest.client.discovery import ZkDiscovery, start_kazoo
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import IngestError
from ingest.wire.errors import check
from tests.harness.wait import wait_until


def chroot(zookeeper, name: str) -> str:
    """A fresh chroot of the session's ZooKeeper: ``host:port/t-name-xxxx``."""
    path = f"/t-{name}-{uuid.uuid4().hex[:8]}"
    c = start_kazoo(zookeeper.connect, connection_timeout_ms=30_000)
    c.ensure_path(path)
    c.stop()
    c.close()
    return zookeeper.connect + path


def produce(broker, topic: str, partition: int, payloads: list[bytes], codec: int = 0) -> int:
    """An acknowledged produce of one set to one broker's partition (creates a 0.7 topic); its size in bytes."""
    data = encode_message_set(payloads, codec)
    conn = BrokerConnection(broker.host, broker.port, timeout_s=10)
    try:
        resp = conn.request(protocol.ProduceAckRequest(topic, partition, data).encode(), protocol.ProduceAckResponse)
        check(resp.error, f"produce {topic}/{partition} to {broker}")
    finally:
        conn.close()
    return len(data)


def read_partition(host: str, port: int, topic: str, partition: int) -> bytes:
    """Every byte of a partition's log, from 0 to its end (whole messages)."""
    out = bytearray()
    with SimpleConsumer(host, port, timeout_s=10) as c:
        end = c.latest_offset(topic, partition)
        while len(out) < end:
            raw = c.fetch_raw(topic, partition, len(out), max(1 << 20, 0))
            n = valid_prefix(raw)
            assert n > 0, f"{topic}/{partition}: no whole message at {len(out)} (end {end})"
            out += raw[:n]
    return bytes(out)


def latest(host: str, port: int, topic: str, partition: int) -> int:
    with SimpleConsumer(host, port, timeout_s=10) as c:
        return c.latest_offset(topic, partition)


class TargetCluster:
    """The target cluster's replicated partitions, by their current leader."""

    def __init__(self, zk_connect: str) -> None:
        self.zk = start_kazoo(zk_connect, connection_timeout_ms=30_000)
        self.discovery = ZkDiscovery(self.zk)
        self.metadata = ReplicaMetadata(lambda: self.discovery.brokers().values(), timeout_s=10)

    def leader(self, topic: str, partition: int):
        return self.metadata.leader(topic, partition, refresh=True)

    def end(self, topic: str, partition: int) -> int | None:
        try:
            a = self.leader(topic, partition)
            return latest(a.host, a.port, topic, partition)
        except (IngestError, ValueError, OSError):
            return None

    def read(self, topic: str, partition: int) -> bytes:
        a = self.leader(topic, partition)
        return read_partition(a.host, a.port, topic, partition)

    def partitions(self, topic: str) -> int | None:
        t = self.metadata.topic(topic, refresh=True)
        return None if t is None else len(t.partitions)

    def close(self) -> None:
        self.discovery.close()
        self.zk.stop()
        self.zk.close()


def wait_mirrored(target: TargetCluster, expected: dict[tuple[str, int], int], timeout: float = 60.0) -> None:
    """Wait until each target ``(topic, partition)`` has grown to the expected end (bytes)."""
    wait_until(lambda: all(target.end(t, p) == n for (t, p), n in expected.items()), timeout=timeout,
               what=f"target ends {expected}", interval=0.2)
