"""This product's own consumer group (ZooKeeper-coordinated, :mod:`ingest.client.consumer_group`) on a
replicated 0.7 topic that grows (``ingest topics alter``): the topic node's data changes, its watch fires,
both members rebalance onto the 4 partitions (two each, the owners registry agreeing with the pure
assignment) and read what is produced to the new partitions."""
from __future__ import annotations

import threading

import pytest

from ingest.client.rebalance import assign, subscribed_threads
from ingest.znodes import partition_name
from tests.client.test_consumer_group import Member
from tests.client.test_topics_admin import _run
from tests.harness.replication_topics import metadata_of, produce_acked, wait_for_leaders
from tests.harness.wait import wait_until

pytestmark = pytest.mark.processes

TOPIC = "grow07"
GROUP = "g-grow"


def _owners(zk) -> dict[str, str]:
    base = f"/consumers/{GROUP}/owners/{TOPIC}"
    try:
        return {c: zk.get(f"{base}/{c}")[0].decode() for c in zk.get_children(base)}
    except Exception:  # noqa: BLE001 - released between listing and reading: not settled yet
        return {}


def test_the_products_group_rebalances_onto_added_partitions_and_reads_them(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=2, zk_connect=zk_connect)
    res = _run("topics", "create", "--zookeeper", zk_connect, "--topic", TOPIC, "--partitions", "2",
               "--replication-factor", "2", "--format", "0.7")
    assert res.returncode == 0, res.stderr
    md = metadata_of(brokers)
    wait_for_leaders(md, TOPIC, 2, isr=2)
    sink: list[bytes] = []
    lock = threading.Lock()
    members = [Member(zk_connect, GROUP, TOPIC, sink, lock, f"c{i}") for i in range(2)]
    try:
        for p in range(2):
            produce_acked(md, TOPIC, p, [f"before-{p}".encode()])
        wait_until(lambda: sorted(sink) == [b"before-0", b"before-1"], timeout=60, what="the first 2 partitions read")

        res = _run("topics", "alter", "--zookeeper", zk_connect, "--topic", TOPIC, "--partitions", "4")
        assert res.returncode == 0, res.stderr
        wait_for_leaders(md, TOPIC, 4, isr=2)
        for p in (2, 3):
            produce_acked(md, TOPIC, p, [f"after-{p}".encode()])

        homes = sorted((x.home, x.partition) for x in md.topic(TOPIC, refresh=True).partitions)
        assert len(homes) == 4
        plan = assign(homes, subscribed_threads({m.name: {TOPIC: 1} for m in members}, TOPIC))
        want = {partition_name(b, p): t for t, ps in plan.items() for b, p in ps}
        wait_until(lambda: _owners(zk) == want, timeout=60, what=f"owners of the 4 partitions {want}")
        assert all(len(m.connector.owned_partitions()[TOPIC]) == 2 for m in members)
        wait_until(lambda: sorted(sink) == [b"after-2", b"after-3", b"before-0", b"before-1"], timeout=60,
                   what="the new partitions' messages read, nothing twice")
    finally:
        for m in members:
            m.stop()
