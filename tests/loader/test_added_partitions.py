"""Partitions added to a loaded Kafka topic (``ingest topics alter``): the next load plans them from offset 0
and the audit counts their events.

Two brokers with ZooKeeper, a Kafka topic of 2 partitions (replication factor 2), EventProducers that talk
to the Kafka listeners: a first window's events are loaded; the topic grows to 4 partitions; a second
window's events go to all 4 (keys chosen so that each partition gets some), and the next load commits
every partition, the new ones from offset 0 to their end, no range lost. The audit then judges both windows
COMPLETE with the counts the producers reported: nothing of the new partitions is missing (no DATA_LOSS).
"""
from __future__ import annotations

import time

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.client.kafka.partitioner import partition_for_key
from ingest.clock import FakeClock
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.client.test_topics_admin import _run
from tests.harness import replicated as r
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess

pytestmark = pytest.mark.processes

TOPIC = "k-grow"
W = 600_000
HOUR = 3_600_000
A = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR
B = A + W


def pages(n: int) -> list[dict]:
    return [{"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
             "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False} for i in range(n)]


def keys_for(partitions: int, per_partition: int) -> list[bytes]:
    """Keys that Kafka's partitioner spreads ``per_partition`` to each of ``partitions`` partitions."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    i = 0
    while any(len(v) < per_partition for v in out.values()):
        key = f"member-{i}".encode()
        p = partition_for_key(key, partitions)
        if len(out[p]) < per_partition:
            out[p].append(key)
        i += 1
    return [k for p in range(partitions) for k in out[p]]


def _producer(bootstrap: str, registry_url: str, clock) -> EventProducer:
    return EventProducer({"bootstrap.servers": bootstrap, "producer.type": "sync"}, RegistryClient(registry_url),
                         clock=clock, background=False, monitoring_window_ms=W, monitoring_grace_ms=1000,
                         monitoring_interval_ms=86_400_000)


def _offsets(dest) -> dict[int, int]:
    st = LoaderState.load(open_storage(str(dest)))
    return {o.partition: o.offset for o in st.offsets.values() if o.topic == TOPIC}


def test_the_next_load_plans_added_partitions_from_0_and_the_audit_counts_them(spark, tmp_path_factory, tmp_path,
                                                                               zk_connect, zk):
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    brokers = broker_cluster(tmp_path_factory, n=2, zk_connect=zk_connect, num_partitions=1)
    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)
    try:
        res = _run("topics", "create", "--zookeeper", zk_connect, "--topic", TOPIC, "--partitions", "2",
                   "--replication-factor", "2")
        assert res.returncode == 0, res.stderr
        for p in range(2):
            r.wait_for_state(zk, TOPIC, p, lambda s: s.leader >= 0 and len(s.isr) == 2, 60, f"{TOPIC}-{p} in sync")

        clock = FakeClock(A + 1000)
        first = _producer(bootstrap, registry.url, clock)
        for key in keys_for(2, 3):
            first.send(TOPIC, pages(2), key=key)                 # 12 events in window A
        first.poll()
        stats = first.close(timeout_s=30)
        assert stats["failed"] == 0 and stats["monitoring_pending"] == 0, stats

        dest = tmp_path / "dest"
        load_config = LOADER_CONFIG.parse({"destination": str(dest), "bootstrap.servers": bootstrap,
                                           "registry.url": registry.url, "format": "parquet"})
        assert run_load(load_config, spark).status == "committed"
        assert _offsets(dest) == {0: 6, 1: 6}

        res = _run("topics", "alter", "--zookeeper", zk_connect, "--topic", TOPIC, "--partitions", "4")
        assert res.returncode == 0, res.stderr
        for p in (2, 3):
            r.wait_for_state(zk, TOPIC, p, lambda s: s.leader >= 0 and len(s.isr) == 2, 60, f"{TOPIC}-{p} led")

        clock.set(B + 5000)
        second = _producer(bootstrap, registry.url, clock)
        for key in keys_for(4, 2):
            second.send(TOPIC, pages(3), key=key)                # 24 events in window B, 6 per partition
        second.poll()
        stats = second.close(timeout_s=30)
        assert stats["failed"] == 0 and stats["monitoring_pending"] == 0, stats

        run = run_load(load_config, spark)
        assert run.status == "committed"
        assert sorted((t.partition, t.start, t.end) for t in run.plan.tasks if t.topic == TOPIC) == [
            (0, 6, 12), (1, 6, 12), (2, 0, 6), (3, 0, 6)], run.plan.tasks
        assert _offsets(dest) == {0: 12, 1: 12, 2: 6, 3: 6}
        assert not [x for x in run.plan.lost_ranges if x.topic == TOPIC], run.plan.lost_ranges

        audit_config = AUDIT_CONFIG.parse({"destination": str(dest), "grace.ms": 2000, "window.lookback": 0})
        audit = run_audit(spark, audit_config, clock=FakeClock(B + W + 60_000), from_ms=A, to_ms=B + W)
        windows = {x["window_start_ms"]: x for x in audit.rows if x["topic"] == TOPIC and x["row_type"] == "window"}
        assert [(windows[w]["status"], windows[w]["produced_acked"], windows[w]["loaded_distinct"],
                 windows[w]["missing"]) for w in (A, B)] == [("COMPLETE", 12, 12, 0), ("COMPLETE", 24, 24, 0)]
    finally:
        stop_all(brokers)
        registry.stop()
