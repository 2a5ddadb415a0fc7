"""kafkajs (Node.js) produces to the Kafka listener; its admin client reads offsets; another client reads back.

kafkajs 2.2.4 (pinned in tests/kafka/node/package-lock.json, installed with ``npm ci``) sends keys, headers
and timestamps with acks -1, 1 and 0, uncompressed, gzip and snappy (the ``kafkajs-snappy`` codec;
kafkajs's lz4 and zstd codecs need native modules: not run). Its admin client answers
``fetchTopicOffsets`` (ListOffsets latest and earliest) and ``fetchTopicOffsetsByTimestamp``, and
``fetchTopicMetadata``; confluent-kafka reads the records back. kafkajs's consumer (it consumes only in a
consumer group): one member reads from the beginning, a second joins (a rebalance splits the partitions),
the two read the rest; every message once, and the group's commits (kafkajs's autoCommit) are the ends.
Its admin client creates a topic with configs, describes them, adds partitions and deletes it (a broker
without ZooKeeper refuses those writes: INVALID_REQUEST). Against one broker without ZooKeeper and a
replicated topic on three brokers with it: every message byte-exact, in order, none twice.
"""
from __future__ import annotations

import time

import pytest

from tests.kafka.clients import confluent_consume, messages
from tests.kafka.conftest import PARTITIONS
from tests.kafka.other_clients import (ClientUnavailable, by_partition, check_read, decode_records,
                                       encode_messages, installed_as_locked, kafkajs, kafkajs_dir, ok,
                                       wait_for_ends)

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


def test_an_install_from_the_same_lock_counts_as_current_whatever_the_file_times(tmp_path):
    """A fresh checkout's lock file is newer than an install made from the same lock (a worktree sharing
    another's node_modules): that install is current, and only a different package set is not."""
    import json
    import os

    lock = {"name": "x", "lockfileVersion": 3, "packages": {"": {"name": "x"},
                                                            "node_modules/kafkajs": {"version": "2.2.4"}}}
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / ".package-lock.json").write_text(
        json.dumps({"name": "x", "packages": {"node_modules/kafkajs": {"version": "2.2.4"}}}))
    (tmp_path / "package-lock.json").write_text(json.dumps(lock))
    os.utime(tmp_path / "node_modules" / ".package-lock.json", (1, 1))
    assert installed_as_locked(tmp_path)
    lock["packages"]["node_modules/kafkajs"]["version"] = "2.2.3"
    (tmp_path / "package-lock.json").write_text(json.dumps(lock))
    assert not installed_as_locked(tmp_path)


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


def _merged(members: dict, partitions: int) -> dict[int, list[tuple]]:
    """The members' reads together, per partition in offset order; each member read its part in order."""
    rows: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    for name, member in members.items():
        got = decode_records(member["records"], partitions)
        for p, part in got.items():
            offsets = [r[0] for r in part]
            assert offsets == sorted(offsets), f"member {name}, partition {p}: read out of order {offsets[:10]}"
            rows[p] += part
    return {p: sorted(part, key=lambda r: r[0]) for p, part in rows.items()}


def test_kafkajs_group_members_read_every_message_once_and_commit_through_a_rebalance(kafka_cluster, node_dir):
    """Member a subscribes from the beginning and reads the first messages; member b joins (a rebalance gives
    each a partition); the second messages are read by the two together: every message once, byte-exact,
    and the group's committed offsets (autoCommit) are the partitions' ends."""
    topic = kafka_cluster.topic("kafkajs-group")
    msgs = messages("kafkajs-group", 1_000, PARTITIONS, T0)
    first, second = msgs[:600], msgs[600:]
    [result] = kafkajs(node_dir, {"op": "group", "brokers": kafka_cluster.bootstrap.split(","), "topic": topic,
                                  "group": f"kafkajs-{kafka_cluster.kind}", "partitions": PARTITIONS,
                                  "first": encode_messages(first), "second": encode_messages(second),
                                  "timeout_ms": 120_000})
    members = ok(result)["members"]
    check_read(_merged(members, PARTITIONS), by_partition(msgs, PARTITIONS))

    a, b = members["a"], members["b"]
    assert a["joins"][0]["assigned"] == list(range(PARTITIONS)), a["joins"]
    assert sorted(a["joins"][-1]["assigned"] + b["joins"][-1]["assigned"]) == list(range(PARTITIONS)), (a, b)
    assert b["records"], "member b read nothing after the rebalance"
    assert result["committed"] == [[p, n] for p, n in _ends(msgs).items()]


def test_kafkajs_admin_creates_describes_grows_and_deletes_a_topic(kafka_cluster, node_dir):
    """createTopics (partitions, replication factor, configs), describeConfigs, createPartitions, deleteTopics.

    A broker without ZooKeeper has its topics from its logs and server.properties: it refuses the writes
    with INVALID_REQUEST and a message saying why ("The admin API"; kafkajs shows the code's text, not the
    broker's message)."""
    topic = f"kafkajs-admin-{kafka_cluster.kind}"      # created by the client, not the fixture
    replication = len(kafka_cluster.brokers)
    [out] = kafkajs(node_dir, {"op": "admin", "brokers": kafka_cluster.bootstrap.split(","), "topic": topic,
                               "partitions": 3, "replication": replication, "more": 5,
                               "configs": {"retention.ms": "7200000", "max.message.bytes": "65536"}})
    out = ok(out)
    if kafka_cluster.zk is None:
        assert out["create"]["type"] == "INVALID_REQUEST", out
        assert out["create_partitions"]["type"] == "INVALID_REQUEST", out
        assert out["delete"]["type"] == "INVALID_REQUEST", out
        return
    assert out["create"] is True, out
    assert out["create_again"] is False, out          # TOPIC_ALREADY_EXISTS: kafkajs answers false
    ids = {b.broker_id for b in kafka_cluster.brokers}
    assert isinstance(out["metadata"], list) and [p for p, _l, _r in out["metadata"]] == [0, 1, 2], out
    assert all(leader in ids and n == replication for _p, leader, n in out["metadata"]), out
    assert out["configs"]["retention.ms"][:2] == ["7200000", False], out
    assert out["configs"]["max.message.bytes"][:2] == ["65536", False], out
    assert out["configs"]["retention.bytes"][1] is True, out
    assert out["create_partitions"] is True, out
    assert isinstance(out["metadata_after"], list) and [p for p, _l, _r in out["metadata_after"]] == list(range(5)), out
    assert all(leader in ids and n == replication for _p, leader, n in out["metadata_after"]), out
    assert out["delete"] is True, out
    assert topic not in out["topics_after"], out
