"""Idempotent producers on a replicated Kafka topic across leader SIGKILLs: every acknowledged message once.

Real ZooKeeper, three real broker processes, a Kafka topic of replication factor 3 with
``min.insync.replicas=2`` (as tests/replication/test_kafka_topics.py). A producer with idempotence on,
``acks=all`` and retries keeps sending distinct values while the partition's leader is SIGKILLed and
restarted; afterwards the topic holds every acknowledged value exactly once (0 duplicates: before the
leaders checked sequences, the same run with retries left duplicates), nothing nobody sent, offsets
0, 1, 2, ...:

- confluent-kafka (``enable.idempotence=true``, five requests in flight): a few kills here, more in the slow
  ``test_many_leader_kills_...`` (``INGEST_KAFKA_REPLICATION_KILLS``: 10 in the suite, 30 for the proof run);
- kafka-python (``enable_idempotence=True``): a few kills.

And a retried batch is still a duplicate after its broker is SIGKILLed and restarted (the producer state
is rebuilt from the log), sent by raw Produce requests so that the test controls the retry.
"""
from __future__ import annotations

import collections
import logging
import os
import threading

import pytest

from ingest.records.builder import SimpleRecord, build_batch
from ingest.wire.connection import BrokerConnection
from ingest.wire.kafka.message import decode_response, encode_request
from ingest.wire.kafka.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.replication.test_kafka_topics import (KILLS, TOPIC, AckedProducer, _bootstrap, _cluster, _consume_all,
                                                 _high_watermark, _through_leader_kills)

log = logging.getLogger(__name__)
pytestmark = pytest.mark.processes

FEW_KILLS = 3


class KafkaPythonProducer(threading.Thread):
    """kafka-python with idempotence on: sends ``v-<n>`` until stopped; records which were acknowledged
    (the interface of :class:`AckedProducer`)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="kafka-python-producer", daemon=True)
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                      retries=1_000_000, retry_backoff_ms=100, delivery_timeout_ms=300_000,
                                      request_timeout_ms=30_000, linger_ms=5,
                                      max_in_flight_requests_per_connection=5)
        self.acked: list[bytes] = []
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            value = f"v-{self.sent:08d}".encode()
            fut = self.producer.send(TOPIC, value=value, partition=0)
            fut.add_callback(lambda _md, v=value: self.acked.append(v))
            fut.add_errback(lambda exc, v=value: self.failed.append((v, repr(exc))))
            self.sent += 1
            if self.sent % 200 == 0:
                self._halt.wait(0.02)   # keep the send buffer from holding minutes of messages

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        self.producer.flush(300)
        self.producer.close(30)


def _exactly_once(bootstrap: str, producer, client: dict | None = None) -> None:
    """Every acknowledged value exactly once, offsets 0, 1, 2, ..., nothing nobody sent."""
    assert not producer.failed, f"{len(producer.failed)} not delivered, e.g. {producer.failed[:3]}"
    end = _high_watermark(bootstrap, client)
    rows = _consume_all(bootstrap, end, client)
    offsets = [o for o, _ in rows]
    assert offsets == list(range(len(offsets))), "offsets 0, 1, 2, ..."
    counts = collections.Counter(v for _, v in rows)
    acked = set(producer.acked)
    assert len(acked) == len(producer.acked)
    missing = acked - set(counts)
    assert not missing, f"{len(missing)} acknowledged value(s) not read back, e.g. {sorted(missing)[:5]}"
    sent = {f"v-{i:08d}".encode() for i in range(producer.sent)}
    assert set(counts) <= sent, "a value nobody sent"
    twice = sorted(v for v, n in counts.items() if n > 1)
    log.info("idempotent producer through leader kills: %d sent, %d acknowledged, %d read, %d duplicate(s)",
             producer.sent, len(acked), len(rows), len(twice))
    assert not twice, f"{len(twice)} value(s) stored more than once, e.g. {twice[:5]}"


def _through_kills(broker_factory, zk_connect, zk, make_producer, kills: int) -> None:
    brokers, _state = _cluster(broker_factory, zk_connect, zk)
    bootstrap = _bootstrap(brokers)
    producer = make_producer(bootstrap)
    _through_leader_kills(zk, brokers, producer, kills)
    _exactly_once(bootstrap, producer)


def _confluent(bootstrap: str) -> AckedProducer:
    return AckedProducer(bootstrap, **{"enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
                                       "message.timeout.ms": 300_000})


def test_confluent_kafka_idempotent_through_a_few_leader_kills_writes_each_message_once(broker_factory, zk_connect,
                                                                                         zk):
    _through_kills(broker_factory, zk_connect, zk, _confluent, FEW_KILLS)


def test_kafka_python_idempotent_through_a_few_leader_kills_writes_each_message_once(broker_factory, zk_connect, zk):
    _through_kills(broker_factory, zk_connect, zk, KafkaPythonProducer, FEW_KILLS)


@pytest.mark.slow
def test_many_leader_kills_under_an_idempotent_producer_store_each_acknowledged_message_once(broker_factory,
                                                                                            zk_connect, zk):
    _through_kills(broker_factory, zk_connect, zk, _confluent, KILLS)


# --- a retried batch after the broker's SIGKILL -----------------------------------------------------

def _produce(port: int, batch: bytes, corr: int) -> tuple[int, int]:
    """One acks=-1 Produce of ``batch`` to partition 0: ``(error code, base offset)``."""
    conn = BrokerConnection("127.0.0.1", port)
    try:
        req = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=(TopicProduceData(TOPIC, (
            PartitionProduceData(0, batch),)),))
        resp = decode_response(ProduceResponse, conn.request_buffer(encode_request(req, 9, corr, "t")), 9)[1]
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset
    finally:
        conn.close()


def _batch(seq: int, n: int = 4) -> bytes:
    return bytes(build_batch([SimpleRecord(f"r-{seq + i}".encode(), None, (), None) for i in range(n)],
                             producer_id=9_000_001, producer_epoch=0, base_sequence=seq))


@pytest.mark.parametrize("roll", [False, True], ids=["scanned", "snapshot"])
def test_a_retried_batch_is_still_a_duplicate_after_the_broker_is_killed_and_restarted(broker_factory, roll):
    overrides = {"num.partitions": 1, "log.segment.bytes": 300} if roll else {"num.partitions": 1}
    broker = broker_factory(1, overrides=overrides)[0]
    port = broker.kafka_port
    wait_until(lambda: _produce(port, _batch(0), 1)[0] == 0, timeout=30, what="the topic auto-created")
    answers = [_produce(port, _batch(4 * k), 2 + k) for k in range(1, 6)]
    assert answers == [(0, 4 * k) for k in range(1, 6)]
    part = os.path.join(broker.properties()["log.dir"], f"{TOPIC}-0")
    snapshots = [f for f in os.listdir(part) if f.endswith(".snapshot")]
    assert bool(snapshots) == roll
    broker.kill()
    broker.start()
    assert _produce(broker.kafka_port, _batch(20), 10) == (0, 20)      # the last batch, retried: not again
    assert _produce(broker.kafka_port, _batch(4), 11) == (0, 4)        # five back: not again
    assert _produce(broker.kafka_port, _batch(0), 12)[0] == 45         # older than the last five
    assert _produce(broker.kafka_port, _batch(28), 13)[0] == 45        # a gap
    assert _produce(broker.kafka_port, _batch(24), 14) == (0, 24)      # the next one


# --- the product's own Kafka client ---------------------------------------------------------------

class OwnProducer(threading.Thread):
    """The product's :class:`~ingest.client.kafka.producer.KafkaProducer` (idempotence by default): sends
    ``v-<n>`` in flushes of 100 until stopped; a flush that returns acknowledged its values."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="own-producer", daemon=True)
        from ingest.client.kafka.producer import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", delivery_timeout_ms=300_000,
                                      request_timeout_ms=30_000, linger_ms=1000)
        self.acked: list[bytes] = []
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self._halt = threading.Event()

    def run(self) -> None:
        from ingest.errors import IngestError

        while not self._halt.is_set():
            values = [f"v-{self.sent + i:08d}".encode() for i in range(100)]
            self.sent += len(values)
            try:
                for v in values:
                    self.producer.send(TOPIC, v, partition=0)
                self.producer.flush()
                self.acked += values
            except IngestError as exc:
                self.failed += [(v, repr(exc)) for v in values]

    def stop(self) -> None:
        self._halt.set()
        self.join(330)
        self.producer.close()


def test_the_products_own_producer_through_a_few_leader_kills_writes_each_message_once(broker_factory, zk_connect, zk):
    _through_kills(broker_factory, zk_connect, zk, OwnProducer, FEW_KILLS)
