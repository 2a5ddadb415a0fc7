"""The mirror copies a 0.7 topic into a target cluster with the authorizer on.

Such a target refuses APPEND_AT on its 0.7 port (docs/security.md, "The 0.7 port"); the mirror sends it to
the target leader's Kafka listener as the private key AppendAt07 (10002), which needs ClusterAction on the
target cluster. On PLAINTEXT every connection is User:ANONYMOUS, so the ACL names the host the mirror and
the brokers connect from (127.0.0.1); the target topic is replicated (factor 2, acks=-1), so its followers
replicate over the Kafka listener too.
"""
from __future__ import annotations

import pytest

from ingest.client.discovery import start_kazoo
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.kafka import authz
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
