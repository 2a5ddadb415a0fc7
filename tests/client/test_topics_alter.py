"""``ingest topics alter --partitions N``: real ZooKeeper, real brokers, the real command line.

Growing writes the new partitions (Kafka's placement) and the controller elects their leaders, which
``topics describe`` then shows; shrinking, bad values and refused topics are one line, exit 2, and leave
ZooKeeper unchanged.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ingest import znodes
from ingest.broker import assignment, partition_growth
from ingest.errors import InvalidPartitionsError, ReassignmentInProgressError
from tests.client.test_topics_admin import _assert_one_line_error, _kazoo, _legacy_topic, _run, _snapshot
from tests.harness.brokers import broker_cluster, broker_factory, stop_all  # noqa: F401 (fixture)
from tests.harness.wait import wait_until

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """Three real brokers registered in ZooKeeper under a chroot of this module."""
    chroot = f"/alter-{uuid.uuid4().hex[:10]}"
    c = _kazoo(zookeeper.connect)
    c.ensure_path(chroot)
    c.stop()
    c.close()
    connect = zookeeper.connect + chroot
    brokers = broker_cluster(tmp_path_factory, 3, connect)
    client = _kazoo(connect)
    try:
        wait_until(lambda: len(client.get_children(znodes.BROKER_IDS)) == 3, what="3 brokers registered")
        yield connect, brokers, client
    finally:
        client.stop()
        client.close()
        stop_all(brokers)


def _describe(connect: str, topic: str) -> list[dict]:
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", topic, "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


def _create(connect: str, topic: str, *extra: str) -> None:
    r = _run("topics", "create", "--zookeeper", connect, "--topic", topic, *extra)
    assert r.returncode == 0, r.stderr


# --- pure: the shared plan (CreatePartitions and the command line) ----------------------------------

def test_the_plan_appends_partitions_by_the_creation_rule_and_keeps_the_format():
    data = znodes.assignment_value({0: [0, 1], 1: [1, 2]}, "kafka")
    g = partition_growth.plan("t", data, 5, None, [2, 0, 1])
    assert g.added == {p: assignment.assign([0, 1, 2], 5, 2)[p] for p in (2, 3, 4)} == {
        2: [2, 0], 3: [0, 1], 4: [1, 2]}
    assert znodes.parse_assignment(g.value) == {0: (0, 1), 1: (1, 2), 2: (2, 0), 3: (0, 1), 4: (1, 2)}
    assert znodes.parse_topic_format(g.value) == "kafka" and (g.before, g.after) == (2, 5)
    g07 = partition_growth.plan("t", znodes.assignment_value({0: [1]}), 2, [[2]], [1, 2])
    assert znodes.parse_topic_format(g07.value) is None and g07.added == {1: [2]}
    with pytest.raises(InvalidPartitionsError, match="Topic already has 2 partitions"):
        partition_growth.plan("t", data, 2, None, [0, 1, 2])
    moving = znodes.assignment_value({0: [0, 1, 2], 1: [1, 2]}, "kafka",
                                     {0: znodes.ReplicaMove(adding=(2,), removing=(0,))})
    with pytest.raises(ReassignmentInProgressError, match=r"'t' \(partition\(s\) \[0\]\)"):
        partition_growth.plan("t", moving, 3, None, [0, 1, 2])
    with pytest.raises(ReassignmentInProgressError, match=r"\[1\]"):
        partition_growth.plan("t", data, 3, None, [0, 1, 2],
                              pending=znodes.reassignment_value({("other", 0): [1], ("t", 1): [2, 0]}))
    # an unreadable /admin/reassign_partitions moves nothing (the controller drops it): it does not hold growth
    # back, as it does not hold deletion back (tests/broker/test_topic_deletion.py)
    assert partition_growth.plan("t", data, 3, None, [0, 1, 2], pending=b"{not json").after == 3


# --- against real brokers -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["kafka", "0.7"])
def test_grow_then_describe_shows_the_new_partitions_with_leaders(cluster, fmt):
    connect, brokers, client = cluster
    ids = sorted(b.broker_id for b in brokers)
    topic = f"grow-{fmt.replace('.', '')}"
    _create(connect, topic, "--partitions", "2", "--replication-factor", "2", "--format", fmt)
    wait_until(lambda: all(r["leader"] is not None for r in _describe(connect, topic)), timeout=60,
               what="leaders of the first 2 partitions")
    before = client.get(znodes.topic_dir(topic))[0]
    r = _run("topics", "alter", "--zookeeper", connect, "--topic", topic, "--partitions", "5")
    assert r.returncode == 0, r.stderr
    rule = assignment.assign(ids, 5, 2)
    assert r.stdout.splitlines()[0] == (
        f"added 3 partition(s) to topic '{topic}': 2 -> 5, replicas "
        f"2:[{rule[2][0]},{rule[2][1]}] 3:[{rule[3][0]},{rule[3][1]}] 4:[{rule[4][0]},{rule[4][1]}] "
        "(the controller elects the leaders)")
    assert "WARNING: a producer that partitions by key" in r.stdout
    data = client.get(znodes.topic_dir(topic))[0]
    assert znodes.parse_assignment(data) == {**znodes.parse_assignment(before),
                                             **{p: tuple(rule[p]) for p in (2, 3, 4)}}
    assert znodes.parse_topic_format(data) == (None if fmt == "0.7" else "kafka")
    rows = wait_until(lambda: (lambda rs: rs if len(rs) == 5 and all(x["leader"] is not None for x in rs)
                               else None)(_describe(connect, topic)), timeout=60,
                      what="leaders of the 3 new partitions")
    assert [(x["partition"], x["replicas"], x["leader"]) for x in rows[2:]] == [
        (p, rule[p], rule[p][0]) for p in (2, 3, 4)]
    assert all(x["high_watermark"] == 0 for x in rows[2:]), rows   # their leaders have the (empty) logs


def test_a_manual_assignment_of_the_new_partitions(cluster):
    connect, brokers, client = cluster
    a, b, c = sorted(x.broker_id for x in brokers)
    _create(connect, "manual-grow", "--partitions", "1", "--replication-factor", "2")
    r = _run("topics", "alter", "--zk", connect, "--topic", "manual-grow", "--partitions", "3",
             "--replica-assignment", f"{c}:{a},{b}:{c}")
    assert r.returncode == 0, r.stderr
    plan = znodes.parse_assignment(client.get(znodes.topic_dir("manual-grow"))[0])
    assert plan[1] == (c, a) and plan[2] == (b, c) and len(plan) == 3
    # --dry-run checks and prints, and writes nothing
    before = _snapshot(client)
    r = _run("topics", "alter", "--zk", connect, "--topic", "manual-grow", "--partitions", "4", "--dry-run")
    assert r.returncode == 0 and r.stdout.startswith("would add 1 partition(s) to topic 'manual-grow': 3 -> 4"), r
    assert _snapshot(client) == before


BAD_ALTERS = [
    (["--partitions", "3"], ["Topic currently has 4 partitions, which is higher than the requested 3",
                             "nothing was written"]),
    (["--partitions", "4"], ["Topic already has 4 partitions"]),
    (["--partitions", "0"], ["--partitions 0", "1..10000"]),
    (["--partitions", "10001"], ["--partitions 10001", "1..10000"]),
    (["--partitions", "five"], ["--partitions 'five' is not an integer", "above the topic's current"]),
    (["--partitions", "6", "--replica-assignment", "{a}:{b}"],
     ["Increasing the number of partitions by 2 but 1 assignments provided"]),
    (["--partitions", "5", "--replica-assignment", "{a}"], ["partition 0 has 2 while partition 4 has replicas"]),
    (["--partitions", "5", "--replica-assignment", "{a}:99"], ["unknown broker id(s) [99]"]),
    (["--partitions", "5", "--replica-assignment", "{a}:x"], ["'{a}:x'", "1:2:3,2:3:1"]),
]


@pytest.mark.parametrize("extra,words", BAD_ALTERS, ids=[
    "shrink", "same", "zero", "above-limit", "not-int", "too-few-groups", "wrong-rf", "unknown-broker", "malformed"])
def test_bad_alter_is_one_line_exit_2_and_writes_nothing(cluster, extra, words):
    connect, brokers, client = cluster
    ids = {"a": brokers[0].broker_id, "b": brokers[1].broker_id}
    if not client.exists(znodes.topic_dir("four")):
        _create(connect, "four", "--partitions", "4", "--replication-factor", "2")
    before = _snapshot(client)
    r = _run("topics", "alter", "--zookeeper", connect, "--topic", "four", *[e.format(**ids) for e in extra])
    _assert_one_line_error(r, [w.format(**ids) for w in words])
    assert _snapshot(client) == before


def test_unknown_and_unreplicated_topics_are_refused(cluster):
    connect, brokers, client = cluster
    _legacy_topic(client, brokers, "old-style")
    before = _snapshot(client)
    r = _run("topics", "alter", "--zookeeper", connect, "--topic", "nope", "--partitions", "2")
    _assert_one_line_error(r, ["topic 'nope' does not exist"])
    r = _run("topics", "alter", "--zookeeper", connect, "--topic", "old-style", "--partitions", "8")
    _assert_one_line_error(r, ["'old-style' is unreplicated", f"broker {brokers[0].broker_id}: 1",
                               "topic.partition.count.map=old-style:N", "restart the brokers one at a time"])
    r = _run("topics", "alter", "--zookeeper", connect, "--topic", "../x", "--partitions", "2")
    _assert_one_line_error(r, ["invalid topic name '../x'"])
    assert _snapshot(client) == before


def test_topics_being_deleted_or_reassigned_are_refused(zk_connect):
    """No broker here: the marker and the move stay as written, so the refusals are what is tested."""
    client = _kazoo(zk_connect)
    try:
        client.create(znodes.BROKER_IDS + "/0", znodes.broker_value("127.0.0.1", 1), makepath=True, ephemeral=True)
        client.create(znodes.topic_dir("going"), znodes.assignment_value({0: [0]}, "kafka"), makepath=True)
        client.create(znodes.delete_topic_path("going"), b"", makepath=True)
        client.create(znodes.topic_dir("moving"), znodes.assignment_value({0: [0]}, "kafka"), makepath=True)
        client.create(znodes.REASSIGN_PARTITIONS, znodes.reassignment_value({("moving", 0): [0]}), makepath=True)
        before = _snapshot(client)
        r = _run("topics", "alter", "--zookeeper", zk_connect, "--topic", "going", "--partitions", "2")
        _assert_one_line_error(r, ["topic 'going' is marked for deletion", "nothing was written"])
        r = _run("topics", "alter", "--zookeeper", zk_connect, "--topic", "moving", "--partitions", "2")
        _assert_one_line_error(r, ["reassignment is in progress for the topic 'moving'", "reassign --verify"])
        assert _snapshot(client) == before
    finally:
        client.stop()
        client.close()


# --- the procedures of docs/operations.md that go with it ----------------------------------------------

def test_the_documented_delete_command_deletes_a_kafka_topic(cluster):
    """"Deleting topics", steps 3 and 4: kafka-python's KafkaAdminClient as the page writes it, then describe."""
    import subprocess
    import sys

    connect, brokers, client = cluster
    _create(connect, "doomed", "--partitions", "2", "--replication-factor", "2")
    wait_until(lambda: all(r["leader"] is not None for r in _describe(connect, "doomed")), timeout=60,
               what="doomed's leaders")
    page = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    line = next(x.strip() for x in page.splitlines() if "KafkaAdminClient(bootstrap_servers=" in x)
    prefix = ".venv/bin/python -c '"
    assert line.startswith(prefix) and line.endswith("'"), line
    command = line[len(prefix):-1].replace("127.0.0.1:29092", f"127.0.0.1:{brokers[0].kafka_port}")
    command = command.replace('["clicks"]', '["doomed"]')
    out = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'name': 'doomed', 'error_code': 0" in out.stdout, out.stdout
    wait_until(lambda: _run("topics", "describe", "--zookeeper", connect, "--topic", "doomed").returncode == 2,
               timeout=60, what="doomed deleted")
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", "doomed")
    _assert_one_line_error(r, ["topic 'doomed' does not exist in ZooKeeper"])
    assert not any((b.log_dir / f"doomed-{p}").exists() for b in brokers for p in range(2))


def test_an_unreplicated_topic_grows_by_broker_config_and_a_restart(broker_factory, zk_connect):
    """"Adding partitions", unreplicated topics: topic.partition.count.map and a restart, one broker."""
    (broker,) = broker_factory(1, zk_connect)
    client = _kazoo(zk_connect)
    try:
        _legacy_topic(client, [broker], "legacy-grow")
        assert client.get(znodes.topic_path("legacy-grow", broker.broker_id))[0] == b"1"
        broker.overrides["topic.partition.count.map"] = "legacy-grow:3"
        broker.restart()
        wait_until(lambda: client.exists(znodes.topic_path("legacy-grow", broker.broker_id)) and
                   client.get(znodes.topic_path("legacy-grow", broker.broker_id))[0] == b"3",
                   timeout=30, what="3 partitions registered")
        r = _run("topics", "describe", "--zookeeper", zk_connect, "--topic", "legacy-grow", "--json")
        assert json.loads(r.stdout)["partitions_per_broker"] == {str(broker.broker_id): 3}, r.stdout
    finally:
        client.stop()
        client.close()
