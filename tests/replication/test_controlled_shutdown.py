"""Controlled shutdown: a SIGTERMed broker hands its leaderships over before it leaves; rolling restarts.

Real ZooKeeper, three real broker processes, SIGTERM through the harness (``BrokerProcess.stop``):

- a SIGTERMed leader of a replicated 0.7 topic and of a Kafka topic: each partition's new leader was
  written to ZooKeeper *before* the broker's registration went (the state node's ``mzxid`` is below the
  ``pzxid`` of ``/brokers/ids``, the zxid of the broker's deregistration), and the broker is out of the
  new in-sync set. Before controlled shutdown the controller elected only after the registration went:
  the state's zxid was above it;
- a leader that is the only member of its in-sync set (its followers SIGSTOPped: registered, far
  behind) keeps the leadership, and the broker stops anyway after ``controlled.shutdown.max.retries``
  attempts of ``controlled.shutdown.retry.backoff.ms``, exit code 0;
- with ZooKeeper gone, a SIGTERMed leader does not wait for a hand-over nobody can make: it says so
  and stops at once;
- a rolling restart (each broker SIGTERMed and started again, one at a time, the next once every
  replica is back in sync) under a confluent-kafka ``acks=all`` producer with retries on a Kafka topic
  and the product's own producer (``request.required.acks=-1``, retries) on a replicated 0.7 topic:
  nothing acknowledged lost, no send failed; the longest time without an acknowledgement is printed. Rounds:
  ``INGEST_ROLLING_RESTARTS`` (1 in the suite, 5 for the proof run, docs/replication.md).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.replication.test_kafka_topics import TOPIC, AckedProducer, _all_in_sync, _bootstrap, _check, _cluster

log = logging.getLogger(__name__)
pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = int(os.environ.get("INGEST_ROLLING_RESTARTS", "1"))


def _wait_leading(broker, topic: str) -> None:
    """Until ``broker`` has applied the state naming it leader of ``topic``-0 (its own view has it: ZooKeeper
    having it is not enough, the broker acts on what its watches delivered)."""
    wait_until(lambda: any(f"{topic}-0(" in line and line.endswith("): now leader")
                           for line in broker.output().splitlines()), timeout=60,
               what=f"broker {broker.broker_id} leading {topic}-0")


def _state_and_zxid(zk, topic: str, partition: int) -> tuple[znodes.PartitionState, int]:
    data, stat = zk.retry(zk.get, znodes.partition_state_path(topic, partition))
    return znodes.PartitionState.parse(data, stat.version, stat.mzxid), stat.mzxid


def test_a_sigtermed_leader_hands_over_leadership_before_its_registration_goes(broker_factory, zk_connect, zk):
    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(min_isr=2))
    ids = {b.broker_id for b in brokers}
    first = brokers[0].broker_id
    order = [first, *sorted(ids - {first})]
    topics = ("cs07", "cskafka")
    r.create_topic(zk, topics[0], {0: order})
    zk.retry(zk.create, znodes.topic_dir(topics[1]), znodes.assignment_value({0: order}, znodes.KAFKA_FORMAT),
             makepath=True)
    for topic in topics:
        r.wait_for_state(zk, topic, 0, lambda s: s.leader == first and set(s.isr) == ids, 60,
                         f"{topic}: broker {first} leading, all in sync")
        _wait_leading(brokers[0], topic)
    assert brokers[0].stop() == 0
    for topic in topics:
        r.wait_for_state(zk, topic, 0, lambda s: s.leader in ids - {first}, 60, f"{topic}: a new leader")
    _, ids_stat = zk.retry(zk.get, znodes.BROKER_IDS)
    assert str(first) not in zk.retry(zk.get_children, znodes.BROKER_IDS)
    for topic in topics:
        state, mzxid = _state_and_zxid(zk, topic, 0)
        assert state.leader in ids - {first}, f"{topic}: {state}"
        assert first not in state.isr, f"{topic}: {state}"
        assert mzxid < ids_stat.pzxid, (
            f"{topic}: the new leader was written at zxid {mzxid:#x}, after broker {first}'s registration "
            f"went at {ids_stat.pzxid:#x}: elected as after a crash, not handed over\n" + brokers[0].output()[-3000:])
    assert "controlled shutdown" in brokers[0].output()
    # the rolling-restart procedure's check (docs/operations.md): both partitions under-replicated until
    # the broker is back in their in-sync sets, then none
    assert {(p["topic"], p["partition"]) for p in _under_replicated(zk_connect)} == {(t, 0) for t in topics}
    brokers[0].start(timeout=60)
    for topic in topics:
        r.wait_for_state(zk, topic, 0, lambda s: set(s.isr) == ids, 60, f"{topic}: broker {first} back in sync")
    assert _under_replicated(zk_connect) == []


def _under_replicated(zk_connect: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "describe", "--zookeeper", zk_connect,
                          "--under-replicated-partitions", "--json"], capture_output=True, text=True, timeout=60,
                         check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_a_leader_alone_in_its_isr_keeps_leading_and_stops_after_the_bound(broker_factory, zk_connect, zk):
    overrides = r.replication_overrides(min_isr=1, session_ms=60_000, **{
        "controlled.shutdown.max.retries": 2, "controlled.shutdown.retry.backoff.ms": 500})
    brokers = broker_factory(3, zk_connect, overrides=overrides)
    ids = {b.broker_id for b in brokers}
    first = brokers[0].broker_id
    r.create_topic(zk, "alone", {0: [first, *sorted(ids - {first})]})
    r.wait_for_state(zk, "alone", 0, lambda s: s.leader == first and set(s.isr) == ids, 60, "all in sync")
    _wait_leading(brokers[0], "alone")
    followers = brokers[1:]
    for b in followers:       # registered (a 60 s session) but no longer fetching: they fall out of the isr
        r.sigstop(b)
    try:
        r.wait_for_state(zk, "alone", 0, lambda s: s.leader == first and s.isr == (first,), 60,
                         f"broker {first} alone in the isr")
        assert brokers[0].stop() == 0
        state, _ = _state_and_zxid(zk, "alone", 0)
        assert state.leader == first and state.isr == (first,)
        out = brokers[0].output()
        assert "gave up after 2 attempt(s)" in out and "alone-0" in out, out[-3000:]
    finally:
        for b in followers:
            r.sigcont(b)


class TimedProducer(AckedProducer):
    """:class:`AckedProducer` that also keeps the longest time between two acknowledgements."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.last_ack = time.monotonic()
        self.longest_stall_s = 0.0
        self._timing = threading.Lock()

    def _done(self, err, msg) -> None:
        super()._done(err, msg)
        if err is None:
            now = time.monotonic()
            with self._timing:
                self.longest_stall_s = max(self.longest_stall_s, now - self.last_ack)
                self.last_ack = now


class OwnProducer07(threading.Thread):
    """The product's own producer on a replicated 0.7 topic: sync sends with ``request.required.acks=-1`` and
    retries (ZooKeeper discovery), one message each, until stopped; keeps what was acknowledged."""

    def __init__(self, zk_connect: str, topic: str) -> None:
        super().__init__(name="own-producer-07", daemon=True)
        from ingest.client.producer import Producer

        self.topic = topic
        self.producer = Producer({"zk.connect": zk_connect, "topic.format.default": "0.7",
                                  "request.required.acks": -1, "delivery.timeout.ms": 120_000,
                                  "retry.backoff.max.ms": 500})
        self.acked: list[int] = []
        self.failed: list[tuple[int, str]] = []
        self.longest_stall_s = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        from ingest.errors import IngestError

        i, last = 0, time.monotonic()
        while not self._halt.is_set():
            try:
                self.producer.send(self.topic, [r.payload(i)])
                now = time.monotonic()
                self.longest_stall_s, last = max(self.longest_stall_s, now - last), now
                self.acked.append(i)
            except IngestError as exc:
                self.failed.append((i, repr(exc)))
            i += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(150)
        self.producer.close()


def test_rolling_restarts_under_acks_all_lose_nothing_and_fail_no_send(broker_factory, zk_connect, zk):
    brokers, _ = _cluster(broker_factory, zk_connect, zk)
    ids = {b.broker_id for b in brokers}
    r.create_topic(zk, "roll07", {0: sorted(ids)})
    r.wait_for_state(zk, "roll07", 0, lambda s: s.leader >= 0 and set(s.isr) == ids, 60, "roll07 all in sync")
    bootstrap = _bootstrap(brokers)
    producer = TimedProducer(bootstrap)
    own = OwnProducer07(zk_connect, "roll07")
    producer.start()
    own.start()
    restarts = 0
    try:
        wait_until(lambda: len(producer.acked) > 100 and len(own.acked) > 20, timeout=60,
                   what="first acknowledgements")
        for _round in range(ROUNDS):
            for b in brokers:
                before, before_own = len(producer.acked), len(own.acked)
                assert b.stop() == 0
                b.start(timeout=60)
                restarts += 1
                _all_in_sync(zk, brokers)
                r.wait_for_state(zk, "roll07", 0, lambda s: set(s.isr) == ids, 120, "roll07 all in sync")
                wait_until(lambda: len(producer.acked) > before and len(own.acked) > before_own, timeout=120,
                           what=f"acknowledgements after broker {b.broker_id}'s restart")
    finally:
        producer.stop()
        own.stop()
    _check(bootstrap, producer)
    assert not producer.failed
    assert not own.failed, f"{len(own.failed)} 0.7 send(s) failed, e.g. {own.failed[:3]}"
    state = r.wait_for_leader_state(zk, "roll07", 0)
    stored = {r.payload_id(data) for _, _, data in r.read_committed(r.by_id(brokers, state.leader), "roll07", 0)}
    lost = sorted(set(own.acked) - stored)
    assert not lost, f"{len(lost)} acknowledged 0.7 message(s) not in the log, e.g. {lost[:5]}"
    line = (f"rolling restart: {ROUNDS} round(s), {restarts} controlled restarts; Kafka topic (confluent-kafka): "
            f"{producer.sent} sent, {len(producer.acked)} acknowledged, 0 failed, 0 lost, longest produce stall "
            f"{producer.longest_stall_s:.2f} s; 0.7 topic (own producer, acks=-1): {len(own.acked)} acknowledged, "
            f"0 failed, 0 lost, longest send stall {own.longest_stall_s:.2f} s")
    log.info(line)
    print(line)


@pytest.fixture
def own_zookeeper():
    """A ZooKeeper of this test's own: the session's shared one must not be killed."""
    from tests.harness.zookeeper import ZooKeeperServer, fresh_chroot, zookeeper_available

    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed")
    server = ZooKeeperServer().start()
    try:
        yield server, fresh_chroot(server)
    finally:
        server.stop()


def test_without_zookeeper_a_sigtermed_leader_stops_at_once_without_waiting_for_a_hand_over(broker_factory,
                                                                                             own_zookeeper):
    from kazoo.client import KazooClient

    server, connect = own_zookeeper
    brokers = broker_factory(3, connect, overrides=r.replication_overrides(min_isr=1))
    ids = {b.broker_id for b in brokers}
    zk = KazooClient(hosts=connect)
    zk.start(timeout=15)
    try:
        first = brokers[0].broker_id
        r.create_topic(zk, "nozk", {0: [first, *sorted(ids - {first})]})
        r.wait_for_state(zk, "nozk", 0, lambda s: s.leader == first and set(s.isr) == ids, 60, "all in sync")
        _wait_leading(brokers[0], "nozk")
    finally:
        zk.stop()
        zk.close()
    server.kill()
    wait_until(lambda: "Connection dropped" in brokers[0].output(), timeout=60,
               what=f"broker {first} noticing that ZooKeeper is gone")
    assert brokers[0].stop() == 0
    out = brokers[0].output()
    assert "ZooKeeper is not connected; stopping without a controlled shutdown" in out, out[-3000:]
