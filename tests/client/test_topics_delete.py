"""``ingest topics delete``: a Kafka-format and a replicated 0.7 topic deleted on every broker, a broker down
during a delete, and the refusals.

Real ZooKeeper and real broker processes; the command runs as an operator runs it (``python -m ingest.cli``
in a subprocess). What is proven:

- both kinds of replicated topic: the command prints Kafka's "Topic T is marked for deletion.", ``--wait``
  returns once the topic is gone: no directory of it on any broker, no znode (assignment, states, configs,
  marker), no client sees it (0.7 metadata, Kafka Metadata); the name created again is an empty topic at
  offset 0; DeleteTopics on the Kafka listener refuses the replicated 0.7 topic, naming this command; the
  AdminClient command of docs/operations.md deletes a Kafka topic as written;
- a replica's broker that is down holds the deletion up: ``--wait`` exits 1 naming it, and so does
  ``topics describe``; meanwhile 0.7
  metadata does not show the topic and a 0.7 produce to it is refused (LEADER_NOT_AVAILABLE) without creating
  a log; when the broker returns it deletes its copy and the topic leaves ZooKeeper;
- refusals (exit 2, one line naming the topic and what is allowed, ZooKeeper unchanged): an unknown topic,
  an unreplicated 0.7 topic, ``__consumer_offsets``, a topic being reassigned, a bad name, a bad ``--wait``;
  a topic already marked is not an error; ``--wait`` with no controller exits 1 and says so; the empty
  registration node an unreplicated 0.7 topic leaves once no broker holds it is removed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest import znodes
from ingest.wire.errors import ErrorCode
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.replication_topics import metadata_of, partition_info, produce_acked, wait_for_leaders
from tests.harness.wait import wait_until
from tests.harness.wire import produce_ack

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
INVALID_TOPIC_EXCEPTION = 17


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _dirs(brokers, topic: str) -> dict[int, set[int]]:
    """broker id -> the partitions of ``topic`` it has a log directory of (a ``-delete`` one counts too)."""
    out = {}
    for b in brokers:
        found = set()
        for d in b.log_dir.iterdir() if b.log_dir.exists() else ():
            name, _, p = d.name.split(".")[0].rpartition("-")
            if name == topic and p.isdigit():
                found.add(int(p))
        out[b.broker_id] = found
    return out


def _in_zookeeper(zk, topic: str) -> list[str]:
    return [path for path in (znodes.topic_dir(topic), znodes.topic_config_path(topic),
                              znodes.delete_topic_path(topic), znodes.partition_states_dir(topic))
            if zk.retry(zk.exists, path) is not None]


def _snapshot(zk) -> dict:
    out = {}
    for root in (znodes.BROKER_TOPICS, znodes.ADMIN):
        if zk.exists(root):
            for child in sorted(zk.get_children(root)):
                out[f"{root}/{child}"] = (zk.get(f"{root}/{child}")[0], sorted(zk.get_children(f"{root}/{child}")))
    return out


def _one_line_error(res: subprocess.CompletedProcess, words: list[str]) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, res.stderr)
    assert lines[0].startswith("ingest topics: error: "), lines[0]
    assert all(w in lines[0] for w in words), lines[0]


def _cluster(broker_factory, zk_connect):
    return broker_factory(3, zk_connect, overrides=r.replication_overrides(min_isr=1))


def _create(zk_connect: str, topic: str, fmt: str) -> None:
    res = _run("topics", "create", "--zookeeper", zk_connect, "--topic", topic, "--partitions", "2",
               "--replication-factor", "3", "--format", fmt)
    assert res.returncode == 0, res.stderr


def _kafka_produce(brokers, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers), "acks": "all"})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(60) == 0, "not every message was delivered"


def _kafka_watermarks(brokers, topic: str) -> list[tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers), "group.id": "w"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in (0, 1)]
    finally:
        c.close()


def _kafka_listed(brokers, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)})
    return topic in admin.list_topics(timeout=10).topics


def test_deletes_a_kafka_topic_and_a_replicated_07_topic_on_every_broker(broker_factory, zk_connect, zk):
    from ingest.wire.kafka.connection import KafkaConnection
    from ingest.wire.kafka.delete_topics import DeleteTopicsRequest

    brokers = _cluster(broker_factory, zk_connect)
    md = metadata_of(brokers)
    _create(zk_connect, "del-07", "0.7")
    _create(zk_connect, "del-k", "kafka")
    wait_for_leaders(md, "del-07", 2, isr=3)
    for p in (0, 1):
        produce_acked(md, "del-07", p, [r.payload(i) for i in range(20)])
    wait_until(lambda: _kafka_listed(brokers, "del-k"), 60, "the Kafka topic in Metadata")
    _kafka_produce(brokers, "del-k", 20)
    everywhere = {b.broker_id: {0, 1} for b in brokers}
    wait_until(lambda: _dirs(brokers, "del-07") == everywhere and _dirs(brokers, "del-k") == everywhere, 60,
               "both topics on every broker")

    # the Kafka API deletes Kafka-format topics only (docs/kafka-protocol.md, D2), and says what does
    conn = KafkaConnection("127.0.0.1", brokers[0].kafka_port)
    try:
        answer = conn.call(DeleteTopicsRequest(topic_names=("del-07",), timeout_ms=30_000), 5)
    finally:
        conn.close()
    ((name, code, message),) = [(t.name, t.error_code, t.error_message) for t in answer.responses]
    assert (name, code) == ("del-07", INVALID_TOPIC_EXCEPTION) and "ingest topics delete" in message, message
    assert zk.exists(znodes.delete_topic_path("del-07")) is None

    for topic in ("del-07", "del-k"):
        res = _run("topics", "delete", "--zookeeper", zk_connect, "--topic", topic, "--wait", "60")
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines() == [f"Topic {topic} is marked for deletion.", f"Topic {topic} is deleted."]
        assert _dirs(brokers, topic) == {b.broker_id: set() for b in brokers}
        assert _in_zookeeper(zk, topic) == []
    assert partition_info(md, "del-07", 0) is None, "0.7 metadata no longer shows the topic"

    # docs/operations.md, "Deleting topics": an AdminClient marks a Kafka topic, the command waits for it
    _create(zk_connect, "del-admin", "kafka")
    wait_until(lambda: _kafka_listed(brokers, "del-admin"), 60, "the Kafka topic in Metadata")
    code = ("from kafka.admin import KafkaAdminClient; print(KafkaAdminClient(bootstrap_servers=\"127.0.0.1:%d\")"
            ".delete_topics([\"del-admin\"]))" % brokers[1].kafka_port)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "'name': 'del-admin', 'error_code': 0" in res.stdout, (res.stdout, res.stderr)

    def described_gone():
        r_ = _run("topics", "describe", "--zookeeper", zk_connect, "--topic", "del-admin")
        return r_.returncode == 2 and "topic 'del-admin' does not exist in ZooKeeper" in r_.stderr
    wait_until(described_gone, 60, "describe says the topic does not exist")
    assert _dirs(brokers, "del-admin") == {b.broker_id: set() for b in brokers}
    assert _in_zookeeper(zk, "del-admin") == []
    assert not _kafka_listed(brokers, "del-k")
    res = _run("topics", "delete", "--zookeeper", zk_connect, "--topic", "del-07")
    _one_line_error(res, ["topic 'del-07' does not exist"])

    # the names are free again: new, empty topics at offset 0
    _create(zk_connect, "del-07", "0.7")
    _create(zk_connect, "del-k", "kafka")
    wait_for_leaders(md, "del-07", 2, isr=3)
    for p in (0, 1):
        leader = next(b for b in brokers if b.broker_id == partition_info(md, "del-07", p).leader)
        assert r.high_watermark(leader, "del-07", p) == 0
    assert produce_acked(md, "del-07", 0, [r.payload(1)]) == 0
    wait_until(lambda: _kafka_listed(brokers, "del-k"), 60, "the re-created Kafka topic in Metadata")
    assert _kafka_watermarks(brokers, "del-k") == [(0, 0), (0, 0)]


def test_a_broker_down_during_a_delete_holds_it_up_and_deletes_its_copy_when_it_returns(
        broker_factory, zk_connect, zk):
    brokers = _cluster(broker_factory, zk_connect)
    md = metadata_of(brokers)
    _create(zk_connect, "del-down", "0.7")
    wait_for_leaders(md, "del-down", 2, isr=3)
    for p in (0, 1):
        produce_acked(md, "del-down", p, [r.payload(i) for i in range(20)])
    everywhere = {b.broker_id: {0, 1} for b in brokers}
    wait_until(lambda: _dirs(brokers, "del-down") == everywhere, 60, "every replica")
    down = brokers[2]
    down.kill()
    wait_until(lambda: zk.retry(zk.exists, znodes.broker_path(down.broker_id)) is None, 60,
               "the killed broker's session ended")
    alive = [b for b in brokers if b is not down]

    res = _run("topics", "delete", "--zookeeper", zk_connect, "--topic", "del-down", "--wait", "3")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert res.stdout.splitlines() == ["Topic del-down is marked for deletion."]
    assert f"broker(s) [{down.broker_id}] have not deleted their replicas yet" in res.stderr, res.stderr
    assert f"broker(s) [{down.broker_id}] are not registered (down)" in res.stderr, res.stderr
    wait_until(lambda: all(not ps for ps in _dirs(alive, "del-down").values()), 60, "gone on the live brokers")
    assert _dirs([down], "del-down") == {down.broker_id: {0, 1}}, "the down broker's copy is untouched"
    assert zk.exists(znodes.topic_dir("del-down")) is not None, "the deletion waits for it"
    # while it is being deleted no client sees the topic, and a 0.7 produce neither lands nor creates a log
    assert partition_info(metadata_of(alive), "del-down", 0) is None
    for b in alive:
        assert produce_ack(b, "del-down", [b"late"]).error == ErrorCode.LEADER_NOT_AVAILABLE
    assert all(not ps for ps in _dirs(alive, "del-down").values())
    res = _run("topics", "delete", "--zookeeper", zk_connect, "--topic", "del-down")
    assert (res.returncode, res.stdout) == (0, "Topic del-down is already marked for deletion.\n"), res.stderr
    res = _run("topics", "describe", "--zookeeper", zk_connect, "--topic", "del-down")
    assert f"del-down: marked for deletion; waiting for broker(s) [{down.broker_id}] to delete their replicas" \
        in res.stdout, res.stdout

    down.restart()
    wait_until(lambda: not _dirs([down], "del-down")[down.broker_id], 60, "the returning broker deleted its copy")
    wait_until(lambda: _in_zookeeper(zk, "del-down") == [], 60, "the topic gone from ZooKeeper")


def test_refusals_name_the_topic_and_what_is_allowed_and_change_nothing(zk_connect, zk):
    """ZooKeeper alone: nothing acts on a mark, so what the command writes stays to be seen."""
    r.create_topic(zk, "moving", {0: [0, 1]})
    zk.create(znodes.REASSIGN_PARTITIONS, b'{"version":1,"partitions":[{"topic":"moving","partition":0,'
                                          b'"replicas":[1,2]}]}', makepath=True)
    zk.create(znodes.topic_path("legacy", 4), b"2", makepath=True)   # what a 0.7 broker registers
    zk.ensure_path(znodes.topic_dir("__consumer_offsets"))
    zk.set(znodes.topic_dir("__consumer_offsets"), znodes.assignment_value({0: [0]}, znodes.KAFKA_FORMAT))
    before = _snapshot(zk)
    for topic, words in (
            ("nope", ["topic 'nope' does not exist"]),
            ("legacy", ["'legacy' is an unreplicated 0.7 topic", "broker(s) [4]", "log.dir/legacy-*",
                        "Kafka-format or replicated 0.7"]),
            ("__consumer_offsets", ["__consumer_offsets is a kafka internal topic", "not allowed"]),
            ("moving", ["'moving' has partition(s) [0] being reassigned", "--verify", "--cancel"]),
            ("no/slash", ["invalid topic name 'no/slash'", "allowed is"])):
        _one_line_error(_run("topics", "delete", "--zookeeper", zk_connect, "--topic", topic), words)
    _one_line_error(_run("topics", "delete", "--zookeeper", zk_connect, "--topic", "moving", "--wait", "soon"),
                    ["--wait 'soon'", "0 to 86400"])
    _one_line_error(_run("topics", "delete", "--topic", "moving"), ["give --zookeeper"])
    assert _snapshot(zk) == before

    # marked with no broker and no controller: --wait says who holds it up and why nothing moves
    r.create_topic(zk, "idle", {0: [0, 1]})
    res = _run("topics", "delete", "--zookeeper", zk_connect, "--topic", "idle", "--wait", "0.5")
    assert res.returncode == 1 and res.stdout == "Topic idle is marked for deletion.\n", (res.stdout, res.stderr)
    assert "broker(s) [0, 1] have not deleted their replicas yet" in res.stderr
    assert "no controller is running" in res.stderr
    assert zk.exists(znodes.delete_topic_path("idle")) is not None

    # an unreplicated 0.7 topic no broker registers any more (its logs were removed): the empty node goes
    zk.ensure_path(znodes.topic_dir("leftover"))
    res = _run("topics", "delete", "--zookeeper", zk_connect, "--topic", "leftover", "--wait", "5")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "Topic leftover is an unreplicated 0.7 topic that no broker holds any more: its empty registration "
        "/brokers/topics/leftover was removed.", "Topic leftover is deleted."]
    assert zk.exists(znodes.topic_dir("leftover")) is None and zk.exists(znodes.topic_dir("legacy")) is not None
