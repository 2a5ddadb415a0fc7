"""The mirror between clusters with the authorizer on: 0.7 topics into a secured target, gaps of a secured source.

Such a target refuses APPEND_AT on its 0.7 port (docs/security.md, "The 0.7 port"); the mirror sends it to
the target leader's Kafka listener as the private key AppendAt07 (10002), which needs ClusterAction on the
target cluster. On PLAINTEXT every connection is User:ANONYMOUS, so the ACL names the host the mirror and
the brokers connect from (127.0.0.1); the target topic is replicated (factor 2, acks=-1), so its followers
replicate over the Kafka listener too.
"""
from __future__ import annotations

import threading

import pytest

from ingest.client.discovery import start_kazoo
from ingest.client.simple_consumer import SimpleConsumer
from ingest.mirror import gaps as lr
from ingest.mirror.mapping import ensure_mapping
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.kafka import authz
from tests.harness.wait import wait_until
from tests.mirror.copier_support import Mirror, payload, produce_07
from tests.mirror.copier_support import target_zk_connect  # noqa: F401  (fixture)
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import TargetCluster, chroot, latest, produce, read_partition, wait_mirrored

pytestmark = pytest.mark.processes


def test_the_mirror_copies_a_07_topic_into_a_target_with_the_authorizer_on(zookeeper, broker_factory,  # noqa: F811
                                                                            tmp_path):
    source_zk, target_zk = chroot(zookeeper, "src"), chroot(zookeeper, "secured")
    zk = start_kazoo(target_zk, connection_timeout_ms=30_000)
    try:
        authz.brokers_acl(zk)   # the brokers' and the mirror's ClusterAction (both ANONYMOUS from 127.0.0.1)
    finally:
        zk.stop()
        zk.close()
    (src,) = broker_factory(1, zk_connect=source_zk, num_partitions=1)
    broker_factory(2, zk_connect=target_zk, overrides={"authorizer.class.name": authz.AUTHORIZER})
    for i in range(3):
        produce(src, "events", 0, [b"event-%d-" % i + b"x" * i for _ in range(5)])
    props = {"sources": "dc1", "source.dc1.zk.connect": source_zk, "target.zk.connect": target_zk,
             "target.replication.factor": 2, "mirror.id": "m-secured", "topic.refresh.ms": 500,
             "checkpoint.interval.ms": 150}
    mirror = MirrorProcess(tmp_path, props)
    target = TargetCluster(target_zk)
    try:
        mirror.start()
        end = latest(src.host, src.port, "events", 0)
        wait_mirrored(target, {("events", 0): end}, timeout=90)
        assert target.read("events", 0) == read_partition(src.host, src.port, "events", 0)
        assert "CLUSTER_AUTHORIZATION_FAILED" not in mirror.output()
        assert mirror.stop() == 0
    finally:
        mirror.kill()
        target.close()


def test_a_secured_source_still_answers_the_mirrors_deleted_segments_on_its_07_port(
        broker_factory, zk_connect, target_zk_connect):  # noqa: F811
    """DELETED_SEGMENTS is a read (what OFFSETS shows too), not a broker-only request: a source with the
    authorizer on answers it on its 0.7 port, so a retention gap is still recorded as retention, exactly."""
    zk = _kazoo(zk_connect)
    try:
        authz.brokers_acl(zk)
    finally:
        zk.stop()
        zk.close()
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1, log_file_size=4096,
                            log_retention_size=9000, log_retention_check_interval_ms=100,
                            authorizer_class_name=authz.AUTHORIZER)
    broker_factory(n=1, zk_connect=target_zk_connect)
    for i in range(150):
        produce_07(src, "gone", 0, [payload("s", 4 * i + k) for k in range(4)])
    wait_until(lambda: _earliest(src) > 0, 30, "retention to delete")
    m = Mirror(zk_connect, target_zk_connect)
    try:
        (unit,) = ensure_mapping(m.zk, "g", "gone", ["dc1"], {"dc1": [(0, 0)]}).units
        copier = m.copier(unit)
        stop = threading.Event()
        t = threading.Thread(target=copier.run, args=(stop,), daemon=True)
        t.start()
        try:
            wait_until(lambda: lr.recorded_lost_ranges(m.zk, "g") or not t.is_alive(), 60, "the lost range")
        finally:
            stop.set()
            t.join(30)
        (record,) = lr.recorded_lost_ranges(m.zk, "g")
        assert (record["start_offset"], record["cause"], record["messages_exact"]) == (0, "retention", True), record
    finally:
        m.close()


def _kazoo(connect: str):
    return start_kazoo(connect, connection_timeout_ms=30_000)


def _earliest(broker) -> int:
    with SimpleConsumer(broker.host, broker.port) as c:
        return c.earliest_offset("gone", 0)
