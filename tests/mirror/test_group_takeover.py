"""Two real ``ingest mirror`` processes share the partitions of two source clusters (one found through
ZooKeeper, one through a broker list); one is SIGKILLed while producers write, the other takes its
partitions over; a topic created while running is mirrored; blacklisted topics and the mirror's own
topics are not. At the end every target partition is byte for byte its source partition: every
message exactly once."""
from __future__ import annotations

import itertools
import json

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.mirror.group import read_members
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import TargetCluster, chroot, latest, produce, read_partition, wait_mirrored


def test_sigkilled_member_is_taken_over_and_every_message_is_mirrored_once(zookeeper, broker_factory,  # noqa: F811
                                                                            tmp_path):
    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=2)
    (dc2,) = broker_factory(1, num_partitions=2)
    (tb,) = broker_factory(1, zk_connect=target_zk)
    seq = itertools.count()
    src = {("dc1", p): dc1 for p in (0, 1)} | {("dc2", p): dc2 for p in (0, 1)}

    def batch(n: int = 20) -> None:
        for (name, p), b in src.items():
            produce(b, "clicks", p, [f"{name}-{p}-{next(seq)}".encode() * 3 for _ in range(n)])

    batch()
    produce(dc1, "audit-mirror", 0, [b"the mirror's own topic"])
    produce(dc2, "clicks-test", 0, [b"blacklisted"])
    props = {"sources": "dc1,dc2", "source.dc1.zk.connect": dc1_zk, "source.dc2.broker.list": dc2.address,
             "target.zk.connect": target_zk, "whitelist": "clicks.*|orders", "blacklist": ".*-test",
             "zk.sessiontimeout.ms": 3000, "checkpoint.interval.ms": 200, "topic.refresh.ms": 500,
             "status.log.interval.ms": 1000}
    a = MirrorProcess(tmp_path / "a", {**props, "mirror.id": "m-a"}, "m-a")
    b = MirrorProcess(tmp_path / "b", {**props, "mirror.id": "m-b"}, "m-b")
    zk = start_kazoo(target_zk, connection_timeout_ms=30_000)
    target = TargetCluster(target_zk)
    try:
        a.start()
        b.start()
        units = [f"dc1:clicks:{dc1.broker_id}-0", f"dc1:clicks:{dc1.broker_id}-1", f"dc2:clicks:{dc2.broker_id}-0", f"dc2:clicks:{dc2.broker_id}-1"]
        wait_until(lambda: {m: d["units"] for m, d in read_members(zk, "mirror").items()} ==
                   {"m-a": units[:2], "m-b": units[2:]}, what="m-a and m-b own two partitions each")
        # mapping: sources in config order, each sorted by (broker, partition)
        mapping = json.loads(zk.get(znodes.mirror_mapping_path("mirror", "clicks"))[0])
        assert [(x["source"], x["partition"], x["target_partition"]) for x in mapping["partitions"]] == [
            ("dc1", 0, 0), ("dc1", 1, 1), ("dc2", 0, 2), ("dc2", 1, 3)]
        batch()
        a.kill()   # SIGKILL while its partitions have data to copy
        batch()
        wait_until(lambda: {m: d["units"] for m, d in read_members(zk, "mirror").items()} == {"m-b": units},
                   what="m-b owns every partition after m-a's session expired", timeout=30)
        batch()
        # a new topic on a running source (ZooKeeper-watched) is mirrored too
        produce(dc1, "orders", 0, [b"order-1", b"order-2"])
        produce(dc1, "orders", 1, [b"order-3"])
        expected = {("clicks", tp): latest(s.host, s.port, "clicks", p)
                    for tp, ((_, p), s) in enumerate(sorted(src.items(), key=lambda kv: kv[0]))}
        expected |= {("orders", p): latest(dc1.host, dc1.port, "orders", p) for p in (0, 1)}
        wait_mirrored(target, expected)
        for tp, ((_, p), s) in enumerate(sorted(src.items(), key=lambda kv: kv[0])):
            assert target.read("clicks", tp) == read_partition(s.host, s.port, "clicks", p), f"clicks {tp}"
        assert target.partitions("clicks") == 4 and target.partitions("orders") == 2
        for t in ("audit-mirror", "clicks-test"):
            assert not zk.exists(znodes.mirror_mapping_path("mirror", t)) and not zk.exists(znodes.topic_dir(t))
        assert b.stop() == 0
        assert read_members(zk, "mirror") == {}
        assert "mirror lag dc2:clicks:" in b.output()
    finally:
        for m in (a, b):
            m.kill()
        target.close()
        zk.stop()
        zk.close()
