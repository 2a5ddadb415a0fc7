"""Fetcher threads per source broker: a follower of many partitions runs ``num.replica.fetchers`` threads per
leader, not one per partition, for Kafka topics and 0.7-format topics alike (docs/replication.md, "Fetcher
threads").

Real ZooKeeper, three real broker processes, a Kafka topic of 30 partitions, all on brokers 0, 1, 2 with 0
preferred (so 0 leads them all), ``num.replica.fetchers=2``, ``min.insync.replicas=2``. What is proven:

- each follower runs exactly two fetcher threads towards broker 0, counted by their OS names
  (``/proc/PID/task/*/comm``: ``fetcher-<id>-<leader>``) in the real broker process, and all 30 partitions
  are in sync (both followers in every in-sync set);
- a confluent-kafka producer with ``acks=all`` writes to all 30 partitions while broker 0 is SIGKILLed:
  leadership moves to 1 and 2, each follower now runs at most two threads per leader it copies from, the
  restarted broker 0 catches up on every partition (all 30 in-sync sets full again), and every
  acknowledged value is read back from its partition;
- a partition whose leader bytes fail their check on the follower stalls alone: the follower's one thread
  keeps copying the partition's siblings, the stall is reported in ZooKeeper, and the partition copies
  and rejoins by itself once the leader's bytes are good again;
- the same for a 0.7-format topic of 30 partitions (REPLICA_FETCHES, threads ``fetcher07-<id>-<leader>``):
  two threads per follower towards broker 0 where a thread per partition made 60 in each follower; 0.7
  acks=-1 writers (PRODUCE_ACKS, one per third partition) while broker 0 is SIGKILLed lose no acknowledged
  message (each exactly once, at its acknowledged offset, in the committed log of the partition's leader),
  and the restarted broker 0 rejoins all 30 in-sync sets.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path

import pytest

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.acked_writes import LeaderTarget, Writer, check_no_loss, errors_of
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.kafka.other_clients import high_watermarks

pytestmark = pytest.mark.processes

TOPIC = "many"
PARTITIONS = 30
FETCHERS = 2


def fetcher_threads(broker, kind: str = "fetcher") -> collections.Counter:
    """The broker process's fetcher threads by OS name (``<kind>-<fetcher id>-<leader id>``; ``fetcher`` for
    Kafka topics, ``fetcher07`` for 0.7-format topics)."""
    names: collections.Counter = collections.Counter()
    for task in Path(f"/proc/{broker.pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:   # the thread ended meanwhile
            continue
        if comm.startswith(f"{kind}-"):
            names[comm] += 1
    return names


def thread_count(broker) -> int:
    return len(os.listdir(f"/proc/{broker.pid}/task"))


def _all_in_sync(zk, ids: set[int], timeout: float = 120.0, topic: str = TOPIC) -> dict[int, znodes.PartitionState]:
    states = {}
    for p in range(PARTITIONS):
        states[p] = r.wait_for_state(zk, topic, p, lambda s: s.leader in ids and set(s.isr) == ids, timeout,
                                     f"{topic}-{p}: all of {sorted(ids)} in the isr")
    return states


class Producer(threading.Thread):
    """acks=all to every partition in turn until stopped; records the acknowledged values per partition."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="acked-producer", daemon=True)
        from confluent_kafka import Producer as CProducer

        self.producer = CProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                                   "retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 120_000,
                                   "linger.ms": 5})
        self.acked: dict[int, set[bytes]] = collections.defaultdict(set)
        self.failed: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked[msg.partition()].add(msg.value())
        else:
            self.failed.append(str(err))

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def run(self) -> None:
        while not self._halt.is_set():
            p = self.sent % PARTITIONS
            try:
                self.producer.produce(TOPIC, value=f"p{p}-{self.sent:08d}".encode(), partition=p,
                                      on_delivery=self._done)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        assert self.producer.flush(180) == 0, "messages still unanswered after 180 s"


def _read_all(bootstrap: str, ends: dict[int, int]) -> dict[int, set[bytes]]:
    """Every value of every partition below its high watermark in ``ends``, by one consumer."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "proof", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in ends])
        out: dict[int, set[bytes]] = collections.defaultdict(set)
        last = {p: -1 for p in ends}
        deadline = time.monotonic() + 120
        while any(last[p] < ends[p] - 1 for p in ends) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1.0):
                assert m.error() is None, m.error()
                out[m.partition()].add(m.value())
                last[m.partition()] = m.offset()
        return out
    finally:
        c.close()


def test_a_follower_of_30_partitions_runs_num_replica_fetchers_threads_and_fails_over(broker_factory, zk_connect,
                                                                                         zk):
    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(
        min_isr=2, **{"num.replica.fetchers": FETCHERS}))
    zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value(
        {p: [0, 1, 2] for p in range(PARTITIONS)}, znodes.KAFKA_FORMAT), makepath=True)
    ids = {0, 1, 2}
    states = _all_in_sync(zk, ids)
    assert {s.leader for s in states.values()} == {0}, "broker 0, first of every assignment, leads them all"
    for b in brokers[1:]:
        wait_until(lambda: fetcher_threads(b) == {"fetcher-0-0": 1, "fetcher-1-0": 1}, timeout=30,
                   what=f"broker {b.broker_id}'s two fetcher threads towards broker 0: {fetcher_threads(b)}")
        # about 25 (the broker's own threads and the 2 fetchers); a thread per partition made it 52
        assert thread_count(b) < 40, f"broker {b.broker_id} runs {thread_count(b)} threads"

    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)
    producer = Producer(bootstrap)
    producer.start()
    try:
        wait_until(lambda: producer.acked_count() > 300, timeout=60, what="first acknowledgements")
        before = producer.acked_count()
        brokers[0].kill()
        for p in range(PARTITIONS):
            r.wait_for_state(zk, TOPIC, p, lambda s: s.leader in (1, 2), 60, f"{TOPIC}-{p}: a new leader")
        wait_until(lambda: producer.acked_count() > before + 300, timeout=90,
                   what="acknowledgements through the new leaders")
        brokers[0].start()
        states = _all_in_sync(zk, ids)
    finally:
        producer.stop()
    assert not producer.failed, f"{len(producer.failed)} not delivered, e.g. {producer.failed[:3]}"

    leaders = {s.leader for s in states.values()}
    for b in brokers:
        threads = fetcher_threads(b)
        sources = leaders - {b.broker_id}
        assert set(threads) <= {f"fetcher-{i}-{src}" for i in range(FETCHERS) for src in sources}, threads
        assert all(n == 1 for n in threads.values()), threads

    ends = high_watermarks(bootstrap, TOPIC, list(range(PARTITIONS)))
    got = _read_all(bootstrap, ends)
    for p in range(PARTITIONS):
        missing = producer.acked[p] - got[p]
        assert not missing, f"{TOPIC}-{p}: {len(missing)} acknowledged value(s) not read back: {sorted(missing)[:3]}"


def test_a_partition_whose_leader_bytes_fail_their_check_stalls_alone_and_resumes(broker_factory, zk_connect, zk):
    """Four partitions led by broker 0, followed by broker 1 on one thread; partition 0's bytes on the leader
    are damaged while broker 1 is down. Back up, broker 1 copies partitions 1-3 (their in-sync sets fill)
    while partition 0 stalls: reported in ZooKeeper (``ingest topics describe``), out of the in-sync set.
    Once the leader's bytes are good again, partition 0 copies and rejoins, and the stall is withdrawn."""
    from confluent_kafka import Producer as CProducer

    topic = "iso"
    brokers = broker_factory(2, zk_connect, overrides=r.replication_overrides(min_isr=1))
    zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value({p: [0, 1] for p in range(4)},
                                                                          znodes.KAFKA_FORMAT), makepath=True)
    for p in range(4):
        r.wait_for_state(zk, topic, p, lambda s: s.leader == 0 and set(s.isr) == {0, 1}, 60, f"{topic}-{p} in sync")
    brokers[1].stop()
    for p in range(4):
        r.wait_for_state(zk, topic, p, lambda s: s.isr == (0,), 60, f"{topic}-{p}: broker 1 out of the isr")
    prod = CProducer({"bootstrap.servers": f"127.0.0.1:{brokers[0].kafka_port}", "acks": 1, "linger.ms": 0})
    for p in range(4):
        for i in range(5):
            prod.produce(topic, value=f"p{p}-{i}".encode() * 10, partition=p)
            prod.flush(30)   # one batch each
    assert prod.flush(30) == 0
    segment = brokers[0].log_dir / f"{topic}-0" / f"{0:020d}.log"
    good = segment.read_bytes()
    at = len(good) - 3   # inside the last batch's last record
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(bytes([good[at] ^ 0xFF]))

    brokers[1].start()
    for p in (1, 2, 3):
        r.wait_for_state(zk, topic, p, lambda s: set(s.isr) == {0, 1}, 60, f"{topic}-{p} back in sync")
    stall = znodes.replica_stall_path(topic, 0, 1)
    wait_until(lambda: zk.exists(stall), timeout=60, what="broker 1's stall on partition 0 in ZooKeeper")
    assert r.partition_state(zk, topic, 0).isr == (0,)
    assert fetcher_threads(brokers[1]) == {"fetcher-0-0": 1}

    with open(segment, "r+b") as f:   # the leader's bytes are good again
        f.seek(at)
        f.write(bytes([good[at]]))
    r.wait_for_state(zk, topic, 0, lambda s: set(s.isr) == {0, 1}, 90, f"{topic}-0 back in sync")
    wait_until(lambda: not zk.exists(stall), timeout=30, what="the stall withdrawn")


def test_a_follower_of_30_partitions_of_a_07_topic_runs_num_replica_fetchers_threads_and_fails_over(
        broker_factory, zk_connect, zk):
    topic = "many07"
    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(
        min_isr=2, lag_ms=10_000, session_ms=4_000, **{"num.replica.fetchers": FETCHERS}))
    r.create_topic(zk, topic, {p: [0, 1, 2] for p in range(PARTITIONS)})   # 0.7 format
    ids = {0, 1, 2}
    states = _all_in_sync(zk, ids, topic=topic)
    assert {s.leader for s in states.values()} == {0}, "broker 0, first of every assignment, leads them all"
    for b in brokers[1:]:
        wait_until(lambda: fetcher_threads(b, "fetcher07") == {"fetcher07-0-0": 1, "fetcher07-1-0": 1}, timeout=30,
                   what=f"broker {b.broker_id}'s two 0.7 fetcher threads towards broker 0: "
                        f"{fetcher_threads(b, 'fetcher07')}")
        # about 25 (the broker's own threads and the 2 fetchers); a thread per partition made it 85
        assert thread_count(b) < 40, f"broker {b.broker_id} runs {thread_count(b)} threads"

    writers = [Writer(topic, f"p{p}-", target, target.lost, timeout_ms=10_000, partition=p)
               for p in range(0, PARTITIONS, 3) for target in [LeaderTarget(topic, brokers, partition=p)]]
    for w in writers:
        w.start()
    try:
        wait_until(lambda: all(len(w.acked()) >= 5 for w in writers), timeout=60, what="first acknowledgements")
        before = {w.partition: len(w.acked()) for w in writers}
        brokers[0].kill()
        for p in range(PARTITIONS):
            r.wait_for_state(zk, topic, p, lambda s: s.leader in (1, 2), 60, f"{topic}-{p}: a new leader")
        wait_until(lambda: all(len(w.acked()) >= before[w.partition] + 5 for w in writers), timeout=90,
                   what="acknowledgements through the new leaders")
        brokers[0].start()
        states = _all_in_sync(zk, ids, topic=topic)
    finally:
        for w in writers:
            w.stop()

    leaders = {s.leader for s in states.values()}
    for b in brokers:
        threads = fetcher_threads(b, "fetcher07")
        sources = leaders - {b.broker_id}
        assert set(threads) <= {f"fetcher07-{i}-{src}" for i in range(FETCHERS) for src in sources}, threads
        assert all(n == 1 for n in threads.values()), threads
        assert thread_count(b) < 40, f"broker {b.broker_id} runs {thread_count(b)} threads"

    for w in writers:
        state = r.partition_state(zk, topic, w.partition)
        leader = r.by_id(brokers, state.leader)
        msgs = [(off, data) for off, _next, data in r.read_committed(leader, topic, w.partition)]
        stats = check_no_loss([w], msgs)
        assert stats.get("acked", 0) >= 10, (w.partition, stats, errors_of(w.attempts))


def test_a_07_partition_whose_leader_bytes_are_damaged_stalls_alone(broker_factory, zk_connect, zk):
    """Four partitions of a 0.7 topic led by broker 0, followed by broker 1 on one thread; a message of
    partition 0 is damaged on the leader while broker 1 is down. Back up, broker 1 copies partitions 1-3
    (their in-sync sets fill) while partition 0 stalls at the damaged message (the leader answers
    CORRUPT_RANGE, with no other in-sync replica to repair it from): reported in ZooKeeper, out of the
    in-sync set, copied up to the damage and not past it."""
    topic = "iso07"
    brokers = broker_factory(2, zk_connect, overrides=r.replication_overrides(min_isr=1))
    r.create_topic(zk, topic, {p: [0, 1] for p in range(4)})
    for p in range(4):
        r.wait_for_state(zk, topic, p, lambda s: s.leader == 0 and set(s.isr) == {0, 1}, 60, f"{topic}-{p} in sync")
    brokers[1].stop()
    for p in range(4):
        r.wait_for_state(zk, topic, p, lambda s: s.isr == (0,), 60, f"{topic}-{p}: broker 1 out of the isr")
    client = r.AcksClient(brokers[:1], timeout_ms=10_000)
    for p in range(4):
        for k in range(5):
            assert client.send(topic, p, [r.payload(10 * k + i) for i in range(10)], acks=1).status == r.ACKED
    leader = brokers[0]
    msgs = r.read_committed(leader, topic, 0)
    victim = msgs[len(msgs) // 2][0]
    base, path = r.segments(leader, topic, 0)[-1]
    with open(path, "r+b") as f:                          # one byte of the victim's payload
        f.seek(victim - base + 40)
        byte = f.read(1)
        f.seek(victim - base + 40)
        f.write(bytes([byte[0] ^ 0x5A]))

    brokers[1].start()
    for p in (1, 2, 3):
        r.wait_for_state(zk, topic, p, lambda s: set(s.isr) == {0, 1}, 60, f"{topic}-{p} back in sync")
    stall = znodes.replica_stall_path(topic, 0, 1)
    wait_until(lambda: zk.exists(stall), timeout=60, what="broker 1's stall on partition 0 in ZooKeeper")
    assert r.partition_state(zk, topic, 0).isr == (0,)
    assert r.log_end(brokers[1], topic, 0) == victim, "copied up to the damaged message, not past it"
    for p in (1, 2, 3):
        assert r.log_end(brokers[1], topic, p) == r.log_end(leader, topic, p)
    assert fetcher_threads(brokers[1], "fetcher07") == {"fetcher07-0-0": 1}
