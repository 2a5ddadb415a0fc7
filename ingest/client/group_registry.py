"""Reading the ZooKeeper registries a consumer group rebalances over (kazoo, read-only).

Layout (brokers write ``/brokers``; the group's consumers write ``/consumers/G``)::

    /brokers/ids/[broker_id]                  -> "host:port"        (ephemeral)
    /brokers/topics/[topic]/[broker_id]       -> "#partitions"      (ephemeral)
    /consumers/G/ids/[consumer_id]            -> {"topic": #streams} (ephemeral, JSON)

Nodes can vanish between listing a directory and reading a child (their owner's
session ended): such children are skipped, the watch that fires for the change
triggers another rebalance.
"""
from __future__ import annotations

import json

from kazoo.exceptions import NoNodeError

from ingest.client.discovery import BROKER_IDS_PATH, BROKER_TOPICS_PATH, BrokerAddress, parse_broker_znode


def live_brokers(zk) -> dict[int, BrokerAddress]:
    """``{broker_id: address}`` of the registered brokers."""
    out = {}
    for child in zk.get_children(BROKER_IDS_PATH):
        try:
            data, _ = zk.get(f"{BROKER_IDS_PATH}/{child}")
            out[int(child)] = parse_broker_znode(int(child), data)
        except (NoNodeError, ValueError):
            continue
    return out


def topic_partitions(zk, topic: str, live: dict[int, BrokerAddress]) -> list[tuple[int, int]]:
    """Sorted ``(broker_id, partition)`` of ``topic`` on the ``live`` brokers."""
    path = f"{BROKER_TOPICS_PATH}/{topic}"
    out = []
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return out
    for child in children:
        try:
            bid = int(child)
            data, _ = zk.get(f"{path}/{child}")
            n = int(data.decode().strip())
        except (NoNodeError, ValueError):
            continue
        if bid in live:
            out.extend((bid, p) for p in range(n))
    return sorted(out)


def group_subscriptions(zk, group: str) -> dict[str, dict[str, int]]:
    """``{consumer_id: {topic: #streams}}`` of every registered member of ``group``."""
    base = f"/consumers/{group}/ids"
    subs = {}
    for cid in zk.get_children(base):
        try:
            data, _ = zk.get(f"{base}/{cid}")
            subs[cid] = {str(k): int(v) for k, v in json.loads(data.decode() or "{}").items()}
        except (NoNodeError, ValueError):
            continue
    return subs
