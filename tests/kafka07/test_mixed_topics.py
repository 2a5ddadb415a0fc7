"""Kafka 0.7 clients on a cluster that holds a replicated topic beside Kafka 0.7 topics.

samsa 0.3.11 and brod 0.4.3 read ``/brokers/topics/<topic>``'s children as broker ids
(``int(child)``); a replicated topic's partition states used to live under that node
(``.../partitions/<p>/state``, Kafka 0.8's layout), so both clients crashed with
``ValueError: invalid literal for int() with base 10: 'partitions'`` on asking for it. Now a
replicated topic's node holds its assignment as data and has no children: a 0.7 client sees a
topic that no broker registered (its bootstrap case) and never crashes, and every 0.7 topic
reads as before. The states live under ``/brokers/partition_states`` (ingest.znodes).
"""
from __future__ import annotations

import contextlib

from kazoo.client import KazooClient

from ingest import znodes
from ingest.client.topics_admin import create_topic
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.replication_topics import metadata_of, wait_for_leaders
from tests.harness.wait import wait_until
from tests.kafka07.helpers import ok, read_partition, samsa, topic
from tests.kafka07.test_brod import brod

ALL = [[0, 0], [0, 1], [1, 0], [1, 1]]


@contextlib.contextmanager
def kazoo(zk_connect: str):
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _both_kinds(py27, cluster07) -> tuple[str, str]:
    """A 0.7 topic registered by both brokers (2 partitions each) and a replicated topic with leaders."""
    legacy, replicated = topic("legacy"), topic("replicated")
    samsa(py27, *({"op": "produce", "topic": legacy, "partition": 0, "payloads": [b"seed"], "magic": 0,
                             **cluster07.hp(i)} for i in (0, 1)))
    with kazoo(cluster07.zk_connect) as zk:
        wait_until(lambda: all(zk.exists(znodes.topic_path(legacy, b.broker_id)) for b in cluster07.brokers),
                   what=f"{legacy} registered by both brokers")
        create_topic(zk, replicated, partitions=2, replication_factor=2, manual=None)
        wait_for_leaders(metadata_of(cluster07.brokers), replicated, 2, isr=2)
        assert zk.get_children(znodes.topic_dir(replicated)) == []      # nothing a 0.7 client misreads
    return legacy, replicated


def test_samsa_and_brod_read_the_registry_of_a_cluster_with_both_kinds_of_topic(py27, cluster07):
    legacy, replicated = _both_kinds(py27, cluster07)
    zk = cluster07.zk_connect
    brokers = {str(b.broker_id): [b.host, b.port] for b in cluster07.brokers}

    seen_legacy, seen_replicated = samsa(py27, {"op": "discover", "zk": zk, "topic": legacy, "publish": "mixed"},
                                         {"op": "discover", "zk": zk, "topic": replicated})
    assert ok(seen_legacy) == {"brokers": brokers, "partitions": ALL}
    # no broker registered it the 0.7 way: samsa's "virtual" partition 0 of each live broker
    assert ok(seen_replicated) == {"brokers": brokers, "partitions": [[0, 0], [1, 0]]}
    for b in cluster07.brokers:      # samsa published through its discovery to the 0.7 topic
        assert [p for _, p in read_partition(b, legacy, 1, count=1)] == [b"mixed-%d-1" % b.broker_id]

    group = topic("brod-group")
    results = brod(py27, {"op": "zk_partitions", "zk": zk, "topic": legacy},
                       {"op": "zk_partitions", "zk": zk, "topic": replicated},
                       {"op": "zk_consumer", "zk": zk, "group": group, "topic": legacy},
                       {"op": "zk_consumer", "zk": zk, "group": group + "-r", "topic": replicated},
                       {"op": "zk_produce", "zk": zk, "topic": legacy, "payloads": [b"via-brod-zk"]})
    legacy_parts, replicated_parts, owned, owned_replicated, chosen = [ok(r) for r in results]
    assert legacy_parts == ALL and owned == ALL
    assert replicated_parts == [] and owned_replicated == []      # a topic no broker registered
    b = next(b for b in cluster07.brokers if b.broker_id == chosen[0])
    wait_until(lambda: b"via-brod-zk" in [p for _, p in read_partition(b, legacy, chosen[1])],
               what="brod's ZKProducer message in the partition it chose")


def test_states_at_the_old_place_are_moved_as_they_are_and_samsa_then_reads_the_topic(py27, broker_factory,
                                                                                      zk_connect, zk):
    """A cluster upgraded from the Kafka 0.8 layout: the controller moves each state unchanged (the same
    leader, leader epoch and in-sync set, not a fresh election) and removes ``.../partitions``."""
    brokers = broker_factory(n=2, zk_connect=zk_connect)
    wait_until(lambda: len(zk.get_children(znodes.BROKER_IDS)) == 2, what="2 brokers registered")
    wait_until(lambda: zk.exists(znodes.CONTROLLER), what="a controller")
    old = znodes.PartitionState(leader=1, leader_epoch=5, isr=(1, 0), controller_epoch=1)
    zk.create(znodes.legacy_partition_state_path("moved", 0), old.encode(), makepath=True)
    zk.set(znodes.topic_dir("moved"), znodes.assignment_value({0: [0, 1]}))     # now a replicated topic
    wait_until(lambda: zk.exists(znodes.partition_state_path("moved", 0)), what="the state at its new place")
    new = znodes.PartitionState.parse(zk.get(znodes.partition_state_path("moved", 0))[0])
    assert (new.leader, new.leader_epoch, new.isr) == (1, 5, (1, 0))
    wait_until(lambda: zk.get_children(znodes.topic_dir("moved")) == [], what="the old directories removed")
    assert wait_for_leaders(metadata_of(brokers), "moved", 1, isr=2) == {0: 1}
    [seen] = samsa(py27, {"op": "discover", "zk": zk_connect, "topic": "moved"})
    assert ok(seen)["partitions"] == [[0, 0], [1, 0]]
