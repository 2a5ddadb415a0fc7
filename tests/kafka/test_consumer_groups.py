"""Consumer groups over the Kafka protocol with real clients, real brokers, real ZooKeeper and real SIGKILLs.

The group test: three confluent-kafka members and two kafka-python members (separate processes,
tests/kafka/group_member.py) in one group on a 12-partition Kafka topic replicated on three brokers
(``min.insync.replicas=2``), committing after processing; a confluent-kafka producer writes distinct
values throughout. Members are SIGKILLed and started again, then the broker that coordinates the group is
SIGKILLed (the group moves to the new leader of its ``__consumer_offsets`` partition, which loads the
offsets) and started again. Afterwards:

- every acknowledged value was processed;
- no record was covered by two successful commits (a commit lost by the coordinator, or two members
  owning a partition at once, would make a later commit cover records an earlier one covered);
- the committed offsets the group reads back are the partitions' ends: nothing committed was lost;
- every member saw its assignment through its client's rebalance callback, and the killed members'
  partitions went to the others.

Also: a librdkafka consumer with default settings (``enable.auto.commit=true``) commits on close and
``close()`` returns at once (before groups, it retried FindCoordinator for its whole session timeout and
committed nothing); aiokafka's group consumer joins the same kind of group.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingest import znodes
from ingest.broker.groups.offsets_topic import OFFSETS_TOPIC, partition_for
from tests.harness import replicated as r
from tests.harness.brokers import REPO_ROOT, broker_factory  # noqa: F401  (fixture)
from tests.kafka import group_checks as gc
from tests.kafka.group_checks import bootstrap_of
from tests.harness.wait import wait_until

log = logging.getLogger(__name__)
pytestmark = pytest.mark.processes

TOPIC = "orders"
PARTITIONS = 12
GROUP = "order-processors"
OFFSETS_PARTITIONS = 6

GROUP_OVERRIDES = {"offsets.topic.num.partitions": OFFSETS_PARTITIONS, "offsets.topic.replication.factor": 3,
                   "group.initial.rebalance.delay.ms": 500, "offsets.commit.timeout.ms": 10_000}


def _cluster(broker_factory, zk_connect, zk, partitions: int = PARTITIONS):
    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(min_isr=2, **GROUP_OVERRIDES))
    assignment = {p: [(p + j) % 3 for j in range(3)] for p in range(partitions)}
    zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value(assignment, znodes.KAFKA_FORMAT),
             makepath=True)
    for p in range(partitions):
        r.wait_for_state(zk, TOPIC, p, lambda s: s.leader >= 0 and len(s.isr) == 3, 120, f"{TOPIC}-{p} in sync")
    return brokers


def _member(client: str, name: str, bootstrap: str, workdir: Path) -> gc.Member:
    return gc.Member(client, name, bootstrap, workdir, GROUP, TOPIC)


def _wait_all_assigned(members, what: str, timeout: float = 180.0) -> None:
    gc.wait_all_assigned(members, PARTITIONS, what, timeout)


def _coordinator(bootstrap: str) -> int:
    from ingest.wire.connection import BrokerConnection
    from ingest.wire.kafka.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
    from ingest.wire.kafka.message import decode_response, encode_request

    host, port = bootstrap.split(",")[0].split(":")
    conn = BrokerConnection(host, int(port))
    try:
        resp = decode_response(FindCoordinatorResponse, conn.request_buffer(
            encode_request(FindCoordinatorRequest(GROUP), 2, 1, "test")), 2)[1]
    finally:
        conn.close()
    assert resp.error_code == 0, resp
    return resp.node_id


def _end_offsets(bootstrap: str) -> dict[int, int]:
    return gc.end_offsets(bootstrap, TOPIC, PARTITIONS)


def _committed(bootstrap: str) -> dict[int, int]:
    return gc.committed(bootstrap, GROUP, TOPIC, PARTITIONS)


def _no_record_committed_twice(members) -> dict[int, int]:
    return gc.no_record_committed_twice(members, TOPIC)


def test_five_members_of_two_clients_share_a_topic_through_member_and_coordinator_kills(broker_factory, zk_connect,
                                                                                      zk, tmp_path):
    brokers = _cluster(broker_factory, zk_connect, zk)
    bootstrap = bootstrap_of(brokers)
    producer = gc.Producer(bootstrap, TOPIC, PARTITIONS)
    producer.start()
    members = [_member("confluent", f"rdkafka-{i}", bootstrap, tmp_path) for i in range(3)] + \
              [_member("kafka-python", f"kafka-python-{i}", bootstrap, tmp_path) for i in range(2)]
    try:
        for m in members:
            m.start()
        _wait_all_assigned(members, "five members joined")
        wait_until(lambda: sum(1 for m in members for ev in m.events() if ev["e"] == "processed") > 500,
                   timeout=120, interval=1.0, what="the first records processed")

        # members die without leaving: their sessions expire, the others take their partitions
        victims = [members[0], members[3]]
        for v in victims:
            v.kill()
        survivors = [m for m in members if m not in victims]
        _wait_all_assigned(survivors, "after two members were SIGKILLed")
        for v in victims:
            v.start()
        _wait_all_assigned(members, "after the killed members came back")

        # the coordinator's broker dies: the new leader of the group's offsets partition takes over
        coordinator = _coordinator(bootstrap)
        p = partition_for(GROUP, OFFSETS_PARTITIONS)
        r.by_id(brokers, coordinator).kill()
        r.wait_for_state(zk, OFFSETS_TOPIC, p, lambda s: s.leader >= 0 and s.leader != coordinator, 60,
                         "a new leader of the group's offsets partition")
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked + 500, timeout=120, interval=1.0, what="production after the broker kill")
        alive = [b for b in brokers if b.broker_id != coordinator]
        wait_until(lambda: _coordinator(bootstrap_of(alive)) != coordinator, timeout=60, interval=1.0, what="a new coordinator")
        successor = r.by_id(brokers, _coordinator(bootstrap_of(alive)))
        wait_until(lambda: f"loaded {OFFSETS_TOPIC}-{p} " in successor.output(), timeout=60, interval=1.0,
                   what=f"broker {successor.broker_id} loading {OFFSETS_TOPIC}-{p}")
        r.by_id(brokers, coordinator).start()
        _wait_all_assigned(members, "after the coordinator's broker was SIGKILLed")
    finally:
        producer.stop()
    try:
        assert not producer.failed, f"{len(producer.failed)} records not delivered, e.g. {producer.failed[:3]}"
        wait_until(lambda: gc.processed_everything(members, producer.acked), timeout=180,
                   what="every acknowledged record processed")
        ends = _end_offsets(bootstrap)
        wait_until(lambda: _no_record_committed_twice(members) == ends, timeout=120,
                   what=f"commits up to the partitions' ends {ends}")
    finally:
        for m in members:
            m.stop()
    top = _no_record_committed_twice(members)
    assert _committed(bootstrap) == top == ends, "the committed offsets read back are the last ones committed"
    for m in members:
        evs = m.events()
        assert any(ev["e"] == "assign" and ev["p"] for ev in evs), f"{m.name}: no assignment callback"
    rebalances = sum(1 for m in members for ev in m.events() if ev["e"] == "assign")
    log.info("group test: %d records acknowledged, all processed; %d assignment callbacks; %d duplicates processed",
             len(producer.acked), rebalances,
             sum(1 for m in members for ev in m.events() if ev["e"] == "processed") - len(producer.acked))


def _one_broker(broker_factory, tmp_path):
    return broker_factory(1, overrides={"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
                                        "num.partitions": 4})[0]


def test_a_librdkafka_consumer_with_default_settings_commits_on_close_and_does_not_hang(broker_factory, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = _one_broker(broker_factory, tmp_path)
    bootstrap = f"127.0.0.1:{b.kafka_port}"
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        p.produce(TOPIC, f"id-{i}".encode(), partition=i % 4)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "defaults", "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 40 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert len(got) == 40
    started = time.monotonic()
    c.close()   # auto-commit: the positions are committed here
    closed_in = time.monotonic() - started
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "defaults", "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition(TOPIC, i) for i in range(4)], timeout=30)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [10, 10, 10, 10]
    log.info("librdkafka close() with auto-commit took %.2f s", closed_in)


def test_an_aiokafka_group_consumer_and_a_kafka_python_one_share_partitions_and_commit(broker_factory, tmp_path):
    from confluent_kafka import Producer

    b = _one_broker(broker_factory, tmp_path)
    bootstrap = f"127.0.0.1:{b.kafka_port}"
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(200):
        p.produce(TOPIC, f"id-{i}".encode(), partition=i % 4)
    assert p.flush(30) == 0
    members = [_member("aiokafka", "aiokafka-0", bootstrap, tmp_path),
               _member("kafka-python", "kafka-python-0", bootstrap, tmp_path)]
    try:
        for m in members:
            m.start()

        def shared():
            got = [m.current_assignment() for m in members]
            return all(got) and sorted(x for g in got for x in g) == [0, 1, 2, 3]
        wait_until(shared, timeout=120, interval=1.0, what="both members assigned")
        wait_until(lambda: gc.processed_everything(members, {f"id-{i}" for i in range(200)}), timeout=120,
                   interval=1.0, what="every record processed")
        wait_until(lambda: _no_record_committed_twice(members) == {0: 50, 1: 50, 2: 50, 3: 50}, timeout=60,
                   interval=1.0, what="every record committed")
    finally:
        for m in members:
            m.stop()


def _ingest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=str(REPO_ROOT), capture_output=True,
                          text=True, timeout=120)


def test_ingest_groups_lists_describes_with_lag_and_resets_a_stopped_group_and_lag_is_a_series(broker_factory,
                                                                                                tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    from tests.harness.metrics import metrics_url, scrape

    b = broker_factory(1, overrides={"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
                                     "num.partitions": 2, "metrics.port": 0})[0]
    bootstrap = f"127.0.0.1:{b.kafka_port}"
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        p.produce(TOPIC, f"id-{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(TOPIC, 0, 10), TopicPartition(TOPIC, 1, 15)], asynchronous=False)
    c.close()

    listed = _ingest("groups", "list", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert "ops" in listed.stdout.split()
    described = _ingest("groups", "describe", "--bootstrap-server", bootstrap, "--group", "ops")
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines()[2:]]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [(TOPIC, "0", "10", "15", "5"), (TOPIC, "1", "15", "15", "0")]

    samples = scrape(metrics_url(b.output))
    lag = {dict(k[1])["partition"]: v for k, v in samples.items() if k[0] == "ingest_group_lag"
           and dict(k[1])["group"] == "ops"}
    assert lag == {"0": 5.0, "1": 0.0}

    plan = _ingest("groups", "reset-offsets", "--bootstrap-server", bootstrap, "--group", "ops", "--topic", TOPIC,
                   "--to-earliest")
    assert plan.returncode == 0 and "not written" in plan.stdout, plan.stderr
    done = _ingest("groups", "reset-offsets", "--bootstrap-server", bootstrap, "--group", "ops", "--topic", TOPIC,
                   "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops", "enable.auto.commit": False})
    try:
        assert [tp.offset for tp in c.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=30)] \
            == [0, 0]
    finally:
        c.close()
