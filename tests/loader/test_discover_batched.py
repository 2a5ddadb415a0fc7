"""Discovery asks each leader for the offsets of all its partitions together, not partition by partition, and
the plan asks each broker its segment starts and deleted segments the same way.

Real ZooKeeper, two real brokers, replicated 0.7 and Kafka-format topics. What is counted is the loader's
own writes to the brokers' sockets while it discovers (a write is a request, or a window of pipelined
requests, after which the loader waits for answers): a round trip per partition made the plan of a
1,000-partition load grow with the partitions; now it grows with the leaders. The offsets found are
those each partition's leader gives when asked alone. The deleted-segments test runs one broker of its own
(no ZooKeeper) whose retention deleted segments of every partition.
"""
from __future__ import annotations

import socket

import pytest

from ingest.client.leader_consumer import LeaderConsumer, static_metadata
from ingest.client.partition_reader import BrokerPartition, KAFKA, open_kafka_fetcher
from ingest.loader import discover
from ingest.loader.config import LOADER_CONFIG
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.scale_cluster import PARTITIONS, ScaleCluster, topic_names

pytestmark = pytest.mark.processes  # ZooKeeper, broker and registry processes

TOPICS = 4          # 2 replicated 0.7 + 2 Kafka-format topics: 40 partitions
EVENTS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ScaleCluster(tmp_path_factory.mktemp("scale")).start()
    try:
        topics = topic_names(TOPICS)
        c.create_topics(topics)
        c.produce(topics, EVENTS)
        yield c
    finally:
        c.close()


class WriteCounter:
    """Counts ``sendall`` calls on sockets connected to the given ports (the real sockets still send)."""

    def __init__(self, monkeypatch, ports: set[int]) -> None:
        self.writes = 0
        real = socket.socket.sendall
        counter = self

        def sendall(sock, data, *args):
            try:
                if sock.getpeername()[1] in ports:
                    counter.writes += 1
            except OSError:
                pass
            return real(sock, data, *args)

        monkeypatch.setattr(socket.socket, "sendall", sendall)


def test_offsets_cost_round_trips_per_leader_not_per_partition(cluster, tmp_path, monkeypatch):
    cfg = LOADER_CONFIG.parse({"destination": str(tmp_path / "out"), "zk.connect": cluster.zk_connect,
                               "registry.url": cluster.registry.url}, source="test")
    ports = {b.port for b in cluster.brokers} | {b.kafka_port for b in cluster.brokers}
    counter = WriteCounter(monkeypatch, ports)
    found = discover.discover_all(cfg)
    monkeypatch.undo()
    partitions = TOPICS * PARTITIONS
    assert not found.left_out and len(found.snapshots) == partitions
    assert all(s.latest - s.earliest > 0 for s in found.snapshots)
    # metadata (a few requests per broker and listener) plus one exchange per leader and question kind;
    # asked partition by partition it was two writes per partition (80 here)
    assert counter.writes < partitions // 2, f"{counter.writes} writes to the brokers for {partitions} partitions"

    # each partition's offsets are those its leader answers when asked alone
    replicated = [s for s in found.snapshots if not s.kafka]
    kafka = [s for s in found.snapshots if s.kafka]
    assert len(replicated) == len(kafka) == partitions // 2
    with LeaderConsumer(static_metadata(replicated[0].metadata_brokers)) as lc:
        for s in replicated:
            assert (s.earliest, s.latest) == (lc.earliest_offset(s.topic, s.partition),
                                              lc.latest_offset(s.topic, s.partition)), s
    k = kafka[0]
    with open_kafka_fetcher(BrokerPartition("", -1, -1, k.host, k.port, k.metadata_brokers, KAFKA)) as f:
        for s in kafka:
            assert (s.earliest, s.latest) == (f.earliest(s.topic, s.partition), f.latest(s.topic, s.partition)), s
            assert s.latest - s.earliest == EVENTS  # a Kafka-format partition's offsets count its records


def test_pipelined_offsets_answer_each_question_in_order_errors_included(cluster):
    """More questions than one window, an unknown partition among them: each gets its own answer."""
    from ingest.client.simple_consumer import EARLIEST, LATEST
    from ingest.wire.connection import PIPELINE_WINDOW

    topic = topic_names(TOPICS)[0]   # replicated 0.7
    md = static_metadata(",".join(f"{b.host}:{b.port}" for b in cluster.brokers))
    leader = md.leader(topic, 0)
    with LeaderConsumer(md) as lc:
        c = lc.consumer_at(leader)
        questions = [(topic, 0, when, 1) for _ in range(PIPELINE_WINDOW) for when in (EARLIEST, LATEST)]
        questions.insert(PIPELINE_WINDOW + 1, (topic, PARTITIONS + 5, LATEST, 1))   # no such partition
        answers = c.offsets_many(questions)
        alone = {EARLIEST: c.offsets_before(topic, 0, EARLIEST, 1), LATEST: c.offsets_before(topic, 0, LATEST, 1)}
        assert len(answers) == len(questions)
        for q, (error, offsets) in zip(questions, answers):
            if q[1] == PARTITIONS + 5:
                assert error != 0 and offsets == []
            else:
                assert (error, offsets) == (0, alone[q[2]])
        assert c.latest_offset(topic, 0) == alone[LATEST][0]   # the connection is in step afterwards


def test_the_plan_asks_segment_starts_per_broker_not_per_partition(cluster, tmp_path, monkeypatch):
    """Every task learns its range's last segment start (for the tally): asked once per broker, pipelined,
    the same starts the partition's leader gives when asked alone."""
    from ingest.clock import SYSTEM_CLOCK
    from ingest.loader.job import make_plan
    from ingest.loader.plan import last_segment_start
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage

    cfg = LOADER_CONFIG.parse({"destination": str(tmp_path / "out"), "zk.connect": cluster.zk_connect,
                               "registry.url": cluster.registry.url}, source="test")
    found = discover.discover_all(cfg)
    state = LoaderState.load(open_storage(str(tmp_path / "out")))
    ports = {b.port for b in cluster.brokers} | {b.kafka_port for b in cluster.brokers}
    counter = WriteCounter(monkeypatch, ports)
    plan = make_plan(cfg, state, found.snapshots, "run-1", SYSTEM_CLOCK, left_out=found.left_out)
    monkeypatch.undo()
    replicated = [p for p in plan.partitions if not p.snapshot.kafka]
    assert len(plan.tasks) == TOPICS * PARTITIONS and len(replicated) == TOPICS * PARTITIONS // 2
    # one pipelined exchange per broker (a connection each); asked alone it was a connection, a
    # TOPIC_METADATA and an OFFSETS per partition (40 writes here)
    assert counter.writes <= 2 * len(cluster.brokers), f"{counter.writes} writes to plan {len(replicated)} partitions"
    with LeaderConsumer(static_metadata(replicated[0].snapshot.metadata_brokers)) as lc:
        for p in replicated:
            starts = lc.offsets_before(p.snapshot.topic, p.snapshot.partition, -1, 1 << 30)
            assert [t.segment_start for t in p.tasks] == [last_segment_start(starts, t.start, t.end) for t in p.tasks]


def test_a_dead_leaders_partitions_are_left_out_and_the_others_found(tmp_path_factory, tmp_path):
    """What a leader's batched exchange cannot answer is asked alone as before: a SIGKILLed broker's
    partitions (replication factor 1, so no other leader) are left out of the run, with a reason, and
    every partition of the live broker is found with its offsets."""
    from kazoo.client import KazooClient

    from ingest.client.topics_admin import create_topic

    c = ScaleCluster(tmp_path_factory.mktemp("dead")).start()
    try:
        zk = KazooClient(hosts=c.zk_connect, timeout=10.0)
        zk.start(timeout=30)
        try:
            for t, fmt in (("dead-repl", None), ("dead-kafka", "kafka")):
                create_topic(zk, t, partitions=None, replication_factor=None, manual="0,1,0,1", topic_format=fmt)
        finally:
            zk.stop()
            zk.close()
        c.wait_for_leaders(["dead-repl", "dead-kafka"], partitions=4)
        c.brokers[1].kill()
        cfg = LOADER_CONFIG.parse({"destination": str(tmp_path / "out"), "zk.connect": c.zk_connect,
                                   "registry.url": c.registry.url, "socket.timeout.ms": 1000}, source="test")
        found = discover.discover_all(cfg)
    finally:
        c.close()
    got = {(s.topic, s.partition) for s in found.snapshots if s.topic.startswith("dead-")}
    gone = {(lo.topic, lo.partition) for lo in found.left_out if lo.topic and lo.topic.startswith("dead-")}
    assert got == {(t, p) for t in ("dead-repl", "dead-kafka") for p in (0, 2)}
    assert gone == {(t, p) for t in ("dead-repl", "dead-kafka") for p in (1, 3)}
    assert all(lo.reason for lo in found.left_out)


def test_the_plan_asks_deleted_segments_per_broker_not_per_partition(broker_factory, tmp_path, monkeypatch):
    """Every 0.7 partition whose log start retention moved past what was loaded has a gap, and the plan asks the
    broker which segments it deleted there (the exact count of the lost range): asked once per broker,
    pipelined, with the records the broker gives when asked alone. Round trips and connections are counted
    while the plan is made (the other plan questions, segment starts and the probe, are stubbed)."""
    from ingest.client.simple_consumer import SimpleConsumer
    from ingest.clock import SYSTEM_CLOCK
    from ingest.loader.job import make_plan
    from ingest.loader.plan import Probe, gap_questions
    from ingest.loader.state import LoaderState
    from ingest.lost_ranges import RETENTION
    from ingest.storage import open_storage
    from tests.harness.wait import wait_until
    from tests.mirror.mirror_setup import produce

    (broker,) = broker_factory(1, num_partitions=2, log_file_size=4096, log_retention_size=4 * 4096,
                               log_retention_check_interval_ms=200, log_flush_interval=1)
    parts = [(f"gone-{t}", p) for t in range(4) for p in range(2)]
    for _ in range(40):
        for t, p in parts:
            produce(broker, t, p, [bytes(200)] * 3)

    def earliest(t: str, p: int) -> int:
        with SimpleConsumer(broker.host, broker.port) as c:
            return c.earliest_offset(t, p)
    wait_until(lambda: all(earliest(t, p) > 0 for t, p in parts), timeout=120, what="retention on every partition")
    cfg = LOADER_CONFIG.parse({"destination": str(tmp_path / "out"), "brokers": f"{broker.host}:{broker.port}",
                               "registry.url": "http://127.0.0.1:9", "fail.on.data.loss": "false"},
                              source="test")   # no registry is asked: the probe is stubbed
    found = discover.discover_all(cfg)
    state = LoaderState.load(open_storage(str(tmp_path / "out")))
    questions = gap_questions(found.snapshots, state.offsets, {}, "earliest")
    assert sorted((s.topic, s.partition, a, b) for s, a, b in questions) == sorted(
        (s.topic, s.partition, 0, s.earliest) for s in found.snapshots) and len(questions) == len(parts)

    counter = WriteCounter(monkeypatch, {broker.port})
    connections = []
    real_connect = socket.create_connection
    monkeypatch.setattr(socket, "create_connection", lambda addr, *a, **kw: connections.append(addr) or
                        real_connect(addr, *a, **kw))
    plan = make_plan(cfg, state, found.snapshots, "run-1", SYSTEM_CLOCK, segment_starts=lambda s: (),
                     probe=lambda s, o: Probe(None, None), left_out=found.left_out)
    monkeypatch.undo()
    # one connection and one pipelined write for the 8 questions; asked alone it was 8 of each
    assert (counter.writes, len(connections)) == (1, 1), (counter.writes, connections)

    with SimpleConsumer(broker.host, broker.port) as c:
        alone = {(s.topic, s.partition): c.deleted_segments(s.topic, s.partition, a, b) for s, a, b in questions}
    assert all(alone.values())
    assert discover.deleted_segments_by_broker(cfg, questions) == {
        (s.key, a, b): alone[(s.topic, s.partition)] for s, a, b in questions}
    # the gaps are counted from those records: retention, exact, up to each log start
    lost = {(r.topic, r.partition): r for r in plan.lost_ranges}
    assert set(lost) == set(parts)
    for s in found.snapshots:
        r = lost[(s.topic, s.partition)]
        assert (r.start_offset, r.end_offset, r.cause, r.messages_exact) == (0, s.earliest, RETENTION, True), r
