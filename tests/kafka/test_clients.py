"""Real Kafka clients against a real broker process's Kafka listener, without and with ZooKeeper.

Each client (kafka-python, confluent-kafka with default settings, aiokafka) produces 10,000 distinct
messages (keys, headers, timestamps) to a two-partition topic the broker auto-creates, with acks 0, 1
and all and every compression codec, then reads them back by ``assign``: from the earliest offset and
from a timestamp (``offsets_for_times``). Every message comes back byte-exact, in order per partition,
none twice; the 0.7 port does not serve the Kafka topic.
"""
from __future__ import annotations

import time

import pytest

from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode
from tests.harness.brokers import RawClient, broker_cluster, stop_all
from tests.harness.zookeeper import fresh_chroot
from tests.kafka.clients import ACKS, CLIENTS, CODECS, messages

pytestmark = pytest.mark.processes

N = 10_000
PARTITIONS = 2
T0 = int(time.time() * 1000) - 3_600_000   # an hour ago: inside retention, before the broker's clock


@pytest.fixture(scope="module", params=["local", "zookeeper"])
def kafka_broker(request, tmp_path_factory):
    """One broker process; its Kafka listener's bootstrap address."""
    zk = fresh_chroot(request.getfixturevalue("zookeeper")) if request.param == "zookeeper" else None
    brokers = broker_cluster(tmp_path_factory, n=1, zk_connect=zk, num_partitions=PARTITIONS)
    yield brokers[0]
    stop_all(brokers)


def _by_partition(msgs, start_index: int = 0) -> dict:
    out: dict = {p: [] for p in range(PARTITIONS)}
    for i, m in enumerate(msgs):
        if i >= start_index:
            out[m.partition].append((m.key, m.value, m.headers, m.timestamp))
    return out


def _check(got: dict, expected: dict) -> None:
    for part, want in expected.items():
        rows = got[part]
        offsets = [r[0] for r in rows]
        assert len(set(offsets)) == len(offsets), f"partition {part}: an offset read twice"
        assert offsets == sorted(offsets), f"partition {part}: offsets out of order"
        assert [(k, v, tuple((h, bytes(x)) for h, x in hs), ts) for _o, k, v, hs, ts in rows] == want, \
            f"partition {part}: the messages read back differ from those produced"


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_every_message_comes_back_byte_exact_in_order_once(kafka_broker, client):
    produce, consume = CLIENTS[client]
    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    topic = f"proof-{client}"
    msgs = messages(client, N, PARTITIONS, T0)
    rounds = [(acks, codec) for acks in ACKS for codec in CODECS]
    per_round = -(-N // len(rounds))
    for r, (acks, codec) in enumerate(rounds):
        produce(bootstrap, topic, msgs[r * per_round:(r + 1) * per_round], acks, codec)

    _check(consume(bootstrap, topic, PARTITIONS, N), _by_partition(msgs))
    half = N // 2
    _check(consume(bootstrap, topic, PARTITIONS, N - half, from_ts=T0 + half), _by_partition(msgs, half))

    # the 0.7 port does not serve a Kafka-format topic: its own error code, nothing read
    with RawClient(kafka_broker.host, kafka_broker.port) as c:
        assert p.FetchResponse.decode(c.request(p.FetchRequest(topic, 0, 0, 100_000))).error \
            == ErrorCode.WRONG_TOPIC_KIND
