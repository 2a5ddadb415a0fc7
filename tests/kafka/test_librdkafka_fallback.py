"""librdkafka (confluent-kafka) told not to ask for API versions: ``api.version.request=false`` and
``broker.version.fallback`` 0.8.2, 0.9.0 or 0.10.0, as a service configured for an old cluster has it.

With 0.8.2 and 0.9.0 librdkafka sends no ApiVersions and uses that Kafka's requests: Metadata v0, Produce
v0/v1 and Fetch v0/v1 with magic 0 message sets, FindCoordinator v0, ListOffsets v0. The broker converts
up on produce and down on fetch. 0.10.0 is no old setting for librdkafka: a fallback of 0.10 or later turns
``api.version.request`` back on (librdkafka's configuration reference), so it negotiates as with default settings.
Each produces with acks 0, 1 and all and every codec it has (none, gzip, snappy, lz4), then reads back
from the earliest offset with the same settings, against one broker without ZooKeeper and a replicated
topic on three brokers with it: byte-exact, in order, none twice; magic 0 has no timestamps (librdkafka
reports TIMESTAMP_NOT_AVAILABLE) and no headers.
"""
from __future__ import annotations

import time

import pytest

from tests.kafka.clients import messages
from tests.kafka.conftest import PARTITIONS
from tests.kafka.other_clients import by_partition, check_read, wait_for_ends

pytestmark = pytest.mark.processes

N = 2_400
T0 = int(time.time() * 1000) - 3_600_000
ROUNDS = [(acks, codec) for acks in ("0", "1", "all") for codec in ("none", "gzip", "snappy", "lz4")]


def _conf(bootstrap: str, fallback: str) -> dict:
    return {"bootstrap.servers": bootstrap, "api.version.request": False, "broker.version.fallback": fallback,
            "log_level": 3}    # the deprecation warnings of both keys are not this test's output


def _produce(conf: dict, topic: str, msgs, acks: str, codec: str, headers: bool) -> None:
    from confluent_kafka import Producer

    errors: list = []
    p = Producer(dict(conf, **{"acks": acks, "compression.type": codec, "linger.ms": 5}))
    for m in msgs:
        while True:
            try:
                p.produce(topic, value=m.value, key=m.key, partition=m.partition, timestamp=m.timestamp,
                          headers=list(m.headers) if headers else None,
                          on_delivery=lambda err, _msg: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def _consume(conf: dict, topic: str, n: int) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

    c = Consumer(dict(conf, **{"group.id": "fallback", "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out: dict = {p: [] for p in range(PARTITIONS)}
        got = idle = 0
        while got < n and idle < 20:
            batch = c.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            for m in batch:
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                out[m.partition()].append((m.offset(), m.key(), m.value(), tuple(m.headers() or ()),
                                           None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts))
                got += 1
        return out
    finally:
        c.close()


def _ends(msgs) -> dict[int, int]:
    return {p: sum(1 for m in msgs if m.partition == p) for p in range(PARTITIONS)}


@pytest.mark.parametrize("fallback", ["0.8.2", "0.9.0", "0.10.0"])
def test_fallback_versions_produce_and_read_back_every_message_byte_exact_in_order_once(kafka_cluster, fallback):
    negotiates = fallback == "0.10.0"
    topic = kafka_cluster.topic(f"rdfb-{fallback}")
    conf = _conf(kafka_cluster.bootstrap, fallback)
    msgs = messages(f"rdfb-{fallback}", N, PARTITIONS, T0)
    per_round = N // len(ROUNDS)
    for i, (acks, codec) in enumerate(ROUNDS):
        _produce(conf, topic, msgs[i * per_round:(i + 1) * per_round], acks, codec, headers=negotiates)
        if acks == "0":       # appended before the next producer's connection can overtake it
            wait_for_ends(kafka_cluster.bootstrap, topic, _ends(msgs[:(i + 1) * per_round]))
    check_read(_consume(conf, topic, N), by_partition(msgs, PARTITIONS, headers=negotiates, timestamps=negotiates))
