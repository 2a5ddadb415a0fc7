"""Consumers of replicated topics across a leader failover, with real ZooKeeper and brokers.

A replicated partition is named by its home broker (first replica) in the group's
owner/offset nodes; its consumers fetch from the current leader and, when that
leader is SIGKILLed, go on at the same byte offset on the new one.
"""
from __future__ import annotations

import io
import threading

import pytest

from ingest import znodes
from ingest.client import group_registry
from ingest.client.console import console_consumer
from ingest.client.consumer_group import ConsumerConnector
from ingest.client.leader_consumer import LeaderConsumer, static_metadata
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.replication_topics import (
    create_replicated_topic,
    leader_process,
    metadata_of,
    produce_acked,
    wait_for_leaders,
)
from tests.harness.wait import wait_until

REPLICATION = {"min.insync.replicas": 2}
FAST_GROUP = {"zk.sessiontimeout.ms": 3000, "autocommit.interval.ms": 100, "rebalance.backoff.ms": 100,
              "backoff.increment.ms": 20, "socket.timeout.ms": 5000}


def test_group_names_replicated_partitions_by_home_and_never_creates_topic_nodes(zk, zk_connect):
    create_replicated_topic(zk, "rep", {0: [2, 0, 1], 1: [0, 1, 2], 2: [1, 2, 0]})
    zk.create(znodes.topic_path("legacy", 0), znodes.partition_count_value(2), makepath=True)
    assert group_registry.partitions_of(zk, "rep", {}) == ([(0, 1), (1, 2), (2, 0)], True)
    assert group_registry.partitions_of(zk, "legacy", {}) == ([], False)  # broker 0 is not live
    assert group_registry.partitions_of(zk, "absent", {}) == ([], False)
    c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "g0", "consumer.id": "c0", **FAST_GROUP})
    try:
        c.create_streams({"not-yet": 1})
        # a replicated topic's creator writes its assignment as that node's data: a subscriber must not
        # create it empty first
        assert zk.exists(znodes.topic_dir("not-yet")) is None
    finally:
        c.shutdown()


def test_static_metadata_names_bad_addresses():
    with pytest.raises(ValueError, match="'nohost' is not host:port"):
        static_metadata("127.0.0.1:9092,nohost")
    with pytest.raises(ValueError, match="no broker address"):
        static_metadata(" , ")


def _cluster(broker_factory, zk, zk_connect, topic, assignment):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=REPLICATION)
    create_replicated_topic(zk, topic, assignment)
    md = metadata_of(brokers)
    wait_for_leaders(md, topic, len(assignment), isr=3)
    return brokers, md


@pytest.mark.slow
def test_leader_consumer_goes_on_at_the_same_offset_on_the_new_leader(broker_factory, zk, zk_connect):
    topic = "lc-failover"
    brokers, md = _cluster(broker_factory, zk, zk_connect, topic, {0: [0, 1, 2]})
    payloads = [b"m%04d" % i for i in range(200)]
    for i in range(0, 200, 20):
        produce_acked(md, topic, 0, payloads[i:i + 20])
    with LeaderConsumer(metadata_of(brokers), timeout_s=5, fetch_size=1024, leader_wait_s=60) as lc:
        end = lc.latest_offset(topic, 0)  # the high watermark: everything acked with acks=-1
        first = lc.fetch(topic, 0, 0, 1024)
        assert first.messages and first.next_offset < end
        old = leader_process(brokers, md, topic, 0)
        old.kill()
        got = list(first.messages)
        offset = first.next_offset
        while offset < end:  # the same offsets on whichever replica leads now
            r = lc.fetch(topic, 0, offset, 1024)
            got.extend(r.messages)
            offset = r.next_offset
        assert [m.payload for m in got] == payloads
        assert md.leader(topic, 0, refresh=True).broker_id != old.broker_id
        assert lc.latest_offset(topic, 0) == end
    # the console consumer, direct (partition named home-p, read from the new leader) and as a group
    live = ",".join(b.address for b in brokers if b.running)
    out = io.BytesIO()
    console_consumer(brokers=live, zk=None, topic=topic, from_beginning=True, max_messages=200, print_offsets=True,
                     out=out)
    lines = out.getvalue().splitlines()
    assert [ln.split(b"\t")[3] for ln in lines] == payloads and {ln.split(b"\t")[1] for ln in lines} == {b"0-0"}
    out = io.BytesIO()
    console_consumer(brokers=None, zk=zk_connect, topic=topic, from_beginning=True, max_messages=200, out=out,
                     overrides={"socket.timeout.ms": "5000"})
    assert out.getvalue().splitlines() == payloads


class Sink:
    """Drains a stream on a thread, recording (partition name, offset, next offset, payload)."""

    def __init__(self, stream):
        self.items: list[tuple[str, int, int, bytes]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream):
        for m in stream:
            with self.lock:
                self.items.append((znodes.partition_name(m.broker_id, m.partition), m.offset, m.next_offset,
                                   m.payload))

    def payloads(self) -> list[bytes]:
        with self.lock:
            return [p for *_, p in self.items]


def _assert_each_offset_once(items, starts):
    """Per partition: consecutive messages, each offset once, starting where the group's offsets were."""
    by_part: dict[str, list[tuple[int, int]]] = {}
    for name, off, nxt, _ in items:
        by_part.setdefault(name, []).append((off, nxt))
    for name, seq in by_part.items():
        assert seq[0][0] == starts.get(name, 0), f"{name} starts at {seq[0][0]}"
        for (_, nxt), (off, _) in zip(seq, seq[1:]):
            assert off == nxt, f"{name}: message at {off} follows one that ended at {nxt} (gap or repeat)"


@pytest.mark.slow
def test_consumer_group_consumes_every_message_once_across_a_leader_sigkill(broker_factory, zk, zk_connect):
    topic = "g-failover"
    assignment = {0: [0, 1, 2], 1: [1, 2, 0]}
    brokers, md = _cluster(broker_factory, zk, zk_connect, topic, assignment)
    produced: list[bytes] = []

    def produce(n, tag):
        for p in (0, 1):
            batch = [b"%s-%d-%04d" % (tag, p, i) for i in range(n)]
            for i in range(0, n, 25):
                produce_acked(md, topic, p, batch[i:i + 25])
            produced.extend(batch)

    produce(1000, b"a")
    # small fetches and queues: the fetcher is mid-stream, far from the end, when the leader dies
    c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "gf", "consumer.id": "c1", **FAST_GROUP,
                           "fetch.size": 512, "queuedchunks.max": 1})
    try:
        sink = Sink(c.create_streams({topic: 1})[topic][0])
        assert c.owned_partitions() == {topic: [(0, 0), (1, 1)]}  # home-partition names
        wait_until(lambda: len(sink.payloads()) >= 50, 30, "the first 50 messages consumed")
        victim = leader_process(brokers, md, topic, 0)
        victim.kill()
        wait_for_leaders(md, topic, 2, exclude=(victim.broker_id,))
        produce(100, b"b")  # acks=-1 on the new leaders (in-sync set of 2 >= min.insync.replicas)
        wait_until(lambda: len(sink.payloads()) >= len(produced), 60, "every message consumed after the failover")
        c.commit_offsets()
        assert sorted(sink.payloads()) == sorted(produced)
        _assert_each_offset_once(sink.items, {})
        assert c.owned_partitions() == {topic: [(0, 0), (1, 1)]}
        assert c.rebalance_count == 1  # the broker's death changed no ownership: the fetchers went on
        committed = {n: int(zk.get(znodes.offset_path("gf", topic, *znodes.parse_partition_name(n)))[0])
                     for n in ("0-0", "1-1")}
        ends = {n: max(nxt for name, _, nxt, _ in sink.items if name == n) for n in ("0-0", "1-1")}
        assert committed == ends
    finally:
        c.shutdown()
    # a new member of the group starts at the committed offsets: nothing again, the new messages once
    victim.start()
    produce(30, b"c")
    c2 = ConsumerConnector({"zk.connect": zk_connect, "groupid": "gf", "consumer.id": "c2", **FAST_GROUP})
    try:
        sink2 = Sink(c2.create_streams({topic: 1})[topic][0])
        wait_until(lambda: len(sink2.payloads()) >= 60, 60, "the 60 new messages consumed")
        assert sorted(sink2.payloads()) == sorted(p for p in produced if p.startswith(b"c-"))
        _assert_each_offset_once(sink2.items, ends)
    finally:
        c2.shutdown()
