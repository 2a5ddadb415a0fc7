"""The cluster bench/bench_load_scale.py and tests/loader/test_load_scale.py load from: ZooKeeper, two
broker processes and a registry, with topics of ten partitions each of the three kinds a loader reads.

Topic ``i`` (of ``n``) is, in turn:

- ``scale-repl-i``: a replicated 0.7 topic (10 partitions, replication factor 2; byte offsets, OFFSETS
  and DELETED_SEGMENTS asked of each partition's leader),
- ``scale-kafka-i``: a Kafka-format topic (10 partitions, replication factor 2; record offsets, ListOffsets).

(With ZooKeeper a topic a 0.7 producer creates is a cluster topic too: broker-local 0.7 topics, whose
offsets come with the one METADATA answer of each broker, need brokers without ZooKeeper.)

Every partition gets exactly ``events`` page views through one :class:`~ingest.events.EventProducer`
(its producer routes each kind), sent under a key the partitioner maps to that partition, so the
exact rows of each partition are known. With ``monitoring=True`` the producer also publishes its
monitoring events (to the default audit topic, a 0.7 topic the brokers create), and ``clock`` stamps the
events' times: :class:`PastHourClock` puts them into a closed hour, which the audit can judge and
compaction merge right after the load. Everything started is stopped by :meth:`ScaleCluster.close`.
"""
from __future__ import annotations

import time
from pathlib import Path

from kazoo.client import KazooClient

from ingest.client.kafka.partitioner import partition_for_key
from ingest.client.partitioner import stable_hash
from ingest import znodes
from ingest.client.topics_admin import create_topic
from tests.harness.brokers import BrokerProcess, stop_all
from tests.harness.registry import RegistryProcess
from tests.harness.wait import wait_until
from tests.harness.zookeeper import ZooKeeperServer

PARTITIONS = 10
BROKERS = 2
KINDS = ("repl", "kafka")


class PastHourClock:
    """The real clock moved back so that it starts at ``start_ms``: it runs at real speed from there.

    Waits and timeouts stay real (``monotonic``, ``sleep``); only the wall time (event times, monitoring
    windows) is shifted. :meth:`move_to` jumps forward, as if the producer had stayed up idle until then.
    """

    def __init__(self, start_ms: int) -> None:
        self.shift_ms = time.time_ns() // 1_000_000 - start_ms

    def move_to(self, ms: int) -> None:
        now = self.time_ms()
        if ms < now:
            raise ValueError(f"PastHourClock cannot go backwards (to {ms}, it is {now})")
        self.shift_ms -= ms - now

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000 - self.shift_ms

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def topic_names(n_topics: int) -> list[str]:
    """The ``n_topics`` topics, kinds in turn (see the module docstring)."""
    return [f"scale-{KINDS[i % len(KINDS)]}-{i}" for i in range(n_topics)]


def partition_keys(topic: str) -> list[str]:
    """One key per partition of ``topic``, in partition order, that the producer's partitioner maps there."""
    def partition(key: str) -> int:   # Kafka's murmur2 for a Kafka-format topic, else the 0.7 producer's CRC-32
        return partition_for_key(key.encode(), PARTITIONS) if "-kafka-" in topic else stable_hash(key) % PARTITIONS

    keys: dict[int, str] = {}
    j = 0
    while len(keys) < PARTITIONS:
        keys.setdefault(partition(f"{topic}-{j}"), f"{topic}-{j}")
        j += 1
    return [keys[p] for p in range(PARTITIONS)]


class ScaleCluster:
    """ZooKeeper + 2 brokers + a registry under ``work``; ``close`` stops them all."""

    def __init__(self, work: Path) -> None:
        self.work = Path(work)
        self.zk_server: ZooKeeperServer | None = None
        self.brokers: list[BrokerProcess] = []
        self.registry: RegistryProcess | None = None

    @property
    def zk_connect(self) -> str:
        return self.zk_server.connect

    def start(self) -> "ScaleCluster":
        try:
            self.zk_server = ZooKeeperServer().start()
            for i in range(BROKERS):
                self.brokers.append(BrokerProcess(i, self.work / f"broker{i}", zk_connect=self.zk_connect,
                                                  overrides={"num.partitions": PARTITIONS // BROKERS,
                                                             "default.replication.factor": 2}))
            for b in self.brokers:
                b.start(timeout=60)
            self.registry = RegistryProcess(self.work / "registry").start()
        except BaseException:
            self.close()
            raise
        return self

    def create_topics(self, topics: list[str], timeout_s: float = 120.0) -> None:
        """Create the topics in ZooKeeper and wait for their leaders."""
        zk = KazooClient(hosts=self.zk_connect, timeout=10.0)
        zk.start(timeout=30)
        try:
            for t in topics:
                create_topic(zk, t, partitions=PARTITIONS, replication_factor=2, manual=None,
                             topic_format="kafka" if "-kafka-" in t else None)
        finally:
            zk.stop()
            zk.close()
        self.wait_for_leaders(topics, PARTITIONS, timeout_s)

    def wait_for_leaders(self, topics: list[str], partitions: int, timeout_s: float = 120.0) -> None:
        """Wait until every partition of ``topics`` has its state (a leader) in ZooKeeper."""
        zk = KazooClient(hosts=self.zk_connect, timeout=10.0)
        zk.start(timeout=30)
        try:
            for t in topics:
                for p in range(partitions):
                    wait_until(lambda: zk.exists(znodes.partition_state_path(t, p)), timeout_s,
                               f"a leader of {t}-{p}")
        finally:
            zk.stop()
            zk.close()

    def produce(self, topics: list[str], events: int, *, chunk: int = 500, monitoring: bool = False,
                clock: PastHourClock | None = None, close_at_ms: int | None = None) -> dict[str, int]:
        """``events`` page views to every partition of every topic; returns the rows sent per topic.

        ``monitoring``: also publish the producer's monitoring events (all of them by the time this
        returns); ``clock``: the clock of the producer (default the system clock); ``close_at_ms``:
        move ``clock`` there before the producer closes, so its monitoring reports every idle window
        until then (heartbeats): with the last millisecond of an hour, the audit sees the whole hour.
        """
        from ingest.clock import SYSTEM_CLOCK
        from ingest.events.event_producer import EventProducer
        from ingest.events.loadgen import EventGenerator
        from ingest.events.registry_client import RegistryClient

        gen = EventGenerator(seed=7)
        sent: dict[str, int] = {}
        # acks=-1: a send returns once every in-sync replica has it, so the high watermark (what the
        # loader and discovery read up to) already covers every event when produce returns
        with EventProducer({"zk.connect": self.zk_connect, "topic.format.default": "0.7",
                            "request.required.acks": -1},
                           RegistryClient(self.registry.url), clock=clock or SYSTEM_CLOCK,
                           monitoring_enable=monitoring, background=False) as ep:
            for t in topics:
                for key in partition_keys(t):
                    for i in range(0, events, chunk):
                        ep.send(t, gen.batch(min(chunk, events - i)), key=key)
                sent[t] = PARTITIONS * events
            ep.flush()
            if close_at_ms is not None:
                clock.move_to(close_at_ms)
        stats = ep.stats()
        if monitoring and (stats["monitoring_pending"] or stats["monitoring_dropped"]):
            raise RuntimeError(f"the producer's monitoring events were not all published: {stats}")
        return sent

    def close(self) -> None:
        try:
            stop_all(self.brokers)
        finally:
            for b in self.brokers:
                b.kill()
            if self.registry is not None:
                self.registry.stop()
            if self.zk_server is not None:
                self.zk_server.stop()
