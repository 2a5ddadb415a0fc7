"""Replicated topics for the consumer and loader tests (real ZooKeeper, real brokers).

Usage::

    from tests.harness.replication_topics import (create_replicated_topic, metadata_of, wait_for_leaders,
                                                  produce_acked, leader_process)

    brokers = broker_factory(n=3, zk_connect=zk_connect)
    create_replicated_topic(zk, "t", {0: [0, 1, 2], 1: [1, 2, 0]})   # as `ingest topics create` writes it
    md = metadata_of(brokers)
    wait_for_leaders(md, "t", partitions=2, isr=3)                  # the controller elected them
    offsets = produce_acked(md, "t", 0, [b"a", b"b"])                # PRODUCE_ACKS acks=-1 to the leader
    leader_process(brokers, md, "t", 0).kill()                       # SIGKILL the partition's leader

``produce_acked`` sends raw PRODUCE_ACKS requests (one per call) to the leader the
metadata names and, on NOT_LEADER_FOR_PARTITION / LEADER_NOT_AVAILABLE /
NOT_ENOUGH_REPLICAS / REQUEST_TIMED_OUT / an unreachable broker, refreshes the
metadata and sends again; a request that failed after reaching the broker may
have been appended, so tests that count exactly produce before they kill.
"""
from __future__ import annotations

import time

from ingest import znodes
from ingest.wire import protocol
from ingest.wire.connection import BrokerConnection
from ingest.client.discovery import BrokerAddress
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.errors import IngestError
from ingest.records.message_set import encode_message_set
from ingest.wire.errors import check
from tests.harness.replicated import create_topic as create_replicated_topic  # noqa: F401 - re-exported
from tests.harness.wait import wait_until


def metadata_of(brokers, *, timeout_s: float = 5.0) -> ReplicaMetadata:
    """A ReplicaMetadata asking the running ``brokers`` (BrokerProcess list)."""
    return ReplicaMetadata(lambda: [BrokerAddress(b.broker_id, b.host, b.port) for b in brokers if b.running],
                           timeout_s=timeout_s, max_age_s=0.0)


def partition_info(md: ReplicaMetadata, topic: str, partition: int) -> protocol.PartitionReplicas | None:
    try:
        t = md.topic(topic, refresh=True)
    except IngestError:
        return None
    if t is None:
        return None
    return next((p for p in t.partitions if p.partition == partition), None)


def wait_for_leaders(md: ReplicaMetadata, topic: str, partitions: int, *, isr: int = 1,
                     timeout: float = 60.0, exclude: tuple[int, ...] = ()) -> dict[int, int]:
    """Wait until every partition has a leader (not in ``exclude``) and at least ``isr`` in-sync replicas;
    returns ``{partition: leader id}``."""

    def ready():
        out = {}
        for p in range(partitions):
            info = partition_info(md, topic, p)
            if info is None or info.leader < 0 or info.leader in exclude or len(info.isr) < isr:
                return None
            out[p] = info.leader
        return out

    return wait_until(ready, timeout, f"leaders of {topic} ({partitions} partitions, isr >= {isr}, "
                                      f"not {list(exclude)})", interval=0.1)


def produce_acked(md: ReplicaMetadata, topic: str, partition: int, payloads: list[bytes], *, acks: int = -1,
                  timeout_s: float = 60.0, request_timeout_ms: int = 10_000) -> int:
    """Send ``payloads`` as one PRODUCE_ACKS to the partition's leader until acknowledged; returns the
    offset of the first message."""
    message_set = encode_message_set(payloads)
    req = protocol.ProduceAcksRequest(acks, request_timeout_ms, protocol.ProduceRequest(topic, partition, message_set))
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            addr = md.leader(topic, partition, refresh=True)
            conn = BrokerConnection(addr.host, addr.port, timeout_s=request_timeout_ms / 1000.0 + 5)
            try:
                resp = conn.request(req.encode(), protocol.ProduceAckResponse)
            finally:
                conn.close()
            check(resp.error, f"PRODUCE_ACKS {topic}-{partition} to {addr}")
            return resp.offset
        except (IngestError, ValueError) as exc:
            if isinstance(exc, IngestError) and not exc.retriable:
                raise
            last = exc
            time.sleep(0.1)
    raise AssertionError(f"{topic}-{partition}: no acknowledged produce within {timeout_s}s: {last}")


def leader_process(brokers, md: ReplicaMetadata, topic: str, partition: int):
    """The BrokerProcess leading ``topic``-``partition`` now."""
    leader = md.leader(topic, partition, refresh=True).broker_id
    return next(b for b in brokers if b.broker_id == leader)
