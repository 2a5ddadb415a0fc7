"""kafka-python 2.3 against the Kafka listener: version auto-detected and fixed old versions.

kafka-python 2.3 runs in its own venv (``.venv-kafka23``; ``.venv`` keeps kafka-python 3.0, the
reference of tests/wire) through tests/kafka/drivers/kafka_python_ops.py. With ``api_version`` fixed it
sends no ApiVersions and uses the requests of that Kafka version: (0,8,0) and (0,8,2) Metadata v0,
Produce v0 and Fetch v0 with magic 0 message sets, (0,10,0) Metadata v1, Produce v2 and Fetch v2 with
magic 1 (timestamps, no headers). The broker converts them up on produce and down on fetch. Each
version produces with acks 1 and all and every codec it allows, and reads everything back from the
earliest offset, against one broker without ZooKeeper and a replicated topic on three brokers with it.
What the old versions cannot do is the client's refusal, named: ``offsets_for_times`` before 0.10.1,
lz4 before 0.8.2, zstd before 2.1, headers before 0.11; a zstd batch is UNSUPPORTED_COMPRESSION_TYPE
(76) to a Fetch below v10, as Kafka answers. With a ``group_id`` (auto-detected version) ``subscribe``
joins a group, reads everything once and ``commit()``/``committed()`` round-trip.

acks=0 is not run: kafka-python 2.3 never writes an acks=0 Produce request until another request goes
out on the same connection (``KafkaClient.send`` schedules the write only for a request whose future is
not done yet, and an acks=0 future is done at once), so a producer that flushes and closes loses them
all; docs/kafka-protocol.md, "Tested clients".
"""
from __future__ import annotations

import time

import pytest

from tests.kafka.clients import confluent_consume, messages
from tests.kafka.conftest import PARTITIONS
from tests.kafka.other_clients import (by_partition, check_read, decode_records, encode_messages, kafka23,
                                       kafka23_python, ok)

pytestmark = pytest.mark.processes

N = 2_000
T0 = int(time.time() * 1000) - 3_600_000   # an hour ago: inside retention, before the broker's clock
ACKS = (1, "all")
# version label -> (api_version, the codecs kafka-python 2.3 allows with it)
VERSIONS = {
    "auto": (None, (None, "gzip", "snappy", "lz4", "zstd")),
    "0.8.0": ((0, 8, 0), (None, "gzip", "snappy")),
    "0.8.2": ((0, 8, 2), (None, "gzip", "snappy", "lz4")),
    "0.10.0": ((0, 10, 0), (None, "gzip", "snappy", "lz4")),
}


@pytest.fixture(scope="module")
def py23():
    return kafka23_python()


def _produce(py23, bootstrap, topic, msgs, api_version, codecs, headers: bool) -> None:
    rounds = [(acks, codec) for acks in ACKS for codec in codecs]
    per_round = -(-len(msgs) // len(rounds))
    ops = [{"op": "produce", "bootstrap": bootstrap, "topic": topic, "api_version": api_version, "acks": acks,
            "codec": codec, "messages": encode_messages(msgs[i * per_round:(i + 1) * per_round], headers)}
           for i, (acks, codec) in enumerate(rounds)]
    for result in kafka23(py23, *ops):
        ok(result)


def _consume(py23, bootstrap, topic, n, api_version, from_ts=None):
    [result] = kafka23(py23, {"op": "consume", "bootstrap": bootstrap, "topic": topic, "partitions": PARTITIONS,
                              "n": n, "api_version": api_version, "from_ts": from_ts})
    return result


@pytest.mark.parametrize("version", list(VERSIONS))
def test_each_version_produces_and_reads_back_every_message_byte_exact_in_order_once(kafka_cluster, py23,
                                                                                      version):
    api_version, codecs = VERSIONS[version]
    modern = api_version is None               # magic 2: headers; magic >= 1: timestamps
    stamped = modern or api_version >= (0, 10, 0)
    topic = kafka_cluster.topic(f"kp23-{version}")
    bootstrap = kafka_cluster.bootstrap
    msgs = messages(f"kp23-{version}", N, PARTITIONS, T0)
    _produce(py23, bootstrap, topic, msgs, api_version, codecs, headers=modern)

    want = by_partition(msgs, PARTITIONS, headers=modern, timestamps=stamped)
    got = decode_records(ok(_consume(py23, bootstrap, topic, N, api_version))["records"], PARTITIONS)
    check_read(got, want)

    # what was converted up on produce reads the same through a modern client (Fetch v12, batches v2)
    check_read(confluent_consume(bootstrap, topic, PARTITIONS, N), want, timestamps=stamped)

    half = N // 2
    if modern:
        got = decode_records(ok(_consume(py23, bootstrap, topic, N - half, None, from_ts=T0 + half))["records"],
                             PARTITIONS)
        check_read(got, by_partition(msgs[half:], PARTITIONS),
                   first_offset={p: half // PARTITIONS for p in range(PARTITIONS)})
    else:
        # kafka-python's own refusal: ListOffsets v1 (by timestamp) came with Kafka 0.10.1
        assert "offsets_for_times API not supported" in _consume(py23, bootstrap, topic, 1, api_version,
                                                                  from_ts=T0 + half)["error"]


def test_old_versions_read_what_a_modern_producer_wrote_converted_down(kafka_cluster, py23):
    """Batches v2 with headers (auto-detected version, Produce v8) read by Fetch v0 (magic 0) and v2 (magic 1):
    keys and values exact, headers dropped, timestamps kept in magic 1; zstd is refused below Fetch v10."""
    bootstrap = kafka_cluster.bootstrap
    topic = kafka_cluster.topic("kp23-down")
    msgs = messages("kp23-down", 1_000, PARTITIONS, T0)
    _produce(py23, bootstrap, topic, msgs, None, (None, "gzip", "snappy", "lz4"), headers=True)
    for version in ("0.8.0", "0.8.2", "0.10.0"):
        api_version = VERSIONS[version][0]
        stamped = api_version >= (0, 10, 0)
        got = decode_records(ok(_consume(py23, bootstrap, topic, len(msgs), api_version))["records"], PARTITIONS)
        check_read(got, by_partition(msgs, PARTITIONS, headers=False, timestamps=stamped))

    zstd = kafka_cluster.topic("kp23-down-zstd")
    _produce(py23, bootstrap, zstd, msgs[:100], None, ("zstd",), headers=True)
    for version in ("0.8.0", "0.8.2", "0.10.0"):
        result = _consume(py23, bootstrap, zstd, 100, VERSIONS[version][0])
        assert result["error"].startswith("UnsupportedCompressionTypeError"), (version, result)


def test_a_group_consumer_reads_every_message_once_commits_and_reads_its_commits_back(kafka_cluster, py23):
    """The auto-detected version with a ``group_id``: ``subscribe`` joins the group (FindCoordinator, JoinGroup,
    SyncGroup), reads from the earliest offset, ``commit()`` commits; ``committed()`` answers the partitions'
    ends, and the group started again reads nothing."""
    bootstrap = kafka_cluster.bootstrap
    topic = kafka_cluster.topic("kp23-group")
    group = f"kp23-{kafka_cluster.kind}"
    msgs = messages("kp23-group", 1_000, PARTITIONS, T0)
    _produce(py23, bootstrap, topic, msgs, None, (None, "gzip"), headers=True)
    op = {"op": "group_consume", "bootstrap": bootstrap, "topic": topic, "partitions": PARTITIONS, "group": group,
          "n": len(msgs), "timeout_ms": 60_000, "api_version": None}
    [first] = kafka23(py23, op)
    first = ok(first)
    check_read(decode_records(first["records"], PARTITIONS), by_partition(msgs, PARTITIONS))
    ends = [[p, sum(1 for m in msgs if m.partition == p)] for p in range(PARTITIONS)]
    assert first["assigned"] == list(range(PARTITIONS)) and first["committed"] == ends, first

    [again] = kafka23(py23, {**op, "n": 0, "timeout_ms": 10_000})
    assert ok(again)["assigned"] == list(range(PARTITIONS)), again
    assert again["records"] == [] and again["committed"] == ends, again
