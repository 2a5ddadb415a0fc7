"""Exactly-once mirroring of Kafka topics under repeated mirror SIGKILLs, end to end with real processes.

Two source clusters (datacenters, one broker each, ZooKeeper) hold a Kafka topic of two partitions that
confluent-kafka producers keep publishing to (keys, headers; dc2's producer compresses with gzip) while
the ``ingest mirror`` process is SIGKILLed at random moments and restarted. The target cluster (two
brokers) gets the topic as a Kafka topic, replicated (factor 2, acks=-1), from the mirror. Afterwards,
read through the Kafka listeners: every target partition holds exactly its source partition's record
batches at the same offsets, byte for byte from the magic byte on (the partition leader epoch, outside
the CRC, is the target leader's), so no offset was copied twice and none was lost.

``test_mirror_of_kafka_topics_sigkilled_...`` kills a few times; the slow one
``INGEST_MIRROR_KAFKA_KILLS`` times (8 in the suite, 24 for the proof run).
"""
from __future__ import annotations

import json
import os
import random
import threading

import pytest

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.mirror.kafka_io import kafka_bootstrap
from ingest.records.batch import MAGIC_OFFSET
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until
from tests.mirror.mirror_procs import MirrorProcess
from tests.mirror.mirror_setup import chroot

pytestmark = pytest.mark.processes

TOPIC = "kevents"
SLOW_KILLS = int(os.environ.get("INGEST_MIRROR_KAFKA_KILLS", "8"))


def _bootstrap(b) -> str:
    return f"{b.host}:{b.kafka_port}"


def _kafka_topic(zk_connect: str, broker_id: int) -> None:
    """A two-partition Kafka topic led by ``broker_id``, as ``ingest topics create --format kafka`` writes it."""
    zk = start_kazoo(zk_connect, connection_timeout_ms=30_000)
    try:
        zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value({0: [broker_id], 1: [broker_id]},
                                                                             znodes.KAFKA_FORMAT), makepath=True)
        for p in (0, 1):
            r.wait_for_leader_state(zk, TOPIC, p)
    finally:
        zk.stop()
        zk.close()


def batches(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """``(base offset, batch bytes from the magic byte on)`` of every batch of the partition, log start to end."""
    out = []
    with KafkaFetcher(bootstrap_servers=bootstrap, fetch_max_wait_ms=0) as f:
        pos, end = f.earliest(topic, partition), f.latest(topic, partition)
        while pos < end:
            got = f.fetch(topic, partition, pos)
            assert got.batches, f"{topic}-{partition}: nothing at {pos} (end {end})"
            for p, h in got.batches:
                out.append((h.base_offset, bytes(got.data[p + MAGIC_OFFSET:p + h.size])))
            pos = got.next_offset
    return out


def _end(bootstrap: str, partition: int) -> int | None:
    try:
        with KafkaFetcher(bootstrap_servers=bootstrap, request_timeout_ms=3000) as f:
            return f.latest(TOPIC, partition)
    except Exception:  # noqa: BLE001 - the target topic may not exist yet
        return None


class Publisher(threading.Thread):
    """confluent-kafka, acks=all: ``<name>-<n>`` values with a key and a header to partitions 0 and 1."""

    def __init__(self, name: str, bootstrap: str, **config) -> None:
        super().__init__(name=f"publish-{name}", daemon=True)
        from confluent_kafka import Producer

        self.tag = name
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})
        self.acked = 0
        self.failed: list[str] = []
        self.halt = threading.Event()

    def _done(self, err, _msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed.append(str(err))

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            try:
                self.producer.produce(TOPIC, value=f"{self.tag}-{i}-".encode() + b"x" * (i % 300),
                                      key=f"k{i % 13}".encode(), headers=[("n", str(i).encode())],
                                      partition=i % 2, on_delivery=self._done)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if i % 20 else 0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert self.producer.flush(60) == 0


def _checkpoint_behind_target(zk, source: str, broker_id: int, partition: int, target_bootstrap: str,
                              tp: int) -> bool:
    try:
        data, _ = zk.get(znodes.mirror_checkpoint_path("mirror", source, TOPIC, broker_id, partition))
    except Exception:  # noqa: BLE001 - no checkpoint yet
        return False
    end = _end(target_bootstrap, tp)
    return end is not None and end > json.loads(data)["target_offset"]


def run_kills(zookeeper, broker_factory, tmp_path, kills: int, seed: int) -> None:  # noqa: F811
    rng = random.Random(seed)
    dc1_zk, dc2_zk, target_zk = chroot(zookeeper, "kdc1"), chroot(zookeeper, "kdc2"), chroot(zookeeper, "ktarget")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk)
    (dc2,) = broker_factory(1, zk_connect=dc2_zk)
    broker_factory(2, zk_connect=target_zk)
    _kafka_topic(dc1_zk, dc1.broker_id)
    _kafka_topic(dc2_zk, dc2.broker_id)
    publishers = [Publisher("dc1", _bootstrap(dc1)), Publisher("dc2", _bootstrap(dc2), **{"compression.type": "gzip"})]
    props = {"sources": "dc1,dc2", "source.dc1.zk.connect": dc1_zk, "source.dc2.zk.connect": dc2_zk,
             "target.zk.connect": target_zk, "target.replication.factor": 2, "mirror.id": "m-kafka-kill",
             "checkpoint.interval.ms": 150, "topic.refresh.ms": 500, "zk.sessiontimeout.ms": 3000,
             "fetch.size": 4096}
    mirror = MirrorProcess(tmp_path, props)
    tzk = start_kazoo(target_zk, connection_timeout_ms=30_000)
    pause = threading.Event()   # never set: a wait of a random length
    try:
        for p in publishers:
            p.start()
        wait_until(lambda: all(p.acked > 50 for p in publishers), timeout=60, what="both producers publishing")
        ahead = 0
        target_at = None
        sources = [("dc1", dc1, 0), ("dc1", dc1, 1), ("dc2", dc2, 0), ("dc2", dc2, 1)]   # target partitions 0..3
        for _ in range(kills):
            mirror.start(wait=False)
            pause.wait(rng.uniform(0.3, 2.5))     # kills land in start-up, topic creation, copying, checkpoints
            mirror.kill()
            assert mirror.proc.returncode == -9, mirror.output()[-3000:]
            if target_at is None:
                try:
                    target_at = kafka_bootstrap(tzk)
                except Exception:  # noqa: BLE001 - no target broker registered its listener yet
                    pass
            if target_at is not None:
                ahead += any(_checkpoint_behind_target(tzk, name, b.broker_id, p, target_at, tp)
                             for tp, (name, b, p) in enumerate(sources))
        for p in publishers:
            p.stop()
            assert not p.failed, p.failed[:5]
        mirror.start()
        target_at = kafka_bootstrap(tzk)
        ends = {tp: _end(_bootstrap(b), p) for tp, (_name, b, p) in enumerate(sources)}
        wait_until(lambda: all(_end(target_at, tp) == end for tp, end in ends.items()), timeout=180,
                   what=f"target partitions at the source ends {ends}")
        total = 0
        for tp, (_name, b, p) in enumerate(sources):
            source = batches(_bootstrap(b), TOPIC, p)
            target = batches(target_at, TOPIC, tp)
            assert [o for o, _ in target] == [o for o, _ in source], f"target partition {tp}: other batch offsets"
            assert target == source, f"target partition {tp} differs from its source"
            total += ends[tp]
        assert total == sum(p.acked for p in publishers)           # every acknowledged record, once
        data, _ = tzk.get(znodes.topic_dir(TOPIC))
        assert znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT   # created as a Kafka topic
        assert len(znodes.parse_assignment(data)) == 4 + 4 and len(znodes.parse_assignment(data)[0]) == 2
        assert mirror.stop() == 0
        assert mirror.starts == kills + 1
        print(f"{kills} kills, {total} records mirrored, {ahead} kills with the target ahead of a checkpoint")
    finally:
        for p in publishers:
            p.halt.set()
        mirror.kill()
        tzk.stop()
        tzk.close()


def test_mirror_of_kafka_topics_sigkilled_5_times_copies_every_batch_once_at_its_offsets(zookeeper, broker_factory,  # noqa: F811
                                                                                         tmp_path):
    run_kills(zookeeper, broker_factory, tmp_path, kills=5, seed=2605)


@pytest.mark.slow
def test_mirror_of_kafka_topics_sigkilled_many_times_copies_every_batch_once_at_its_offsets(  # noqa: F811
        zookeeper, broker_factory, tmp_path):
    run_kills(zookeeper, broker_factory, tmp_path, kills=SLOW_KILLS, seed=2606)
