"""Reading the ZooKeeper registries a consumer group rebalances over (kazoo, read-only).

Layout (brokers write ``/brokers``; the group's consumers write ``/consumers/G``;
paths are built by :mod:`ingest.znodes`)::

    /brokers/ids/[broker_id]                  -> "host:port"        (ephemeral)
    /brokers/topics/[topic]/[broker_id]       -> "#partitions"      (ephemeral)
    /consumers/G/ids/[consumer_id]            -> {"topic": #streams} (ephemeral, JSON)

Nodes can vanish between listing a directory and reading a child (their owner's
session ended): such children are skipped, the watch that fires for the change
triggers another rebalance. Every call goes through ``client.retry``.
"""
from __future__ import annotations

import json

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.client.discovery import BrokerAddress, read_topic_partition_counts


def topic_partitions(zk, topic: str, live: dict[int, BrokerAddress]) -> list[tuple[int, int]]:
    """Sorted ``(broker_id, partition)`` of ``topic`` on the ``live`` brokers."""
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
