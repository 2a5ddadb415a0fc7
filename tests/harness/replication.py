"""Replicated topics for tests: create one by writing its assignment znode, find its leaders.

Usage::

    from tests.harness.replication import create_replicated_topic, wait_for_leaders, leader_of

    brokers = broker_factory(n=3, zk_connect=zk_connect)          # enable.zookeeper=true, zk.connect
    create_replicated_topic(zk_connect, "clicks", partitions=2, brokers=[b.broker_id for b in brokers], rf=3)
    topic = wait_for_leaders(brokers, "clicks", partitions=2)     # ReplicatedTopic, every partition led
    leader = leader_of(brokers, "clicks", 0)                      # the BrokerProcess leading partition 0

The topic is created the way ``ingest topics create`` does it: the assignment
(Kafka 0.8's ``/brokers/topics/[topic]`` data, :func:`ingest.znodes.assignment_value`,
replicas placed by :func:`ingest.broker.assignment.assign`) is written once, and the
brokers' controller elects the leaders. Leaders are read through TOPIC_METADATA
(:class:`ingest.client.replica_metadata.ReplicaMetadata`), as clients find them.
"""
from __future__ import annotations

import time

from ingest import znodes
from ingest.broker import protocol
from ingest.broker.assignment import assign
from ingest.client.discovery import BrokerAddress
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.errors import IngestError


def create_replicated_topic(zk_connect: str, topic: str, *, partitions: int, brokers: list[int],
                            rf: int) -> dict[int, list[int]]:
    """Write the topic's assignment znode (replicas by the (i+j) mod n rule); returns the assignment."""
    from kazoo.client import KazooClient

    assignment = assign(brokers, partitions, rf)
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        client.retry(client.create, znodes.topic_dir(topic), znodes.assignment_value(assignment), makepath=True)
    finally:
        client.stop()
        client.close()
    return assignment


def metadata(brokers) -> ReplicaMetadata:
    """A ReplicaMetadata asking the running ones of ``brokers`` (BrokerProcess objects)."""
    return ReplicaMetadata(lambda: [BrokerAddress(b.broker_id, b.host, b.port) for b in brokers if b.running],
                           timeout_s=5.0, max_age_s=0.0)


def wait_for_leaders(brokers, topic: str, *, partitions: int, timeout: float = 60.0,
                     isr: int | None = None) -> protocol.ReplicatedTopic:
    """Poll TOPIC_METADATA until each of the topic's ``partitions`` has a leader (and, with ``isr``,
    at least that many in-sync replicas); the answer, or AssertionError naming the last one seen."""
    meta = metadata(brokers)
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            t = meta.topic(topic, refresh=True)
            last = t
            if t is not None and len(t.partitions) == partitions and all(
                    p.leader >= 0 and (isr is None or len(p.isr) >= isr) for p in t.partitions):
                return t
        except IngestError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: not every one of {partitions} partitions has a leader"
                                 + (f" and {isr} in-sync replicas" if isr else "")
                                 + f" after {timeout}s; last TOPIC_METADATA: {last}")
        time.sleep(0.1)


def leader_of(brokers, topic: str, partition: int, *, timeout: float = 60.0, not_broker: int | None = None):
    """The BrokerProcess leading ``topic``-``partition`` (waiting for one, other than ``not_broker``)."""
    meta = metadata(brokers)
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            t = meta.topic(topic, refresh=True)
            state = next((p for p in t.partitions if p.partition == partition), None) if t else None
            last = state
            if state is not None and state.leader >= 0 and state.leader != not_broker:
                match = [b for b in brokers if b.broker_id == state.leader and b.running]
                if match:
                    return match[0]
        except IngestError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}-{partition}: no live leader"
                                 + (f" other than broker {not_broker}" if not_broker is not None else "")
                                 + f" after {timeout}s; last state: {last}")
        time.sleep(0.1)
