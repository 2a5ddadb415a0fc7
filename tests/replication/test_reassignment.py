"""Partition reassignment on real brokers: adding a broker, moving replicas, a controller killed mid-move, cancel.

Real ZooKeeper, real broker processes, ``ingest topics reassign`` run as operators run it:

- a Kafka topic's partition moves from brokers {0,1,2} to {1,2,3} under a confluent-kafka ``acks=all``
  producer with retries: the command waits until the move is complete; the producer keeps being
  acknowledged through the new leader; every acknowledged value is read back (confluent-kafka consumer,
  from the earliest offset); the assignment is {1,2,3} with all three in sync; broker 0's copy (its
  ``kclicks-0`` directory) is gone and the request node is deleted;
- the controller SIGKILLed in the middle of a move (the new replica's broker is down, so the move is
  held at "replicas added, waiting for them to be in sync"): a new controller (a higher controller epoch)
  completes it once the broker is back, and the removed replica's copy is deleted (by a broker that was
  down when the move completed, at its start);
- ``--cancel`` of a move whose new replica cannot catch up (its broker SIGSTOPped) restores the old
  assignment exactly, in its order, with nothing left being added or removed;
- a replicated 0.7 topic moves the same way, and a consumer group that committed its offset under the
  partition's old name (its home broker, the first replica, moved from 0 to 1) goes on from that offset
  under the new name: nothing consumed twice, nothing skipped;
- ``--generate`` over four brokers for a 12-partition topic of replication factor 3 living on three, then
  ``--execute`` and a preferred-leader election: each broker holds 9 replicas and leads 3 partitions, and
  every broker's log directories are exactly the partitions assigned to it; a plan that only reorders a
  partition's replicas changes its preferred replica and deletes nothing.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ingest import znodes
from ingest.broker.assignment import assign
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.replication_topics import create_replicated_topic, metadata_of, produce_acked, wait_for_leaders
from tests.harness.wait import wait_until
from tests.replication.test_controlled_shutdown import TimedProducer
from tests.replication.test_kafka_topics import TOPIC, _bootstrap, _check, _consume_all

log = logging.getLogger(__name__)
pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def _reassign(zk_connect: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "reassign", "--zookeeper", zk_connect,
                           *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _plan_file(tmp_path: Path, plan: dict[tuple[str, int], list[int]], name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": rs} for (t, p), rs in sorted(plan.items())]}))
    return str(path)


def _topic_node(zk, topic: str) -> tuple[dict[int, tuple[int, ...]], dict[int, znodes.ReplicaMove]]:
    data, _ = zk.retry(zk.get, znodes.topic_dir(topic))
    return znodes.parse_assignment(data), znodes.parse_moves(data)


def _create(zk, topic: str, assignment: dict[int, list[int]]) -> None:
    zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value(assignment, znodes.KAFKA_FORMAT),
             makepath=True)


def _cluster(broker_factory, zk_connect, zk, overrides: dict):
    """Brokers 0, 1, 2 (one of them the controller), then broker 3, which therefore is not the controller."""
    brokers = broker_factory(3, zk_connect, overrides=overrides)
    wait_until(lambda: r.controller(zk) in {0, 1, 2}, timeout=60, what="a controller among brokers 0-2")
    new = broker_factory(1, zk_connect, overrides=overrides)[0]
    assert new.broker_id == 3
    return brokers, new


def _throttle(zk, topic: str, brokers) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """The topic's throttled-replicas lists and each broker's throttle rates, as ZooKeeper holds them."""
    def configs(path: str) -> dict[str, str]:
        node = zk.retry(zk.exists, path)
        return znodes.parse_topic_config(zk.retry(zk.get, path)[0]) if node is not None else {}
    lists = {k: v for k, v in configs(znodes.topic_config_path(topic)).items() if ".throttled." in k}
    return lists, {b: c for b in brokers if (c := configs(znodes.broker_config_path(b)))}


def _no_copy(broker, topic: str, partition: int) -> bool:
    return not (broker.log_dir / f"{topic}-{partition}").exists()


def test_a_move_under_acks_all_load_loses_nothing_and_deletes_the_old_copy(broker_factory, zk_connect, zk,
                                                                           tmp_path):
    brokers, new = _cluster(broker_factory, zk_connect, zk, r.replication_overrides(min_isr=2))
    _create(zk, TOPIC, {0: [0, 1, 2]})
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 0 and set(s.isr) == {0, 1, 2}, 60, "all in sync")
    everyone = [*brokers, new]
    producer = TimedProducer(_bootstrap(everyone))
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) > 200, timeout=60, what="first acknowledgements")
        began = time.monotonic()
        done = _reassign(zk_connect, "--execute", "--plan", _plan_file(tmp_path, {(TOPIC, 0): [1, 2, 3]}),
                         "--throttle", "50000000", "--wait", "120")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"Reassignment of partition {TOPIC}-0 is complete." in done.stdout
        assert "throttle limit was set to 50000000 B/s" in done.stdout and "Throttle was removed." in done.stdout
        assert _throttle(zk, TOPIC, range(4)) == ({}, {}), "the throttle goes with the completed move"
        assert '"replicas":[0,1,2]' in done.stdout, "the old assignment, printed for a rollback"
        took = time.monotonic() - began
        after = len(producer.acked)
        wait_until(lambda: len(producer.acked) > after + 100, timeout=60, what="acknowledgements after the move")
    finally:
        producer.stop()
    assert _topic_node(zk, TOPIC) == ({0: (1, 2, 3)}, {})
    assert zk.retry(zk.exists, znodes.REASSIGN_PARTITIONS) is None
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: set(s.isr) == {1, 2, 3}, 60, "{1,2,3} in sync")
    assert state.leader in {1, 2, 3}
    wait_until(lambda: _no_copy(brokers[0], TOPIC, 0), timeout=60, what="broker 0's copy deleted")
    assert not _no_copy(new, TOPIC, 0)
    rows = _check(_bootstrap(everyone), producer)
    log.info("reassignment {0,1,2} -> {1,2,3} under acks=all: %d acknowledged, %d records, command done in %.1f s, "
             "longest time without an acknowledgement %.1f s", len(producer.acked), len(rows), took,
             producer.longest_stall_s)


def test_a_controller_killed_mid_move_leaves_it_to_the_next_which_completes_it(broker_factory, zk_connect, zk):
    brokers, new = _cluster(broker_factory, zk_connect, zk, r.replication_overrides(min_isr=1))
    _create(zk, TOPIC, {0: [0, 1, 2]})
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 0 and set(s.isr) == {0, 1, 2}, 60, "all in sync")
    p = Producer({"bootstrap.servers": _bootstrap(brokers), "acks": "all"})
    values = [f"m-{i}".encode() for i in range(50)]
    acked: list[bytes] = []
    for v in values:
        p.produce(TOPIC, value=v, partition=0, on_delivery=lambda err, m: err is None and acked.append(m.value()))
    assert p.flush(60) == 0 and acked == values
    assert new.stop() == 0   # broker 3 is down: the move will wait for it
    zk.retry(zk.create, znodes.REASSIGN_PARTITIONS, znodes.reassignment_value({(TOPIC, 0): (1, 2, 3)}))
    wait_until(lambda: _topic_node(zk, TOPIC) == ({0: (0, 1, 2, 3)}, {0: znodes.ReplicaMove((3,), (0,))}),
               timeout=60, what="the move started: broker 3 added, broker 0 being removed")
    epoch = r.controller_epoch(zk)
    victim = r.by_id(brokers, r.controller(zk))
    victim.kill()
    new.start(timeout=60)
    victim.start(timeout=60)
    wait_until(lambda: zk.retry(zk.exists, znodes.REASSIGN_PARTITIONS) is None, timeout=120,
               what="the request node deleted: the move completed")
    assert _topic_node(zk, TOPIC) == ({0: (1, 2, 3)}, {})
    assert r.controller_epoch(zk) > epoch
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: set(s.isr) == {1, 2, 3}, 60, "{1,2,3} in sync")
    assert state.controller_epoch > epoch, f"written by a later controller: {state}"
    wait_until(lambda: _no_copy(brokers[0], TOPIC, 0), timeout=60, what="broker 0's copy deleted")
    rows = _consume_all(_bootstrap([b for b in brokers if b.broker_id != 0] + [new]), len(values))
    assert [v for _, v in rows] == values


def test_cancel_restores_the_old_assignment(broker_factory, zk_connect, zk, tmp_path):
    brokers, new = _cluster(broker_factory, zk_connect, zk, r.replication_overrides(min_isr=1, session_ms=60_000))
    _create(zk, TOPIC, {0: [2, 0, 1]})
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 2 and set(s.isr) == {0, 1, 2}, 60, "all in sync")
    plan = _plan_file(tmp_path, {(TOPIC, 0): [3, 0, 1]})
    r.sigstop(new)   # registered (a 60 s session) but never fetching: the move cannot complete
    try:
        started = _reassign(zk_connect, "--execute", "--plan", plan, "--throttle", "1000000")
        assert started.returncode == 0, started.stdout + started.stderr
        wait_until(lambda: _topic_node(zk, TOPIC)[1] == {0: znodes.ReplicaMove((3,), (2,))}, timeout=60,
                   what="the move started")
        rate = {"leader.replication.throttled.rate": "1000000", "follower.replication.throttled.rate": "1000000"}
        assert _throttle(zk, TOPIC, range(4)) == (
            {"leader.replication.throttled.replicas": "0:2,0:0,0:1", "follower.replication.throttled.replicas": "0:3"},
            {0: rate, 1: rate, 2: rate, 3: rate}), "the old replicas throttled as leaders, the new one as follower"
        verify = _reassign(zk_connect, "--verify", "--plan", plan)
        assert verify.returncode == 1 and f"{TOPIC}-0 is still in progress" in verify.stdout, verify.stdout
        described = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "describe", "--zookeeper",
                                    zk_connect, "--topic", TOPIC], capture_output=True, text=True, timeout=60,
                                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert f"{TOPIC}-0: being reassigned: adding [3], removing [2]" in described.stdout, described.stdout
        cancelled = _reassign(zk_connect, "--cancel", "--plan", plan, "--wait", "60")
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert f"{TOPIC}-0 back to [2, 0, 1]" in cancelled.stdout
        assert _throttle(zk, TOPIC, range(4)) == ({}, {}), "a cancel removes the throttle"
        assert _topic_node(zk, TOPIC) == ({0: (2, 0, 1)}, {})
        assert zk.retry(zk.exists, znodes.REASSIGN_PARTITIONS) is None
        state = r.partition_state(zk, TOPIC, 0)
        assert state.leader == 2 and set(state.isr) == {0, 1, 2}, state
        verify = _reassign(zk_connect, "--verify", "--plan", plan)
        assert verify.returncode == 1 and "failed: its replicas are [2, 0, 1], not [3, 0, 1]" in verify.stdout
    finally:
        r.sigcont(new)
    assert _reassign(zk_connect, "--cancel", "--plan", plan).returncode != 0, "nothing left to cancel"


def _group_read(zk_connect: str, topic: str, count: int) -> list[bytes]:
    """``count`` messages read by a member of group ``g`` (0.7 consumer group), offsets committed."""
    from ingest.client.consumer_group import ConsumerConnector

    c = ConsumerConnector({"zk.connect": zk_connect, "groupid": "g", "consumer.id": "c", "autooffset.reset": "smallest",
                           "zk.sessiontimeout.ms": 3000, "autocommit.interval.ms": 100, "rebalance.backoff.ms": 100,
                           "backoff.increment.ms": 20, "socket.timeout.ms": 5000, "consumer.timeout.ms": 5000})
    try:
        got = []
        for m in c.create_streams({topic: 1})[topic][0]:
            got.append(m.payload)
            if len(got) == count:
                break
        c.commit_offsets()
        return got
    finally:
        c.shutdown()


def test_a_07_topic_moves_and_its_consumer_group_goes_on_from_its_committed_offset(broker_factory, zk_connect, zk,
                                                                                   tmp_path):
    brokers, new = _cluster(broker_factory, zk_connect, zk, r.replication_overrides(min_isr=1))
    everyone = [*brokers, new]
    create_replicated_topic(zk, "r07", {0: [0, 1, 2]})
    md = metadata_of(everyone)
    wait_for_leaders(md, "r07", 1, isr=3)
    first, second = [b"a-%04d" % i for i in range(100)], [b"b-%04d" % i for i in range(100)]
    for i in range(0, 100, 25):
        produce_acked(md, "r07", 0, first[i:i + 25])
    assert _group_read(zk_connect, "r07", 100) == first
    done = _reassign(zk_connect, "--execute", "--plan", _plan_file(tmp_path, {("r07", 0): [1, 2, 3]}), "--wait", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _topic_node(zk, "r07") == ({0: (1, 2, 3)}, {})
    for i in range(0, 100, 25):
        produce_acked(md, "r07", 0, second[i:i + 25])
    assert _group_read(zk_connect, "r07", 100) == second   # named 1-0 now, from 0-0's committed offset
    wait_until(lambda: _no_copy(brokers[0], "r07", 0), timeout=60, what="broker 0's copy deleted")


def test_generate_and_execute_spread_a_12_partition_topic_evenly_over_an_added_broker(broker_factory, zk_connect,
                                                                                      zk, tmp_path):
    brokers, new = _cluster(broker_factory, zk_connect, zk, r.replication_overrides(min_isr=1))
    everyone = [*brokers, new]
    _create(zk, "wide", assign([0, 1, 2], 12, 3))
    for p in range(12):
        r.wait_for_state(zk, "wide", p, lambda s: len(s.isr) == 3, 60, f"wide-{p} all in sync")
    move = tmp_path / "move.json"
    move.write_text('{"version":1,"topics":[{"topic":"wide"}]}')
    generated = _reassign(zk_connect, "--generate", "--topics-to-move-json-file", str(move), "--broker-list",
                          "0,1,2,3")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and "Proposed partition reassignment configuration" in lines
    plan = tmp_path / "plan.json"
    plan.write_text(lines[-1])
    done = _reassign(zk_connect, "--execute", "--plan", str(plan), "--wait", "180")
    assert done.returncode == 0, done.stdout + done.stderr
    elected = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "preferred-leader", "--zookeeper",
                              zk_connect, "--topic", "wide", "--wait", "60"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert elected.returncode == 0, elected.stdout + elected.stderr
    assignment, moves = _topic_node(zk, "wide")
    assert moves == {}
    replicas = {b: sum(b in rs for rs in assignment.values()) for b in range(4)}
    leaders = {b: sum(r.partition_state(zk, "wide", p).leader == b for p in range(12)) for b in range(4)}
    assert replicas == {0: 9, 1: 9, 2: 9, 3: 9} and leaders == {0: 3, 1: 3, 2: 3, 3: 3}, (replicas, leaders)

    def dirs_match() -> bool:
        return all({d.name for d in b.log_dir.glob("wide-*")} ==
                   {f"wide-{p}" for p, rs in assignment.items() if b.broker_id in rs} for b in everyone)
    wait_until(dirs_match, timeout=60, what="every broker holding exactly its assigned replicas")
    # a plan that only reorders a partition's replicas changes its preferred replica and moves no data
    reordered = tuple(reversed(assignment[0]))
    done = _reassign(zk_connect, "--execute", "--plan", _plan_file(tmp_path, {("wide", 0): list(reordered)}, "re.json"),
                     "--wait", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _topic_node(zk, "wide") == ({**assignment, 0: reordered}, {})
    assert dirs_match()
