"""A real ``ingest mirror`` process with ``metrics.port=0``: copied messages and bytes, checkpoints, lag.

One source broker (ZooKeeper chroot dc1), one target broker; ``N`` messages of known
size in one partition. Once the target holds them, the scrape must show exactly ``N``
messages and their bytes copied for the topic, at least one checkpoint written, no
failure, one owned partition, and (once sampled) a lag of 0 bytes for it.
"""
from __future__ import annotations

from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import TargetCluster, chroot, produce, wait_mirrored
from tests.harness.metrics import metrics_url, scrape_until, series, undocumented, value

N = 30
TOPIC = "clicks"


def test_mirror_series_after_a_real_copy(zookeeper, broker_factory, tmp_path):  # noqa: F811
    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=1)
    broker_factory(1, zk_connect=target_zk)
    size = produce(dc1, TOPIC, 0, [f"click-{i:04d}".encode() * 5 for i in range(N)])
    mirror = MirrorProcess(tmp_path, {"sources": "dc1", "source.dc1.zk.connect": dc1_zk,
                                      "target.zk.connect": target_zk, "mirror.id": "m-metrics",
                                      "checkpoint.interval.ms": 100, "topic.refresh.ms": 500,
                                      "metrics.port": 0})
    target = TargetCluster(target_zk)
    try:
        mirror.start()
        url = metrics_url(mirror.output)
        wait_mirrored(target, {(TOPIC, 0): size})
        unit = {"source": "dc1", "topic": TOPIC, "broker_id": dc1.broker_id, "partition": 0}
        m = scrape_until(url, lambda s: value(s, "ingest_mirror_lag_bytes", **unit) == 0
                         and value(s, "ingest_mirror_messages_copied_total", topic=TOPIC) == N,
                         "the copy counted and a lag of 0 sampled")
        assert value(m, "ingest_mirror_bytes_copied_total", topic=TOPIC) == size
        assert value(m, "ingest_mirror_checkpoint_writes_total", topic=TOPIC) >= 1
        assert value(m, "ingest_mirror_lost_messages_total", topic=TOPIC) == 0
        assert series(m, "ingest_mirror_copier_failures_total") == {}
        assert value(m, "ingest_mirror_owned_partitions") == 1
        assert value(m, "ingest_mirror_lag_seconds", **unit) == 0
        assert url.startswith("http://127.0.0.1:")
        assert undocumented(m, "ingest_mirror_") == []
        assert mirror.stop() == 0
    finally:
        mirror.kill()
        target.close()
