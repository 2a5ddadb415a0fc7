"""kafkajs (Node.js) produces to the Kafka listener; its admin client reads offsets; another client reads back.

kafkajs 2.2.4 (pinned in tests/kafka/node/package-lock.json, installed with ``npm ci``) sends keys, headers
and timestamps with acks -1, 1 and 0, uncompressed, gzip and snappy (the ``kafkajs-snappy`` codec;
kafkajs's lz4 and zstd codecs need native modules: not run). Its admin client answers
``fetchTopicOffsets`` (ListOffsets latest and earliest) and ``fetchTopicOffsetsByTimestamp``, and
``fetchTopicMetadata``. kafkajs's consumer works only in a consumer group (FindCoordinator, JoinGroup,
SyncGroup, ...), which the broker does not serve yet, so confluent-kafka reads the records back.
Against one broker without ZooKeeper and a replicated topic on three brokers with it: every message
byte-exact, in order, none twice.
"""
from __future__ import annotations

import time

import pytest

from tests.kafka.clients import confluent_consume, messages
from tests.kafka.conftest import PARTITIONS
from tests.kafka.other_clients import (ClientUnavailable, by_partition, check_read, encode_messages, kafkajs,
                                       kafkajs_dir, ok, wait_for_ends)

pytestmark = pytest.mark.processes

N = 2_997       # 9 rounds of 333
T0 = int(time.time() * 1000) - 3_600_000
ROUNDS = [(acks, codec) for acks in (-1, 1, 0) for codec in ("none", "gzip", "snappy")]


@pytest.fixture(scope="module")
def node_dir():
    try:
        return kafkajs_dir()
    except ClientUnavailable as exc:
        pytest.skip(str(exc))


def _ends(msgs) -> dict[int, int]:
    return {p: sum(1 for m in msgs if m.partition == p) for p in range(PARTITIONS)}


def test_kafkajs_produces_every_message_and_its_admin_reads_the_offsets(kafka_cluster, node_dir):
    bootstrap = kafka_cluster.bootstrap
    brokers = bootstrap.split(",")
    topic = kafka_cluster.topic("kafkajs")
    msgs = messages("kafkajs", N, PARTITIONS, T0)
    per_round = N // len(ROUNDS)
    for i, (acks, codec) in enumerate(ROUNDS):
        ok(kafkajs(node_dir, {"op": "produce", "brokers": brokers, "topic": topic, "acks": acks, "codec": codec,
                              "messages": encode_messages(msgs[i * per_round:(i + 1) * per_round])})[0])
        if acks == 0:         # appended before the next producer's connection can overtake it
            wait_for_ends(bootstrap, topic, _ends(msgs[:(i + 1) * per_round]))

    check_read(confluent_consume(bootstrap, topic, PARTITIONS, N), by_partition(msgs, PARTITIONS))

    half = N // 2
    [md, offsets] = kafkajs(node_dir, {"op": "metadata", "brokers": brokers, "topic": topic},
                            {"op": "offsets", "brokers": brokers, "topic": topic, "timestamp": T0 + half})
    ids = sorted(b.broker_id for b in kafka_cluster.brokers)
    for part, leader, replicas, isr in ok(md)["partitions"]:
        assert leader in ids and sorted(replicas) == ids and sorted(isr) == ids, (part, leader, replicas, isr)
    ends = _ends(msgs)
    # message i has timestamp T0 + i and sits in partition i % PARTITIONS at offset i // PARTITIONS
    assert sorted(ok(offsets)["offsets"]) == [[p, half // PARTITIONS, ends[p], 0] for p in range(PARTITIONS)]
