"""Partition reassignment without a cluster: the plan ``--generate`` proposes, the plan files, the znodes.

- a 12-partition topic of replication factor 3 spread over 4 brokers: each broker holds 9 replicas and is
  the first (preferred) replica of 3 partitions; over many shapes (brokers, replication factor, partitions,
  several topics) every broker's counts are within one of another's;
- the assignment during a move lists the original replicas first, then the ones being added, so the
  original replicas (a cancel's target) come back exactly, in their order;
- plan files and the request node use Kafka's JSON; bad ones are refused naming the partition.
"""
from __future__ import annotations

import pytest

from ingest import znodes
from ingest.broker.assignment import assign
from ingest.broker.reassignment import invalid_target, moving, original_replicas
from ingest.client import topics_reassign as tr
from ingest.errors import ReplicationConfigError
from ingest.znodes import ReplicaMove


def _spread(plan) -> tuple[dict[int, int], dict[int, int]]:
    return tr.balance(plan)


def test_twelve_partitions_rf3_over_four_brokers_give_each_nine_replicas_and_three_leaders():
    current = {"clicks": {p: tuple(r) for p, r in assign([0, 1, 2], 12, 3).items()}}
    plan = tr.propose(current, [0, 1, 2, 3])
    replicas, leaders = _spread(plan)
    assert replicas == {0: 9, 1: 9, 2: 9, 3: 9}
    assert leaders == {0: 3, 1: 3, 2: 3, 3: 3}
    assert all(len(set(r)) == 3 for r in plan.values())
    assert sorted(plan) == [("clicks", p) for p in range(12)]
    assert tr.propose(current, [3, 2, 1, 0]) == plan, "deterministic, whatever the broker list's order"


@pytest.mark.parametrize("brokers", range(1, 9))
def test_replicas_and_leaders_are_within_one_per_broker_for_every_shape(brokers):
    for rf in range(1, brokers + 1):
        for partitions in range(1, 40):
            current = {"a": {p: tuple(range(rf)) for p in range(partitions)},
                       "b": {p: tuple(range(rf)) for p in range(partitions % 5 + 1)}}
            plan = tr.propose(current, range(brokers))
            replicas, leaders = _spread(plan)
            counts = [replicas.get(b, 0) for b in range(brokers)]
            firsts = [leaders.get(b, 0) for b in range(brokers)]
            assert max(counts) - min(counts) <= 1, (brokers, rf, partitions, replicas)
            assert max(firsts) - min(firsts) <= 1, (brokers, rf, partitions, leaders)
            assert all(len(set(r)) == rf for r in plan.values())


def test_a_partition_with_more_replicas_than_brokers_is_refused():
    with pytest.raises(ReplicationConfigError, match=r"clicks-0 has 3 replicas; the broker list \[0, 1\]"):
        tr.propose({"clicks": {0: (0, 1, 2)}}, [0, 1])


def test_the_moving_assignment_keeps_the_original_replicas_first_and_in_order():
    union, move = moving((0, 1, 2), (1, 2, 3))
    assert union == (0, 1, 2, 3) and move == ReplicaMove((3,), (0,))
    assert original_replicas(union, move) == (0, 1, 2)
    union, move = moving((2, 0, 1), (3, 4, 0))
    assert union == (2, 0, 1, 3, 4) and move == ReplicaMove((3, 4), (2, 1))
    assert original_replicas(union, move) == (2, 0, 1)
    assert moving((0, 1, 2), (0, 1, 2)) == ((0, 1, 2), ReplicaMove((), ()))


def test_the_topic_node_carries_kafkas_adding_and_removing_replicas():
    moves = {0: ReplicaMove((3,), (0,))}
    data = znodes.assignment_value({0: [0, 1, 2, 3], 1: [1, 2, 0]}, znodes.KAFKA_FORMAT, moves)
    assert b'"adding_replicas":{"0":[3]}' in data and b'"removing_replicas":{"0":[0]}' in data
    assert znodes.parse_assignment(data) == {0: (0, 1, 2, 3), 1: (1, 2, 0)}
    assert znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT
    assert znodes.parse_moves(data) == moves
    assert znodes.parse_moves(znodes.assignment_value({0: [0]})) == {}
    assert b"adding_replicas" not in znodes.assignment_value({0: [0]}, None, {})


def test_plan_files_round_trip_in_kafkas_json_and_bad_ones_name_what_is_wrong():
    plan = {("clicks", 0): (1, 2, 3), ("clicks", 1): (2, 3, 1)}
    text = tr.plan_json(plan)
    assert '"log_dirs":["any","any","any"]' in text
    assert tr.parse_plan(text) == plan
    assert znodes.parse_reassignment(znodes.reassignment_value(plan)) == plan
    with pytest.raises(ReplicationConfigError, match="clicks-0: replicas \\[1, 1\\] name a broker twice"):
        tr.parse_plan('{"version":1,"partitions":[{"topic":"clicks","partition":0,"replicas":[1,1]}]}')
    with pytest.raises(ReplicationConfigError, match="clicks-0: an empty replica list"):
        tr.parse_plan('{"version":1,"partitions":[{"topic":"clicks","partition":0,"replicas":[]}]}')
    with pytest.raises(ReplicationConfigError, match="listed twice"):
        tr.parse_plan('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
                      '{"topic":"t","partition":0,"replicas":[2]}]}')
    with pytest.raises(ReplicationConfigError, match="not a reassignment"):
        tr.parse_plan('{"version":1,"topics":[{"topic":"clicks"}]}')
    with pytest.raises(ReplicationConfigError, match="names no partition"):
        tr.parse_plan('{"version":1,"partitions":[]}')
    assert invalid_target((0, -1)) == "replicas [0, -1] name a negative broker id"


def test_broker_lists_and_topics_to_move_files():
    assert tr.parse_broker_list("0, 1,2,3") == [0, 1, 2, 3]
    with pytest.raises(ReplicationConfigError, match="--broker-list '0,x'"):
        tr.parse_broker_list("0,x")
    with pytest.raises(ReplicationConfigError, match="distinct"):
        tr.parse_broker_list("0,0")
    assert tr.parse_topics_to_move('{"version":1,"topics":[{"topic":"b"},{"topic":"a"}]}') == ["a", "b"]
    with pytest.raises(ReplicationConfigError, match="topics-to-move"):
        tr.parse_topics_to_move('{"version":1,"partitions":[]}')
