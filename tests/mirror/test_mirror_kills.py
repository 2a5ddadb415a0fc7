"""The proof of exactly-once mirroring: producers publish to two source clusters while the mirror
process is SIGKILLed at random moments (``INGEST_MIRROR_KILLS`` times: 10 in the suite, 30 for the proof
run; restarted each time, kills landing in
start-up, topic creation, copying and checkpointing alike). The target topic is replicated (factor 2,
acks=-1); one source is found through ZooKeeper, the producers of the other compress with gzip.
Afterwards every target partition holds
exactly the bytes of its source partition: every source message once, none lost, none twice, and
compressed wrappers copied as they are."""
from __future__ import annotations

import json
import os
import random
import threading

import pytest

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.client.producer import Producer
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import TargetCluster, chroot, latest, produce, read_partition, wait_mirrored

KILLS = int(os.environ.get("INGEST_MIRROR_KILLS", "10"))


def target_ahead(target: TargetCluster, source: str, broker_id: int, partition: int, tp: int) -> bool:
    """The target partition ends beyond the target offset of the unit's checkpoint (a restart must skip
    what the killed process appended after it)."""
    try:
        data, _ = target.zk.get(znodes.mirror_checkpoint_path("mirror", source, "events", broker_id, partition))
    except NoNodeError:
        return False
    end = target.end("events", tp)
    return end is not None and end > json.loads(data)["target_offset"]


@pytest.mark.slow
def test_mirror_sigkilled_many_times_copies_every_message_exactly_once(zookeeper, broker_factory,  # noqa: F811
                                                                     tmp_path):
    rng = random.Random(1313)
    dc1_zk, dc2_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "dc2"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=2)
    (dc2,) = broker_factory(1, zk_connect=dc2_zk, num_partitions=2)
    broker_factory(2, zk_connect=target_zk)   # the target topic is replicated: factor 2, acks=-1
    for b in (dc1, dc2):          # the topic exists on every source before the mirror first sees it
        for p in (0, 1):
            produce(b, "events", p, [b"first"])
    stop = threading.Event()
    sent = {"dc1": 0, "dc2": 0}
    errors: list[BaseException] = []

    def publish(name: str, config: dict) -> None:
        try:
            with Producer({**config, "producer.type": "sync", "request.required.acks": 1}) as producer:
                i = 0
                while not stop.is_set():
                    n = 1 + i % 7
                    producer.send("events", [f"{name}-{i + k}-".encode() + b"x" * (i % 300) for k in range(n)])
                    i += n
                    sent[name] = i
                    stop.wait(0.005)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    producers = [threading.Thread(target=publish, args=("dc1", {"zk.connect": dc1_zk, "topic.format.default": "0.7"}), daemon=True),
                 threading.Thread(target=publish, args=("dc2", {"broker.list": dc2.address,
                                                                "compression.codec": "gzip"}), daemon=True)]
    props = {"sources": "dc1,dc2", "source.dc1.zk.connect": dc1_zk, "source.dc2.zk.connect": dc2_zk,
             "target.zk.connect": target_zk, "target.replication.factor": 2, "mirror.id": "m-kill", "checkpoint.interval.ms": 150,
             "topic.refresh.ms": 500, "zk.sessiontimeout.ms": 3000, "fetch.size": 4096}
    mirror = MirrorProcess(tmp_path, props)
    target = TargetCluster(target_zk)
    try:
        for t in producers:
            t.start()
        ahead = 0   # kills after which the target was ahead of a checkpoint: the resume rule was needed
        for _ in range(KILLS):
            mirror.start(wait=False)
            stop.wait(rng.uniform(0.3, 2.5))
            mirror.kill()
            assert mirror.proc.returncode == -9, mirror.output()[-3000:]
            ahead += any(target_ahead(target, name, b.broker_id, p, tp)
                         for tp, (name, b, p) in enumerate([("dc1", dc1, 0), ("dc1", dc1, 1), ("dc2", dc2, 0),
                                                            ("dc2", dc2, 1)]))
        stop.set()
        for t in producers:
            t.join(30)
        assert not errors, errors
        assert sent["dc1"] > 0 and sent["dc2"] > 0
        mirror.start()
        sources = [(dc1, 0), (dc1, 1), (dc2, 0), (dc2, 1)]   # the mapping's order: target partitions 0..3
        ends = {("events", tp): latest(b.host, b.port, "events", p) for tp, (b, p) in enumerate(sources)}
        wait_mirrored(target, ends, timeout=120)
        for tp, (b, p) in enumerate(sources):
            source_bytes = read_partition(b.host, b.port, "events", p)
            assert len(source_bytes) == ends[("events", tp)]
            assert target.read("events", tp) == source_bytes, f"target partition {tp} differs from its source"
        assert target.partitions("events") == 4 + 4   # the mapping's 4 and max(4, 4) spares
        assert mirror.stop() == 0
        assert mirror.starts == KILLS + 1
        print(f"{KILLS} kills: {mirror.output().count(' running in group ')} after start-up, "
              f"{ahead} with the target ahead of a checkpoint")
    finally:
        stop.set()
        mirror.kill()
        target.close()
