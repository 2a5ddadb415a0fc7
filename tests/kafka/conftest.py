"""The cluster the other-client tests share: one broker without ZooKeeper, then three with.

``kafka_cluster`` is package-scoped and parametrized: every test that takes it runs against a single
broker without ZooKeeper (``local``: Kafka topics auto-created, one partition leader) and against
three brokers with ZooKeeper (``replicated``: each test's topic created with replication factor 3,
``min.insync.replicas`` 2, leaders spread over the brokers, all replicas in sync before the test
produces, and every partition's leader answering a client; a topic a client auto-creates gets three
replicas too, ``default.replication.factor``). Only one of the two clusters runs at a time. No test here
kills a broker: ZooKeeper sessions and replica lag get generous timeouts (6 s, 10 s), so a loaded machine
does not move leaders or shrink in-sync sets in the middle of a test (an acks=0 round sent to a leader
that just lost its leadership is lost, as in Kafka).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.brokers import BrokerProcess, broker_cluster, stop_all
from tests.harness.zookeeper import fresh_chroot
from tests.kafka.other_clients import wait_for_ends

PARTITIONS = 2


@dataclass
class KafkaCluster:
    kind: str
    brokers: list[BrokerProcess]
    zk: object | None = None
    topics: set[str] = field(default_factory=set)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.kafka_port}" for b in self.brokers)

    def topic(self, name: str) -> str:
        """A new Kafka topic of :data:`PARTITIONS` partitions, named after the test and the cluster.

        Replicated: its assignment written to ZooKeeper (``"format":"kafka"``, as ``ingest topics create``
        writes it) and every partition's three replicas in sync. Local: auto-created by the first client."""
        topic = f"{name}-{self.kind}"
        assert topic not in self.topics, f"topic {topic} used twice"
        self.topics.add(topic)
        if self.zk is not None:
            ids = [b.broker_id for b in self.brokers]
            assignment = {p: ids[p:] + ids[:p] for p in range(PARTITIONS)}
            self.zk.retry(self.zk.create, znodes.topic_dir(topic),
                          znodes.assignment_value(assignment, znodes.KAFKA_FORMAT), makepath=True)
            for p in range(PARTITIONS):
                r.wait_for_state(self.zk, topic, p, lambda s: s.leader in ids and set(s.isr) == set(ids), 120,
                                 f"all of {ids} in the isr")
            wait_for_ends(self.bootstrap, topic, {p: 0 for p in range(PARTITIONS)}, timeout=120)
        return topic


@pytest.fixture(scope="package", params=["local", "replicated"])
def kafka_cluster(request, tmp_path_factory):
    if request.param == "local":
        brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=PARTITIONS)
        yield KafkaCluster("local", brokers)
        stop_all(brokers)
        return
    from kazoo.client import KazooClient   # deferred: kazoo is only needed with ZooKeeper

    zk_connect = fresh_chroot(request.getfixturevalue("zookeeper"), "/kc")
    brokers = broker_cluster(tmp_path_factory, n=3, zk_connect=zk_connect, num_partitions=PARTITIONS,
                             overrides=r.replication_overrides(min_isr=2, session_ms=6000, lag_ms=10_000,
                                                               **{"default.replication.factor": 3}))
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        yield KafkaCluster("replicated", brokers, zk)
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)
