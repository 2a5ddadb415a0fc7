"""Under-replicated partitions on a real replicated cluster: 0 with the full in-sync set, 1 after a SIGKILL.

Two broker processes with ZooKeeper and ``metrics.port=0``, one topic with one
partition on both. The leader's scrape shows 2 in-sync replicas and no
under-replicated partition; after the follower is SIGKILLed and ZooKeeper's state
drops it from the in-sync set, the leader's scrape shows 1 and 1.
"""
from __future__ import annotations

import pytest

from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.metrics import metrics_url, scrape_until, value

pytestmark = pytest.mark.slow
TOPIC = "metered-replicated"


def test_under_replicated_partitions_after_a_follower_is_killed(broker_factory, zk_connect, zk):  # noqa: F811
    brokers = broker_factory(n=2, zk_connect=zk_connect,
                             overrides={**r.replication_overrides(lag_ms=1000, session_ms=2000), "metrics.port": 0})
    urls = {b.broker_id: metrics_url(b.output) for b in brokers}
    r.create_topic(zk, TOPIC, {0: [0, 1]})
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader >= 0 and len(s.isr) == 2, 60, "a leader, full isr")
    leader = r.by_id(brokers, state.leader)
    follower = next(b for b in brokers if b.broker_id != state.leader)
    url = urls[leader.broker_id]
    m = scrape_until(url, lambda s: value(s, "ingest_broker_partition_in_sync_replicas", topic=TOPIC, partition=0) == 2,
                     "the leader to serve the partition with 2 in-sync replicas")
    assert value(m, "ingest_broker_under_replicated_partitions") == 0
    follower.kill()
    r.wait_for_state(zk, TOPIC, 0, lambda s: tuple(s.isr) == (leader.broker_id,),
                     30, "the isr without the killed follower")
    m = scrape_until(url, lambda s: value(s, "ingest_broker_under_replicated_partitions") == 1,
                     "the leader to report 1 under-replicated partition")
    assert value(m, "ingest_broker_partition_in_sync_replicas", topic=TOPIC, partition=0) == 1
