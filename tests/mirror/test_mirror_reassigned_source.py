"""A mirrored source partition whose first replica a reassignment moves, under a running ``ingest mirror``.

One source cluster (brokers 0 and 1, ZooKeeper) holds a Kafka topic and a replicated 0.7 topic, each with
partition 0 on broker 0 and partition 1 on broker 1; the mirror copies them one to one to a target cluster
(target partition 0 for source ``0-0``, 1 for ``1-1``). ``ingest topics reassign --execute --wait`` then moves
partition 0 of both to broker 1, so its name (its home broker, the first replica) becomes ``1-0``. After more
messages are produced, every target partition holds exactly its source partition's log, byte for byte (the
Kafka batches at the same offsets, the 0.7 message sets at the same byte positions): the moved partition went
on in its own target partition from where its former home's checkpoint stood, nothing was copied twice, and no
spare target partition was used. Without the carry-over the moved partition looks new to the mirror: it takes a
spare target partition and is copied again from its log start, and target partition 0 stops growing.
"""
from __future__ import annotations

import json

import pytest

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.mirror.kafka_io import kafka_bootstrap
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.replication_topics import create_replicated_topic, metadata_of, produce_acked
from tests.harness.wait import wait_until
from tests.mirror.kafka_records import end_or_none, produce_tagged
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import TargetCluster, chroot, read_partition
from tests.mirror.test_mirror_kafka_kills import _bootstrap, batches
from tests.replication.test_reassignment import _plan_file, _reassign

pytestmark = pytest.mark.processes

KTOPIC, OTOPIC = "kmoved", "omoved"


def _produce_07(md, tag: str) -> None:
    for part in (0, 1):
        produce_acked(md, OTOPIC, part, [f"{tag}-{part}-{i}".encode() for i in range(5)])


def _mapped(tzk, topic: str) -> list[tuple[int, int, int | None]]:
    data, _ = tzk.get(znodes.mirror_mapping_path("mirror", topic))
    return sorted((x["broker_id"], x["partition"], x["target_partition"]) for x in json.loads(data)["partitions"])


def test_a_moved_first_replica_goes_on_in_its_target_partition_exactly_once(zookeeper, broker_factory,  # noqa: F811
                                                                            tmp_path):
    dc1_zk, target_zk = chroot(zookeeper, "rdc1"), chroot(zookeeper, "rtarget")
    source = broker_factory(2, zk_connect=dc1_zk, overrides=r.replication_overrides(min_isr=1))
    broker_factory(1, zk_connect=target_zk)
    szk = start_kazoo(dc1_zk, connection_timeout_ms=30_000)
    tzk = start_kazoo(target_zk, connection_timeout_ms=30_000)
    target = TargetCluster(target_zk)
    mirror = MirrorProcess(tmp_path, {"sources": "dc1", "source.dc1.zk.connect": dc1_zk,
                                      "target.zk.connect": target_zk, "target.replication.factor": 1,
                                      "target.partitions.reserve": 2, "mirror.id": "m-moved",
                                      "checkpoint.interval.ms": 150, "topic.refresh.ms": 500,
                                      "zk.sessiontimeout.ms": 3000})
    try:
        szk.retry(szk.create, znodes.topic_dir(KTOPIC),
                  znodes.assignment_value({0: [0], 1: [1]}, znodes.KAFKA_FORMAT), makepath=True)
        create_replicated_topic(szk, OTOPIC, {0: [0], 1: [1]})
        for topic in (KTOPIC, OTOPIC):
            for p in (0, 1):
                r.wait_for_leader_state(szk, topic, p)
        md = metadata_of(source)
        src_bootstrap = ",".join(_bootstrap(b) for b in source)
        produce_tagged(src_bootstrap, KTOPIC, (0, 1), "before")
        _produce_07(md, "before")
        mirror.start()

        def source_07(p: int) -> bytes:
            leader = md.leader(OTOPIC, p, refresh=True)
            return read_partition(leader.host, leader.port, OTOPIC, p)

        def mirrored() -> bool:
            at = kafka_bootstrap(tzk)
            return (all(end_or_none(at, KTOPIC, p) == end_or_none(src_bootstrap, KTOPIC, p) for p in (0, 1))
                    and all(target.end(OTOPIC, p) == len(source_07(p)) for p in (0, 1)))

        wait_until(mirrored, timeout=90, what="both topics mirrored before the move")
        assert _mapped(tzk, KTOPIC) == _mapped(tzk, OTOPIC) == [(0, 0, 0), (1, 1, 1)]

        plan = _plan_file(tmp_path, {(KTOPIC, 0): [1], (OTOPIC, 0): [1]})
        done = _reassign(dc1_zk, "--execute", "--plan", plan, "--wait", "120")
        assert done.returncode == 0, done.stdout + done.stderr
        for topic in (KTOPIC, OTOPIC):
            assert znodes.parse_assignment(szk.get(znodes.topic_dir(topic))[0]) == {0: (1,), 1: (1,)}
            r.wait_for_leader_state(szk, topic, 0, among=[1])
        produce_tagged(src_bootstrap, KTOPIC, (0, 1), "after")
        _produce_07(md, "after")

        wait_until(lambda: all((1, 0, 0) in _mapped(tzk, t) for t in (KTOPIC, OTOPIC)) and mirrored(), timeout=120,
                   what="the moved partition 1-0 mirrored on in target partition 0")
        at = kafka_bootstrap(tzk)
        for p in (0, 1):
            assert batches(at, KTOPIC, p) == batches(src_bootstrap, KTOPIC, p), f"{KTOPIC} target partition {p}"
            assert target.read(OTOPIC, p) == source_07(p), f"{OTOPIC} target partition {p}"
        for topic, end in ((KTOPIC, lambda p: end_or_none(at, KTOPIC, p)), (OTOPIC, lambda p: target.end(OTOPIC, p))):
            assert _mapped(tzk, topic) == [(0, 0, 0), (1, 0, 0), (1, 1, 1)]
            assert len(znodes.parse_assignment(tzk.get(znodes.topic_dir(topic))[0])) == 4, topic   # 2 + 2 spare
            assert [end(p) for p in (2, 3)] == [0, 0], f"{topic}: a spare target partition was used"
        out = mirror.output()
        assert out.count("(reassigned); resuming from the checkpoint under home broker 0") == 2, out[-3000:]
        assert mirror.stop() == 0
    finally:
        mirror.kill()
        target.close()
        for c in (szk, tzk):
            c.stop()
            c.close()
