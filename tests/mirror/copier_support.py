"""Test support for the copier tests: the shared mirror parts, the real tier counter, produce and read helpers.

Payloads here are plain bytes ``session|seq|time|filler`` (not framed Avro): the real
PartitionCounter counts them in window 0, which is all these tests need (every message counted
exactly once across restarts); tests/mirror/test_mirror_lost_ranges.py uses real Avro events.
"""
from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from ingest.wire import protocol
from ingest.wire.connection import BrokerConnection
from ingest.records.message_set import encode_message_set, valid_prefix
from ingest.client.discovery import ZkDiscovery, start_kazoo
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.clock import SYSTEM_CLOCK
from ingest.events.header_reader import HeaderReader
from ingest.events.registry_client import RegistryClient
from ingest.mirror.config import MIRROR_FETCH
from ingest.mirror.copier_factory import make_copier, make_fallback_producer
from ingest.mirror.source_reader import cluster_metadata
from ingest.mirror.tier_counts import PartitionCounter
from ingest.wire.errors import check


NO_REGISTRY = "http://127.0.0.1:9"
"""The test payloads below are not framed Avro, so a HeaderReader never asks its registry about them."""


def counter_factory(unit, group: str = "g", header_reader=None):
    """``state -> PartitionCounter`` of ``unit`` (the real tier counter; unframed payloads count in window 0)."""
    reader = header_reader or HeaderReader(RegistryClient(NO_REGISTRY))
    return lambda state: PartitionCounter(session=unit.session(group), topic=unit.topic, source=unit.source,
                                          mirror_server="test", window_ms=60_000, interval_ms=1000,
                                          header_reader=reader, clock=SYSTEM_CLOCK, state=state)


def acked(checkpoint) -> int:
    """Messages the checkpointed counter state says the target acknowledged."""
    c = PartitionCounter(session="x", topic="x", source="x", mirror_server="x", window_ms=60_000, interval_ms=1000,
                         header_reader=HeaderReader(RegistryClient(NO_REGISTRY)), clock=SYSTEM_CLOCK,
                         state=checkpoint.counts)
    return c.totals()["acked"]


def payload(session: str, seq: int, time_ms: int = 1_700_000_000_000, size: int = 40) -> bytes:
    head = f"{session}|{seq}|{time_ms + seq}|".encode()
    return head + b"x" * max(0, size - len(head))


def produce_07(broker, topic: str, partition: int, payloads: list[bytes], codec: int = 0) -> int:
    """One PRODUCE_ACK of ``payloads`` (one set, compressed with ``codec``) to an unreplicated topic's broker."""
    conn = BrokerConnection(broker.host, broker.port, timeout_s=10)
    try:
        req = protocol.ProduceAckRequest(topic, partition, encode_message_set(payloads, codec))
        resp = conn.request(req.encode(), protocol.ProduceAckResponse)
        check(resp.error, f"PRODUCE_ACK {topic}/{partition}")
        return resp.offset
    finally:
        conn.close()


def produce_replicated(md: ReplicaMetadata, topic: str, partition: int, payloads: list[bytes], codec: int = 0) -> int:
    """One PRODUCE_ACKS (acks -1) of one set to the partition's leader."""
    addr = md.leader(topic, partition, refresh=True)
    conn = BrokerConnection(addr.host, addr.port, timeout_s=15)
    try:
        req = protocol.ProduceAcksRequest(-1, 10_000, protocol.ProduceRequest(topic, partition,
                                                                               encode_message_set(payloads, codec)))
        resp = conn.request(req.encode(), protocol.ProduceAckResponse)
        check(resp.error, f"PRODUCE_ACKS {topic}-{partition}")
        return resp.offset
    finally:
        conn.close()


def read_all(fetch_raw, start: int = 0) -> bytes:
    """Every valid byte of a partition from ``start`` (``fetch_raw(offset, max_bytes)``), as consumers see it."""
    out = bytearray()
    pos = start
    while True:
        chunk = fetch_raw(pos, 1 << 20)
        n = valid_prefix(chunk)
        if n == 0:
            return bytes(out)
        out += chunk[:n]
        pos += n


@pytest.fixture
def target_zk_connect(zookeeper) -> str:
    chroot = f"/t-{uuid.uuid4().hex[:10]}"
    c = start_kazoo(zookeeper.connect)
    c.retry(c.ensure_path, chroot)
    c.stop()
    c.close()
    return zookeeper.connect + chroot


class Mirror:
    """The parts a mirror process shares: target kazoo client, discoveries, metadata (closed at the end)."""

    def __init__(self, source_zk: str, target_zk: str) -> None:
        self.zk = start_kazoo(target_zk)
        self.source = ZkDiscovery(start_kazoo(source_zk), own_client=True)
        self.target = ZkDiscovery(start_kazoo(target_zk), own_client=True)
        self.target_md = cluster_metadata(self.target)
        self.producer = None

    def copier(self, unit, **kw):
        if unit.fallback and self.producer is None:
            self.producer = make_fallback_producer(self.target)
        return make_copier(unit, group="g", zk=self.zk, source_discovery=self.source, target_metadata=self.target_md,
                           fallback_producer=self.producer, counter_factory=counter_factory(unit),
                           header_reader=HeaderReader(RegistryClient(NO_REGISTRY)),
                           fetch=replace(MIRROR_FETCH, fetch_size=kw.pop("fetch_size", 2048)),
                           checkpoint_interval_ms=kw.pop("checkpoint_interval_ms", 100), **kw)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
        self.source.close()
        self.target.close()
        self.zk.stop()
        self.zk.close()
