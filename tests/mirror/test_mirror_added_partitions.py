"""A mirrored Kafka topic that grows on its source (``ingest topics alter``) while ``ingest mirror`` runs.

One source cluster (one broker, ZooKeeper) holds a Kafka topic of 2 partitions; the mirror creates it on the
target with one spare partition (``target.partitions.reserve=1``: 3 partitions). The source topic then
grows to 5: its partition 2 takes the spare target partition, and for partitions 3 and 4 the mirror grows
the target topic (to the 5 partitions the mapping needs plus the reserve, 6), so every partition is still
copied one to one: each target partition holds exactly its source partition's batches at the same offsets.
"""
from __future__ import annotations

import json

import pytest

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.mirror.kafka_io import kafka_bootstrap
from tests.client.test_topics_admin import _run
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until
from tests.mirror.kafka_records import end_or_none, produce_tagged
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import chroot
from tests.mirror.test_mirror_kafka_kills import _bootstrap, batches

pytestmark = pytest.mark.processes

TOPIC = "kgrow"


def test_a_source_topic_that_grows_grows_the_target_and_stays_one_to_one(zookeeper, broker_factory,  # noqa: F811
                                                                         tmp_path):
    dc1_zk, target_zk = chroot(zookeeper, "gdc1"), chroot(zookeeper, "gtarget")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk)
    broker_factory(1, zk_connect=target_zk)
    res = _run("topics", "create", "--zookeeper", dc1_zk, "--topic", TOPIC, "--partitions", "2")
    assert res.returncode == 0, res.stderr
    szk = start_kazoo(dc1_zk, connection_timeout_ms=30_000)
    tzk = start_kazoo(target_zk, connection_timeout_ms=30_000)
    mirror = MirrorProcess(tmp_path, {"sources": "dc1", "source.dc1.zk.connect": dc1_zk,
                                      "target.zk.connect": target_zk, "target.replication.factor": 1,
                                      "target.partitions.reserve": 1, "mirror.id": "m-grow",
                                      "checkpoint.interval.ms": 150, "topic.refresh.ms": 500,
                                      "zk.sessiontimeout.ms": 3000})
    try:
        for p in range(2):
            r.wait_for_leader_state(szk, TOPIC, p)
        produce_tagged(_bootstrap(dc1), TOPIC, range(2), "before")
        mirror.start()
        wait_until(lambda: tzk.exists(znodes.topic_dir(TOPIC)) and
                   all(end_or_none(kafka_bootstrap(tzk), TOPIC, p) == 5 for p in range(2)), timeout=60,
                   what="the first 2 partitions mirrored")
        assert len(znodes.parse_assignment(tzk.get(znodes.topic_dir(TOPIC))[0])) == 3   # 2 + 1 spare

        res = _run("topics", "alter", "--zookeeper", dc1_zk, "--topic", TOPIC, "--partitions", "5")
        assert res.returncode == 0, res.stderr
        for p in range(2, 5):
            r.wait_for_leader_state(szk, TOPIC, p)
        produce_tagged(_bootstrap(dc1), TOPIC, range(5), "after")

        target_at = kafka_bootstrap(tzk)
        wait_until(lambda: all(end_or_none(target_at, TOPIC, p) == (10 if p < 2 else 5) for p in range(5)), timeout=90,
                   what="the 5 source partitions mirrored to target partitions 0..4")
        for p in range(5):
            assert batches(target_at, TOPIC, p) == batches(_bootstrap(dc1), TOPIC, p), f"target partition {p}"
        assert len(znodes.parse_assignment(tzk.get(znodes.topic_dir(TOPIC))[0])) == 6    # 5 + the reserve
        data, _ = tzk.get(znodes.mirror_mapping_path("mirror", TOPIC))
        assert [(x["partition"], x["target_partition"]) for x in json.loads(data)["partitions"]] == [
            (p, p) for p in range(5)]
        assert "fallback" not in mirror.output().split("target topic kgrow: 3 -> 6")[-1], mirror.output()[-3000:]
        assert mirror.stop() == 0
    finally:
        mirror.kill()
        for c in (szk, tzk):
            c.stop()
            c.close()
