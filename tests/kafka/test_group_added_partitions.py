"""A Kafka topic that grows (``ingest topics alter``) under a running group of real Kafka clients, and under
this product's own Kafka clients that cached its metadata before.

- two kafka-python members of one group (``metadata.max.age.ms`` 1 s) rebalance onto the new partitions
  and read the records produced there: each member's client sees the partition count change in its
  metadata, the group rejoins, and the assignment covers every partition;
- this product's KafkaProducer and KafkaFetcher, which read the topic's metadata before it grew (their
  ``metadata.max.age.ms`` is the default 5 minutes), write to and read a new partition at once: a partition
  beyond the cached ones is asked of the cluster again before it is refused; and keyed sends use the new
  partition count once the cached one is older than ``metadata.max.age.ms``.
"""
from __future__ import annotations

import threading
import time

import pytest

from ingest import znodes
from tests.client.test_topics_admin import _run
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.kafka.group_checks import bootstrap_of

pytestmark = pytest.mark.processes

TOPIC = "growing"
GROUP = "growers"
OVERRIDES = {"offsets.topic.num.partitions": 2, "offsets.topic.replication.factor": 2,
             "group.initial.rebalance.delay.ms": 0}


class Member(threading.Thread):
    """One kafka-python group member polling in its own thread; records what it was assigned and read."""

    def __init__(self, name: str, bootstrap: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.assigned: set[int] = set()
        self.values: dict[int, set[bytes]] = {}
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        from kafka import KafkaConsumer

        try:
            c = KafkaConsumer(TOPIC, bootstrap_servers=self.bootstrap, group_id=GROUP,
                              auto_offset_reset="earliest", metadata_max_age_ms=1000,
                              session_timeout_ms=10_000, heartbeat_interval_ms=500, client_id=self.name)
            try:
                while not self.stopping.is_set():
                    for tp, records in c.poll(timeout_ms=200).items():
                        self.values.setdefault(tp.partition, set()).update(x.value for x in records)
                    self.assigned = {tp.partition for tp in c.assignment()}
            finally:
                c.close()
        except BaseException as exc:   # reported by the test
            self.error = exc


def test_a_kafka_python_group_and_cached_clients_pick_up_added_partitions(broker_factory, zk_connect, zk):
    from kafka import KafkaProducer as KPProducer

    from ingest.client.kafka.fetcher import KafkaFetcher
    from ingest.client.kafka.producer import KafkaProducer

    brokers = broker_factory(2, zk_connect, overrides=r.replication_overrides(**OVERRIDES))
    bootstrap = bootstrap_of(brokers)
    res = _run("topics", "create", "--zookeeper", zk_connect, "--topic", TOPIC, "--partitions", "2",
               "--replication-factor", "2")
    assert res.returncode == 0, res.stderr
    for p in range(2):
        r.wait_for_state(zk, TOPIC, p, lambda s: s.leader >= 0 and len(s.isr) == 2, 60, f"{TOPIC}-{p} in sync")

    ours = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    fetcher = KafkaFetcher({"bootstrap.servers": bootstrap})
    kp = KPProducer(bootstrap_servers=bootstrap, acks="all")
    members = [Member(f"member-{i}", bootstrap) for i in range(2)]
    try:
        assert fetcher.partitions_for(TOPIC) == 2 and ours._count(TOPIC) == 2   # both cache the metadata now
        for p in range(2):
            kp.send(TOPIC, value=f"before-{p}".encode(), partition=p).get(timeout=30)
        for m in members:
            m.start()
        wait_until(lambda: all(m.error is None for m in members) and
                   {p for m in members for p in m.values} == {0, 1}, timeout=60, what="the group reads 2 partitions")

        res = _run("topics", "alter", "--zookeeper", zk_connect, "--topic", TOPIC, "--partitions", "4")
        assert res.returncode == 0, res.stderr
        for p in (2, 3):
            r.wait_for_state(zk, TOPIC, p, lambda s: s.leader >= 0 and len(s.isr) == 2, 60, f"{TOPIC}-{p} led")

        # this product's clients: the new partition at once, although their metadata is only seconds old
        delivery = ours.produce(TOPIC, 3, [b"ours-3"])
        assert delivery.base_offset == 0, delivery
        got = fetcher.fetch(TOPIC, 3, 0)
        assert (got.high_watermark, len(got.batches), got.next_offset) == (1, 1, 1), got.batches
        for p in (2, 3):   # (kafka-python's producer refuses a partition its metadata does not list yet)
            ours.produce(TOPIC, p, [f"after-{p}".encode()])

        wait_until(lambda: all(m.error is None for m in members) and
                   sorted(p for m in members for p in m.assigned) == [0, 1, 2, 3], timeout=60,
                   what="the group's assignment covers the 4 partitions")
        assert all(len(m.assigned) == 2 for m in members), [m.assigned for m in members]
        wait_until(lambda: {p: set().union(*(m.values.get(p, set()) for m in members)) for p in (2, 3)} ==
                   {2: {b"after-2"}, 3: {b"ours-3", b"after-3"}}, timeout=60, what="the new partitions' records read")
        assert all(m.error is None for m in members), [m.error for m in members]

        # keyed sends: once the cached count is older than metadata.max.age.ms, keys map over 4 partitions
        ours.cluster.max_age_s = 0.5
        time.sleep(0.6)
        ours.send(TOPIC, b"v", key=b"k")
        assert ours._counts[TOPIC][0] == 4
    finally:
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(timeout=30)
        kp.close()
        ours.close()
        fetcher.close()
    assert znodes.parse_assignment(zk.get(znodes.topic_dir(TOPIC))[0]).keys() == {0, 1, 2, 3}
