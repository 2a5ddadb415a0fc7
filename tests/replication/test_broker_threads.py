"""A broker's fixed threads: one scheduler pool for its periodic and background work and one timer for both
purgatories, so a broker of a 3-broker cluster runs at most 19 threads (docs/replication.md, "Threads").

Real ZooKeeper, three real broker processes, a Kafka topic of 6 partitions with replication factor 3 and
each broker preferred leader of two, so each broker leads and copies from both others
(``num.replica.fetchers=1``: one fetcher thread per leader), the shape of the scale bench
(bench/bench_scale.py, whose fixed threads do not depend on the partition count). What is proven, counted
in each real broker process by the threads' OS names (``/proc/PID/task/*/comm``):

- the periodic and background work runs on exactly ``background.threads`` threads (``scheduler-<i>``),
  and the deadlines of the 0.7 port's and the Kafka listener's delayed requests on one timer thread
  (``purgatory-timer``);
- every broker runs at most 17 threads besides its 2 fetcher threads, 19 in all (the code before ran 21
  and 23);
- the work is still done: an acks=all producer writes to every partition and a 0.7 producer to an
  unreplicated 0.7 topic (registered in ZooKeeper by the topic registrar task), the 0.7 messages become
  visible to a consumer (the flusher task: a 0.7 message is visible once flushed), and a Kafka consumer
  reads every partition back (its fetches wait in the purgatory).
"""
from __future__ import annotations

import collections
from pathlib import Path

import pytest

from ingest import znodes
from ingest.client.producer import Producer as Producer07
from ingest.client.simple_consumer import SimpleConsumer
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until

pytestmark = pytest.mark.processes

TOPIC = "spread"
PARTITIONS = 6
MOST_FIXED = 17
"""Threads a broker runs besides its replica fetchers, at most (the code before ran 21)."""


def thread_names(broker) -> collections.Counter:
    """The broker process's threads by OS name (15 bytes at most; unnamed threads show the process's)."""
    names: collections.Counter = collections.Counter()
    for task in Path(f"/proc/{broker.pid}/task").iterdir():
        try:
            names[(task / "comm").read_text().strip()] += 1
        except OSError:   # the thread ended meanwhile
            continue
    return names


def test_a_broker_runs_its_background_work_on_the_scheduler_pool_and_one_purgatory_timer(
        broker_factory, zk_connect, zk):
    from confluent_kafka import Consumer, Producer, TopicPartition

    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(
        min_isr=2, **{"num.replica.fetchers": 1, "num.threads": 2, "background.threads": 2,
                      "log.default.flush.interval.ms": 200, "log.flush.interval": 10_000}))
    ids = [0, 1, 2]
    zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value(
        {p: ids[p % 3:] + ids[:p % 3] for p in range(PARTITIONS)}, znodes.KAFKA_FORMAT), makepath=True)
    for p in range(PARTITIONS):
        r.wait_for_state(zk, TOPIC, p, lambda s: s.leader == p % 3 and set(s.isr) == set(ids), 120,
                         f"{TOPIC}-{p}: led by broker {p % 3}, all three in sync")

    for b in brokers:
        others = [i for i in ids if i != b.broker_id]
        wait_until(lambda: {n: c for n, c in thread_names(b).items() if n.startswith("fetcher-")}
                   == {f"fetcher-0-{i}": 1 for i in others}, timeout=60,
                   what=f"broker {b.broker_id}: one fetcher thread towards each other broker: {thread_names(b)}")
        names = thread_names(b)
        fixed = sum(names.values()) - 2
        print(f"broker {b.broker_id}: {sum(names.values())} threads, {fixed} besides its fetchers: {dict(names)}")
        assert fixed <= MOST_FIXED, f"broker {b.broker_id} runs {fixed} threads besides its fetchers: {names}"
        assert {n: c for n, c in names.items() if n.startswith("scheduler-")} == {"scheduler-0": 1,
                                                                                   "scheduler-1": 1}, names
        assert names["purgatory-timer"] == 1, names

    # the work those threads did is still done
    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    failed = []
    for p in range(PARTITIONS):
        producer.produce(TOPIC, value=f"v{p}".encode(), partition=p,
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "threads", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 300})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got = set()
        wait_until(lambda: got.update(m.value() for m in consumer.consume(10, timeout=1.0) if m.error() is None)
                   or len(got) == PARTITIONS, timeout=60, what=f"every partition's value read back: {got}")
    finally:
        consumer.close()

    # 0.7: the topic registrar writes the topic's node; the flusher makes the message visible
    b0 = brokers[0]
    with Producer07({"broker.list": b0.address}) as p07:
        p07.send("legacy", [b"old-style"])
    wait_until(lambda: zk.exists(znodes.topic_path("legacy", b0.broker_id)) is not None, timeout=60,
               what="the 0.7 topic registered in ZooKeeper by the topic registrar")
    with SimpleConsumer(b0.host, b0.port) as c07:
        wait_until(lambda: c07.latest_offset("legacy", 0) > 0, timeout=60,
                   what="the 0.7 message visible once the flusher task flushed it")
        [message] = list(c07.iter_range("legacy", 0, 0, c07.latest_offset("legacy", 0)))
        assert message.payload == b"old-style"
