"""``ingest topics create|describe|preferred-leader``: real ZooKeeper, real brokers, the real command line.

Bad input runs ``python -m ingest.cli`` in a subprocess (stderr exactly as an operator
sees it: one line, exit 2) and checks that ZooKeeper is unchanged afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ingest import znodes
from ingest.broker import assignment
from ingest.client.discovery import BrokerAddress
from ingest.client.topics_admin import (check_counts, describe_assignment, election_partitions, plan_assignment)
from ingest.client.topics_describe import format_records, high_watermarks
from ingest.errors import ReplicationConfigError, UnknownTopicError
from tests.harness.brokers import broker_cluster, broker_factory, broker_list, stop_all  # noqa: F401 (fixture)
from tests.harness.net import free_port
from tests.harness.wait import wait_until

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _kazoo(connect: str):
    from kazoo.client import KazooClient

    c = KazooClient(hosts=connect)
    c.start(timeout=15)
    return c


# --- pure functions ------------------------------------------------------------------------

def test_plan_follows_kafkas_rule_over_the_live_brokers():
    assert plan_assignment([5, 3, 4], partitions=4, replication_factor=2, manual=None) == {
        0: [3, 4], 1: [4, 5], 2: [5, 3], 3: [3, 4]}
    assert plan_assignment([1, 2, 3], partitions=None, replication_factor=None, manual="1:2,3:1") == {
        0: [1, 2], 1: [3, 1]}
    assert describe_assignment({0: [1, 2], 1: [2, 1]}) == "0:[1,2] 1:[2,1]"


@pytest.mark.parametrize("live,kw,words", [
    ([], dict(partitions=1, replication_factor=1, manual=None), ["no broker is registered"]),
    ([0, 1], dict(partitions=1, replication_factor=3, manual=None), ["replication factor 3", "2 live", "1..2"]),
    ([0, 1], dict(partitions=1, replication_factor=0, manual=None), ["replication factor 0", "at least 1"]),
    ([0, 1], dict(partitions=None, replication_factor=None, manual="0:7"), ["unknown broker id(s) [7]", "[0, 1]"]),
    ([0, 1], dict(partitions=None, replication_factor=None, manual="0:x"), ["'0:x'", "1:2:3,2:3:1"]),
], ids=["no-brokers", "rf-too-big", "rf-0", "unknown-broker", "malformed"])
def test_bad_plans_name_the_value_and_what_is_allowed(live, kw, words):
    with pytest.raises(ReplicationConfigError) as e:
        plan_assignment(live, **kw)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_counts_are_checked_without_a_cluster():
    check_counts(10_000, 1)
    for p, rf, word in [(0, 1, "partitions 0"), (10_001, 1, "partitions 10001"), (1, 0, "replication factor 0"),
                        (1, -2, "replication factor -2")]:
        with pytest.raises(ReplicationConfigError, match=word):
            check_counts(p, rf)


def test_election_partitions():
    rep = {"a": {0: (1, 2), 1: (2, 1)}, "b": {0: (2,)}}
    assert election_partitions(rep, ["old"], None, None) == [("a", 0), ("a", 1), ("b", 0)]
    assert election_partitions(rep, ["old"], "a", None) == [("a", 0), ("a", 1)]
    assert election_partitions(rep, ["old"], "a", 1) == [("a", 1)]
    with pytest.raises(ReplicationConfigError, match="needs --topic"):
        election_partitions(rep, [], None, 0)
    with pytest.raises(ReplicationConfigError, match=r"partition 2 of topic 'a' does not exist.*0\.\.1"):
        election_partitions(rep, [], "a", 2)
    with pytest.raises(ReplicationConfigError, match="'old' is unreplicated"):
        election_partitions(rep, ["old"], "old", None)
    with pytest.raises(UnknownTopicError, match="'zz' does not exist; replicated topics: a, b"):
        election_partitions(rep, [], "zz", None)
    with pytest.raises(ReplicationConfigError, match="no replicated topic"):
        election_partitions({}, ["old"], None, None)


def test_an_unreachable_leader_has_no_high_watermark_and_shows_a_dash():
    dead = BrokerAddress(7, "127.0.0.1", free_port())  # nothing listens there
    assert high_watermarks([("t", 0, 7), ("t", 1, 8)], {7: dead}, timeout_s=2) == {("t", 0): None, ("t", 1): None}
    import io

    out = io.StringIO()
    format_records([{"topic": "t", "replicated": True, "partition": 0, "leader": 7, "replicas": [7, 8],
                     "isr": [7], "leader_epoch": 2, "high_watermark": None, "preferred_replica": 7,
                     "leader_is_preferred": True},
                    {"topic": "u", "replicated": False, "partitions_per_broker": {"0": 4, "1": 1}}], (7, 3), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "controller: broker 7 (controller epoch 3)"
    assert lines[2].split() == ["t", "0", "7", "7,8", "7", "2", "-", "yes", "0.7"]
    assert lines[3] == "u  unreplicated, per broker: 0 (4 partitions), 1 (1 partition)"


# --- against real ZooKeeper and brokers ---------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """Three real brokers registered in ZooKeeper under a chroot of this module."""
    chroot = f"/t-{uuid.uuid4().hex[:10]}"
    connect = zookeeper.connect + chroot
    c = _kazoo(zookeeper.connect)
    c.ensure_path(chroot)
    c.stop()
    c.close()
    brokers = broker_cluster(tmp_path_factory, 3, connect)
    client = _kazoo(connect)
    try:
        wait_until(lambda: len(client.get_children(znodes.BROKER_IDS)) == 3, what="3 brokers registered")
        yield connect, brokers, client
    finally:
        client.stop()
        client.close()
        stop_all(brokers)


def _snapshot(client) -> dict:
    """What a command may write: each topic node's data and kind of children, and everything under /admin."""
    out = {}
    for t in client.get_children(znodes.BROKER_TOPICS) if client.exists(znodes.BROKER_TOPICS) else []:
        data, _ = client.get(znodes.topic_dir(t))
        out[t] = data
    admin = client.exists(znodes.ADMIN)
    out["/admin"] = sorted(client.get_children(znodes.ADMIN)) if admin else None
    if client.exists(znodes.PREFERRED_REPLICA_ELECTION):
        out["/election"] = client.get(znodes.PREFERRED_REPLICA_ELECTION)[0]
    return out


def _assert_one_line_error(r: subprocess.CompletedProcess, words: list[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)
    assert lines[0].startswith("ingest topics: error: "), lines[0]
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def test_create_writes_kafkas_assignment(cluster):
    connect, brokers, client = cluster
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "clicks", "--partitions", "4",
             "--replication-factor", "3")
    assert r.returncode == 0, r.stderr
    expected = assignment.assign([b.broker_id for b in brokers], 4, 3)
    assert znodes.parse_assignment(client.get(znodes.topic_dir("clicks"))[0]) == {
        p: tuple(r_) for p, r_ in expected.items()}
    assert "created topic 'clicks': 4 partition(s), replication factor 3, format kafka" in r.stdout
    assert r.stderr == ""
    # new topics are Kafka topics unless asked: the kind is recorded with the assignment
    assert znodes.parse_topic_format(client.get(znodes.topic_dir("clicks"))[0]) == "kafka"
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "clicks07", "--partitions", "1", "--format", "0.7")
    assert r.returncode == 0, r.stderr
    assert znodes.parse_topic_format(client.get(znodes.topic_dir("clicks07"))[0]) is None
    rows = [json.loads(x) for x in _run("topics", "describe", "--zookeeper", connect, "--json").stdout.splitlines()]
    assert {x["topic"]: x["format"] for x in rows if x["topic"] in ("clicks", "clicks07")} == {
        "clicks": "kafka", "clicks07": "0.7"}


def test_create_with_a_manual_assignment_and_the_default_factor(cluster, tmp_path):
    connect, brokers, client = cluster
    ids = [b.broker_id for b in brokers]
    manual = f"{ids[2]}:{ids[0]},{ids[1]}:{ids[2]}"
    r = _run("topics", "create", "--zk", connect, "--topic", "manual", "--replica-assignment", manual)
    assert r.returncode == 0, r.stderr
    assert znodes.parse_assignment(client.get(znodes.topic_dir("manual"))[0]) == {
        0: (ids[2], ids[0]), 1: (ids[1], ids[2])}
    # no --replication-factor: 1 without --config ...
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "single", "--partitions", "2")
    assert r.returncode == 0, r.stderr
    assert all(len(x) == 1 for x in znodes.parse_assignment(client.get(znodes.topic_dir("single"))[0]).values())
    # ... else default.replication.factor of the broker config, whose zk.connect is used too
    props = tmp_path / "server.properties"
    props.write_text(f"brokerid=0\nenable.zookeeper=true\nzk.connect={connect}\ndefault.replication.factor=2\n")
    r = _run("topics", "create", "--config", str(props), "--topic", "from-config", "--partitions", "3")
    assert r.returncode == 0, r.stderr
    plan = znodes.parse_assignment(client.get(znodes.topic_dir("from-config"))[0])
    assert len(plan) == 3 and all(len(x) == 2 for x in plan.values())


def _legacy_topic(client, brokers, name: str) -> None:
    from ingest.client.producer import Producer

    with Producer({"broker.list": broker_list(brokers[:1]), "producer.type": "sync"}) as p:
        p.send(name, [b"one"])
    wait_until(lambda: client.exists(znodes.topic_path(name, brokers[0].broker_id)), what="legacy registration")


BAD_CREATES = [
    (["--partitions", "2", "--replication-factor", "0"], ["replication factor 0", "at least 1"]),
    (["--partitions", "2", "--replication-factor", "4"], ["replication factor 4", "3 live broker(s)", "1..3"]),
    (["--partitions", "0", "--replication-factor", "1"], ["partitions 0", "1..10000"]),
    (["--partitions", "-3"], ["partitions -3", "1..10000"]),
    (["--partitions", "two"], ["--partitions 'two' is not an integer", "1..10000"]),
    (["--partitions", "2", "--replication-factor", "2.5"], ["--replication-factor '2.5'", "integer"]),
    (["--replica-assignment", "{a}:{b},{b}:99"], ["unknown broker id(s) [99]", "registered brokers are"]),
    (["--replica-assignment", "{a}:{a}"], ["lists a broker twice"]),
    (["--replica-assignment", "{a}:{b},{a}"], ["same number"]),
    (["--replica-assignment", "{a}:{b}", "--partitions", "1"], ["without --partitions"]),
    ([], ["--partitions P", "--replica-assignment"]),
]


@pytest.mark.parametrize("extra,words", BAD_CREATES, ids=[
    "rf-0", "rf-above-live", "partitions-0", "partitions-negative", "partitions-not-int", "rf-not-int",
    "unknown-broker", "broker-twice", "uneven", "manual-and-partitions", "no-partitions"])
def test_bad_create_is_one_line_exit_2_and_writes_nothing(cluster, extra, words):
    connect, brokers, client = cluster
    ids = {"a": brokers[0].broker_id, "b": brokers[1].broker_id}
    topic = f"bad-{uuid.uuid4().hex[:6]}"
    before = _snapshot(client)
    r = _run("topics", "create", "--zookeeper", connect, "--topic", topic, *[e.format(**ids) for e in extra])
    _assert_one_line_error(r, words)
    assert _snapshot(client) == before
    assert not client.exists(znodes.topic_dir(topic))


def test_an_existing_topic_is_refused_whatever_its_kind(cluster):
    connect, brokers, client = cluster
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "twice", "--partitions", "1")
    assert r.returncode == 0, r.stderr
    _legacy_topic(client, brokers, "old-style")
    before = _snapshot(client)
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "twice", "--partitions", "3",
             "--replication-factor", "2")
    _assert_one_line_error(r, ["topic 'twice' already exists", "replicated, 1 partition(s)", "nothing was changed"])
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "old-style", "--partitions", "1")
    _assert_one_line_error(r, ["'old-style' already exists as an unreplicated", f"[{brokers[0].broker_id}]"])
    r = _run("topics", "create", "--zookeeper", connect, "--topic", "no/slash", "--partitions", "1")
    _assert_one_line_error(r, ["invalid topic name 'no/slash'", "allowed is"])
    assert _snapshot(client) == before


def test_static_mode_keeps_replication_factor_1(cluster, tmp_path):
    connect, brokers, client = cluster
    before = _snapshot(client)
    r = _run("topics", "create", "--brokers", broker_list(brokers), "--topic", "s", "--partitions", "1",
             "--replication-factor", "2")
    _assert_one_line_error(r, ["replication factor 2 needs ZooKeeper", "static broker-list mode keeps "
                                                                       "replication factor 1"])
    r = _run("topics", "create", "--topic", "s", "--partitions", "1", "--replication-factor", "3")
    _assert_one_line_error(r, ["replication factor 3 needs ZooKeeper"])
    props = tmp_path / "static.properties"
    props.write_text(f"brokerid=0\nenable.zookeeper=false\nzk.connect={connect}\n")
    r = _run("topics", "create", "--config", str(props), "--topic", "s", "--partitions", "1")
    _assert_one_line_error(r, ["give --zookeeper", "replication factor 1", "first message"])
    r = _run("topics", "describe", "--config", str(props))
    _assert_one_line_error(r, ["give --zookeeper", "enable.zookeeper=false"])
    assert _snapshot(client) == before


@pytest.mark.processes
def test_zookeeper_down_is_one_line():
    r = _run("topics", "create", "--zookeeper", "127.0.0.1:1", "--topic", "t", "--partitions", "1")
    _assert_one_line_error(r, ["ZooKeeper", "127.0.0.1:1"])


def test_listing_still_works_bare_and_as_list(cluster):
    connect, brokers, client = cluster
    _legacy_topic(client, brokers, "listed")
    for args in (["topics"], ["topics", "list"]):
        r = _run(*args, "--brokers", broker_list(brokers), "--topic", "listed", "--json")
        assert r.returncode == 0, r.stderr
        rows = [json.loads(x) for x in r.stdout.splitlines()]
        assert {(x["topic"], x["broker_id"]) for x in rows} == {("listed", brokers[0].broker_id)}
    r = _run("topics", "--zk", connect, "--topic", "listed")
    assert r.returncode == 0 and "listed" in r.stdout, r.stderr


def test_describe_lists_unreplicated_topics_and_refuses_unknown_ones(cluster):
    connect, brokers, client = cluster
    _legacy_topic(client, brokers, "legacy-d")
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", "legacy-d")
    assert r.returncode == 0, r.stderr
    assert f"legacy-d  unreplicated, per broker: {brokers[0].broker_id} (1 partition)" in r.stdout
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", "legacy-d", "--json")
    assert [json.loads(x) for x in r.stdout.splitlines()] == [
        {"topic": "legacy-d", "replicated": False, "format": "0.7",
         "partitions_per_broker": {str(brokers[0].broker_id): 1}}]
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", "nope")
    _assert_one_line_error(r, ["topic 'nope' does not exist in ZooKeeper", "legacy-d"])
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", "../x")
    _assert_one_line_error(r, ["invalid topic name '../x'"])


# --- preferred-leader: the request node ----------------------------------------------------------

def test_preferred_leader_request_and_refusals(zk_connect):
    """No broker here: the request stays pending, so a second one is refused and nothing changes."""
    client = _kazoo(zk_connect)
    try:
        client.create(znodes.topic_dir("rep"), znodes.assignment_value({0: [1, 2], 1: [2, 1]}), makepath=True)
        client.create(znodes.topic_path("old", 1), b"2", makepath=True)
        before = _snapshot(client)
        for extra, words in [
            (["--partition", "0"], ["--partition 0 needs --topic"]),
            (["--topic", "rep", "--partition", "2"], ["partition 2 of topic 'rep' does not exist", "0..1"]),
            (["--topic", "rep", "--partition", "x"], ["--partition 'x' is not an integer"]),
            (["--topic", "old"], ["'old' is unreplicated"]),
            (["--topic", "nope"], ["topic 'nope' does not exist", "replicated topics: rep"]),
            (["--wait", "-1"], ["--wait '-1'", "0 to 86400"]),
        ]:
            _assert_one_line_error(_run("topics", "preferred-leader", "--zookeeper", zk_connect, *extra), words)
            assert _snapshot(client) == before
        r = _run("topics", "preferred-leader", "--zookeeper", zk_connect, "--topic", "rep", "--partition", "1",
                 "--wait", "0.5")
        assert r.returncode == 1, r.stderr  # waited, and no controller took the request
        assert r.stdout.splitlines() == [
            "preferred replica election requested for 1 partition(s)",
            "note: no controller is running now; the election happens when a broker becomes controller",
            "rep/1: leader -: no leader elected yet (preferred 2)",
            "0 of 1 partition(s) led by their preferred replica; the request is still pending after 0.5 s"]
        assert znodes.parse_preferred_election(client.get(znodes.PREFERRED_REPLICA_ELECTION)[0]) == [("rep", 1)]
        pending = _snapshot(client)
        r = _run("topics", "preferred-leader", "--zookeeper", zk_connect)
        _assert_one_line_error(r, ["already pending", "naming 1 partition(s): rep/1", "nothing was written"])
        assert _snapshot(client) == pending
    finally:
        client.stop()
        client.close()


# --- end to end with the controller: describe, failover, preferred-leader ---------------------------

def _states(client, topic: str, n: int) -> list[znodes.PartitionState | None]:
    out = []
    for p in range(n):
        try:
            data, stat = client.get(znodes.partition_state_path(topic, p))
            out.append(znodes.PartitionState.parse(data, stat.version))
        except Exception:  # not written yet
            out.append(None)
    return out


def _describe_json(connect: str, topic: str) -> list[dict]:
    r = _run("topics", "describe", "--zookeeper", connect, "--topic", topic, "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


@pytest.mark.slow
def test_describe_and_preferred_leader_across_a_failover(broker_factory, zk_connect):
    from ingest.wire import protocol
    from ingest.records.message_set import encode_message_set
    from tests.harness.brokers import RawClient

    brokers = broker_factory(3, zk_connect)
    by_id = {b.broker_id: b for b in brokers}
    client = _kazoo(zk_connect)
    try:
        wait_until(lambda: len(client.get_children(znodes.BROKER_IDS)) == 3, what="3 brokers registered")
        r = _run("topics", "create", "--zookeeper", zk_connect, "--topic", "rep", "--partitions", "2",
                 "--replication-factor", "3", "--format", "0.7")
        assert r.returncode == 0, r.stderr
        plan = znodes.parse_assignment(client.get(znodes.topic_dir("rep"))[0])
        wait_until(lambda: all(s is not None and s.leader == plan[p][0] and len(s.isr) == 3
                               for p, s in enumerate(_states(client, "rep", 2))),
                   timeout=60, what="leaders elected on the preferred replicas, all in sync")

        # an acks=-1 write on partition 0's leader: the high watermark describe shows is its end
        message_set = encode_message_set([b"first", b"second"])
        leader0 = by_id[plan[0][0]]
        with RawClient(leader0.host, leader0.port) as raw:
            ack = protocol.ProduceAckResponse.decode(raw.request(protocol.ProduceAcksRequest(
                -1, 10_000, protocol.ProduceRequest("rep", 0, message_set))))
        assert ack.error == 0, ack
        rows = wait_until(lambda: (lambda rs: rs if rs[0]["high_watermark"] == len(message_set) else None)(
            _describe_json(zk_connect, "rep")), timeout=30, what="high watermark of partition 0")
        assert [(x["partition"], x["leader"], x["replicas"], sorted(x["isr"]), x["leader_is_preferred"])
                for x in rows] == [(p, plan[p][0], list(plan[p]), sorted(plan[p]), True) for p in range(2)]
        assert rows[1]["high_watermark"] == 0
        text = _run("topics", "describe", "--zookeeper", zk_connect).stdout.splitlines()
        assert text[0].startswith("controller: broker ")
        assert text[2].split()[:3] == ["rep", "0", str(plan[0][0])] and text[2].split()[-2:] == ["yes", "0.7"]

        # partition 1's preferred leader dies: another replica leads, describe says it is not the preferred one
        moved = by_id[plan[1][0]]
        moved.kill()
        after = wait_until(lambda: (lambda s: s if s and s.leader not in (-1, moved.broker_id) else None)(
            _states(client, "rep", 2)[1]), timeout=60, what="a new leader of partition 1")
        row = _describe_json(zk_connect, "rep")[1]
        assert row["leader"] == after.leader and row["leader_is_preferred"] is False
        assert row["leader_epoch"] == after.leader_epoch and row["high_watermark"] == 0

        # it comes back and catches up; the election moves leadership back to it
        moved.restart()
        wait_until(lambda: moved.broker_id in (_states(client, "rep", 2)[1] or after).isr, timeout=60,
                   what="the restarted broker back in partition 1's in-sync set")
        r = _run("topics", "preferred-leader", "--zookeeper", zk_connect, "--topic", "rep", "--partition", "1",
                 "--wait", "60")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert f"rep/1: leader {moved.broker_id}: led by its preferred replica" in r.stdout
        assert "1 of 1 partition(s) led by their preferred replica" in r.stdout
        assert not client.exists(znodes.PREFERRED_REPLICA_ELECTION)
        assert _states(client, "rep", 2)[1].leader == moved.broker_id
        # every partition (no --topic): nothing left to move, still a clean answer
        r = _run("topics", "preferred-leader", "--zookeeper", zk_connect, "--wait", "60")
        assert r.returncode == 0 and "2 of 2 partition(s)" in r.stdout, (r.stdout, r.stderr)
    finally:
        client.stop()
        client.close()
