"""A replicated Kafka topic across leader SIGKILLs, through real Kafka clients.

Real ZooKeeper, three real broker processes, a Kafka topic of replication factor 3 with
``min.insync.replicas=2`` (its assignment written with ``"format":"kafka"``, as ``ingest topics create``
writes it). What is proven:

- Metadata (confluent-kafka) lists the three brokers at their Kafka listeners, and the partition's leader,
  replicas and in-sync replicas as ZooKeeper's state has them; the registration and cluster id are in
  ZooKeeper (``/brokers/endpoints/[id]``, ``/cluster/id``);
- a confluent-kafka producer with ``acks=all`` and retries (idempotence off: the broker does not check
  sequence numbers yet) keeps sending distinct values while the partition's leader is SIGKILLed and
  restarted (NOT_LEADER_OR_FOLLOWER, a metadata refresh, the new leader: nothing for the test to do);
- afterwards a confluent-kafka consumer (``assign``, from the earliest offset) reads every value whose
  delivery was acknowledged; values sent again by retries may appear twice and are counted, nothing else
  appears; kafka-python and aiokafka read the same records, offset for offset;
- a non-leader answers NOT_LEADER_OR_FOLLOWER to a produce and a fetch.

``test_a_leader_kill_...`` kills once; the slow ``test_many_leader_kills_...`` repeats it
(``INGEST_KAFKA_REPLICATION_KILLS``: 10 in the suite, 30 for the proof run, docs/testing.md). Counts (acknowledged, duplicates, kill -> next
acknowledgement) are logged at INFO (``-o log_cli=true``).
"""
from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time

import pytest

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.kafka.clients import aiokafka_consume, kafka_python_consume
from tests.kafka.other_clients import high_watermarks

log = logging.getLogger(__name__)
pytestmark = pytest.mark.processes

TOPIC = "kclicks"
KILLS = int(os.environ.get("INGEST_KAFKA_REPLICATION_KILLS", "10"))


def _bootstrap(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)


def _cluster(broker_factory, zk_connect, zk, overrides: dict | None = None):
    """Three brokers (``min.insync.replicas=2``, plus ``overrides``), TOPIC on all three, all in sync."""
    brokers = broker_factory(3, zk_connect, overrides={**r.replication_overrides(min_isr=2), **(overrides or {})})
    zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value({0: [0, 1, 2]}, znodes.KAFKA_FORMAT),
             makepath=True)
    return brokers, _all_in_sync(zk, brokers)


def _all_in_sync(zk, brokers, timeout: float = 120.0):
    ids = {b.broker_id for b in brokers}
    return r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in ids and set(s.isr) == ids, timeout,
                            f"all of {sorted(ids)} in the isr")


class AckedProducer(threading.Thread):
    """confluent-kafka, acks=all, retries: sends ``v-<n>`` until stopped; records which were acknowledged."""

    def __init__(self, bootstrap: str, **config) -> None:
        super().__init__(name="acked-producer", daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                                  "retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 120_000,
                                  "linger.ms": 5, "max.in.flight.requests.per.connection": 1, **config})
        self.acked: list[bytes] = []
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self._halt = threading.Event()

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append((msg.value(), str(err)))

    def run(self) -> None:
        while not self._halt.is_set():
            value = f"v-{self.sent:08d}".encode()
            try:
                self.producer.produce(TOPIC, value=value, partition=0, on_delivery=self._done)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        assert self.producer.flush(180) == 0, "messages still unanswered after 180 s"


def _consume_all(bootstrap: str, end: int, client: dict | None = None) -> list[tuple[int, bytes]]:
    """Every record of TOPIC below ``end`` (confluent-kafka, ``client``: extra settings, e.g. a login)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "proof", "enable.auto.commit": False,
                  "auto.offset.reset": "error", **(client or {})})
    try:
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 120
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1.0):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def _high_watermark(bootstrap: str, client: dict | None = None) -> int:
    return high_watermarks(bootstrap, TOPIC, [0], client=client)[0]


def _kill_leader_and_restart(zk, brokers, kill_no: int, producer: AckedProducer) -> float:
    """SIGKILL the leader, wait for the next acknowledgement through the new one, restart the old one and
    wait for the full in-sync set; returns seconds from the kill to the next acknowledgement."""
    state = _all_in_sync(zk, brokers)
    victim = r.by_id(brokers, state.leader)
    acked_before = len(producer.acked)
    victim.kill()
    killed = time.monotonic()
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader >= 0 and s.leader != victim.broker_id, 60,
                     f"a new leader after kill {kill_no}")
    wait_until(lambda: len(producer.acked) > acked_before + 20, timeout=90,
               what=f"acknowledgements through the new leader after kill {kill_no}")
    took = time.monotonic() - killed
    victim.start()
    return took


def _through_leader_kills(zk, brokers, producer, kills: int) -> None:
    """Start ``producer``, SIGKILL and restart the leader ``kills`` times under it, stop it (all answered)."""
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) > 100, timeout=60, what="first acknowledgements")
        took = [_kill_leader_and_restart(zk, brokers, k + 1, producer) for k in range(kills)]
        _all_in_sync(zk, brokers)
    finally:
        producer.stop()
    log.info("%d leader kill(s): kill -> next acknowledgement %.1f s median, %.1f s max", kills,
             sorted(took)[len(took) // 2], max(took))


def _check(bootstrap: str, producer: AckedProducer, client: dict | None = None) -> list[tuple[int, bytes]]:
    """Every acknowledged value read back, offsets 0, 1, 2, ..., nothing nobody sent; returns the records."""
    assert not producer.failed, f"{len(producer.failed)} not delivered, e.g. {producer.failed[:3]}"
    end = _high_watermark(bootstrap, client)
    rows = _consume_all(bootstrap, end, client)
    offsets = [o for o, _ in rows]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) and offsets[0] == 0, "offsets 0, 1, 2, ..."
    counts = collections.Counter(v for _, v in rows)
    acked = set(producer.acked)
    missing = acked - set(counts)
    assert not missing, f"{len(missing)} acknowledged value(s) not read back, e.g. {sorted(missing)[:5]}"
    sent = {f"v-{i:08d}".encode() for i in range(producer.sent)}
    assert set(counts) <= sent, "a value nobody sent"
    duplicates = sum(n - 1 for n in counts.values())
    log.info("Kafka topic failover: %d sent, %d acknowledged, %d read, %d duplicate(s) from retries",
             producer.sent, len(acked), len(rows), duplicates)
    return rows


def _failover(broker_factory, zk_connect, zk, kills: int) -> None:
    brokers, state = _cluster(broker_factory, zk_connect, zk)
    bootstrap = _bootstrap(brokers)

    # Metadata: brokers at their Kafka listeners, the partition as ZooKeeper has it; endpoints and cluster id
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=30)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
        b.broker_id: ("127.0.0.1", b.kafka_port) for b in brokers}
    assert md.controller_id in {b.broker_id for b in brokers}
    pm = md.topics[TOPIC].partitions[0]
    assert (pm.leader, list(pm.replicas), sorted(pm.isrs)) == (state.leader, [0, 1, 2], [0, 1, 2])
    for b in brokers:
        reg = json.loads(zk.retry(zk.get, znodes.broker_endpoints_path(b.broker_id))[0])
        assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b.kafka_port}"] and reg["version"] == 5
    assert md.cluster_id == znodes.parse_cluster_id(zk.retry(zk.get, znodes.CLUSTER_ID)[0])

    producer = AckedProducer(bootstrap)
    _through_leader_kills(zk, brokers, producer, kills)
    rows = _check(bootstrap, producer)

    # the other clients read the same records
    n = len(rows)
    for consume in (kafka_python_consume, aiokafka_consume):
        got = consume(bootstrap, TOPIC, 1, n)[0]
        assert [(o, v) for o, _k, v, _h, _t in got] == rows, consume.__name__


def test_a_leader_kill_fails_over_transparently_and_nothing_acknowledged_is_lost(broker_factory, zk_connect, zk):
    _failover(broker_factory, zk_connect, zk, kills=1)


@pytest.mark.slow
def test_many_leader_kills_lose_no_acknowledged_message(broker_factory, zk_connect, zk):
    _failover(broker_factory, zk_connect, zk, kills=KILLS)


def test_a_replica_that_does_not_lead_answers_not_leader_or_follower(broker_factory, zk_connect, zk):
    from ingest.records.builder import build_batch
    from ingest.wire.connection import BrokerConnection
    from ingest.wire.kafka.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
    from ingest.wire.kafka.message import decode_response, encode_request
    from ingest.wire.kafka.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData

    brokers, state = _cluster(broker_factory, zk_connect, zk)
    follower = next(b for b in brokers if b.broker_id != state.leader)
    conn = BrokerConnection("127.0.0.1", follower.kafka_port)
    try:
        produce = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=(TopicProduceData(TOPIC, (
            PartitionProduceData(0, bytes(build_batch([b"x"]))),)),))
        resp = decode_response(ProduceResponse, conn.request_buffer(encode_request(produce, 9, 1, "t")), 9)[1]
        assert resp.responses[0].partition_responses[0].error_code == 6   # NOT_LEADER_OR_FOLLOWER
        fetch = FetchRequest(max_wait_ms=0, min_bytes=0, topics=(FetchTopic(TOPIC, (FetchPartition(0),)),))
        resp = decode_response(FetchResponse, conn.request_buffer(encode_request(fetch, 11, 2, "t")), 11)[1]
        assert resp.responses[0].partitions[0].error_code == 6
    finally:
        conn.close()
    # a client that knows only the follower is routed to the leader by Metadata: the write is acknowledged
    from confluent_kafka import Producer

    outcome = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{follower.kafka_port}", "acks": "all",
                  "message.timeout.ms": 30_000, "enable.idempotence": False})
    p.produce(TOPIC, b"x", partition=0, on_delivery=lambda err, _m: outcome.append(err))
    assert p.flush(60) == 0 and outcome == [None]
