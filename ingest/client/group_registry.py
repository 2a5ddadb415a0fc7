"""Reading the ZooKeeper registries a consumer group rebalances over (kazoo, read-only).

Layout (brokers write ``/brokers``; the group's consumers write ``/consumers/G``;
paths are built by :mod:`ingest.znodes`)::

    /brokers/ids/[broker_id]                  -> "creator:host:port" (ephemeral)
    /brokers/topics/[topic]/[broker_id]       -> "#partitions"      (ephemeral)
    /brokers/topics/[topic]  (replicated)     -> assignment JSON    (partition -> replicas)
    /consumers/G/ids/[consumer_id]            -> {"topic": #streams} (ephemeral, JSON)

A replicated topic's partitions are named ``(home broker, partition)``, the home
being the first replica of its assignment: the name (and so the group's owner and
offset nodes ``home-partition``) stays the same whatever broker leads the
partition, and the partition belongs to the group whether or not its home is alive.

Nodes can vanish between listing a directory and reading a child (their owner's
session ended): such children are skipped, the watch that fires for the change
triggers another rebalance. Every call goes through ``client.retry``.
"""
from __future__ import annotations

import json

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.client.discovery import BrokerAddress, read_topic_partition_counts


def replicated_assignment(zk, topic: str) -> dict[int, tuple[int, ...]] | None:
    """``{partition: replicas}`` of a replicated ``topic``; None for a legacy (0.7) or unknown topic."""
    try:
        data, _ = zk.retry(zk.get, znodes.topic_dir(topic))
    except NoNodeError:
        return None
    try:
        return znodes.parse_assignment(data)
    except ValueError:
        return None


def kafka_topic(zk, topic: str) -> bool:
    """Whether ``topic`` is a Kafka-format topic (its assignment says ``"format":"kafka"``): a group of this
    design cannot read it (its offsets are record offsets, served only by the Kafka listeners)."""
    try:
        data, _ = zk.retry(zk.get, znodes.topic_dir(topic))
        return znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT
    except (NoNodeError, ValueError):
        return False


def partitions_of(zk, topic: str, live: dict[int, BrokerAddress]) -> tuple[list[tuple[int, int]], bool]:
    """Sorted ``(broker_id, partition)`` of ``topic`` and whether it is replicated.

    Legacy: the partitions the ``live`` brokers registered. Replicated: every partition,
    as ``(home broker, partition)``.
    """
    assignment = replicated_assignment(zk, topic)
    if assignment is not None:
        return sorted((replicas[0], p) for p, replicas in assignment.items()), True
    return topic_partitions(zk, topic, live), False


def topic_partitions(zk, topic: str, live: dict[int, BrokerAddress]) -> list[tuple[int, int]]:
    """Sorted ``(broker_id, partition)`` of legacy ``topic`` on the ``live`` brokers."""
    out = []
    for bid, n in read_topic_partition_counts(zk, topic).items():
        if bid in live:
            out.extend((bid, p) for p in range(n))
    return sorted(out)


def group_subscriptions(zk, group: str) -> dict[str, dict[str, int]]:
    """``{consumer_id: {topic: #streams}}`` of every registered member of ``group``."""
    subs = {}
    for cid in zk.retry(zk.get_children, znodes.group_ids_dir(group)):
        try:
            data, _ = zk.retry(zk.get, znodes.consumer_path(group, cid))
            subs[cid] = {str(k): int(v) for k, v in json.loads(data.decode() or "{}").items()}
        except (NoNodeError, ValueError):
            continue
    return subs
