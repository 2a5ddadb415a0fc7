"""The replication throttle's pieces without a cluster: the sampled rate, the throttled-replica lists and the
configs a reassignment's throttle writes (docs/replication.md, "Replication throttle")."""
from __future__ import annotations

import pytest

from ingest.broker import replication_quota as rq
from ingest.broker import topic_config
from ingest.broker.replication_quota import ReplicationQuota
from ingest.broker.replication_throttle import throttled_replicas
from ingest.errors import InvalidConfigError


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_an_unlimited_quota_is_never_exceeded():
    q = ReplicationQuota(11, 1.0, Clock())
    q.record(10 ** 12)
    assert not q.is_exceeded() and q.delay_s() == 0.0


def test_the_rate_is_divided_by_at_least_window_num_minus_one_windows_and_samples_expire():
    clock = Clock()
    q = ReplicationQuota(3, 1.0, clock)
    q.update_bound(1000)
    q.record(2000)                      # 2000 bytes over at least 2 windows: 1000/s, not above the bound
    assert not q.is_exceeded()
    q.record(1000)
    assert q.is_exceeded()
    assert 0 < q.delay_s() <= 1.0
    clock.t += 0.5
    assert q.is_exceeded()              # 3000 bytes over 0.5 s + 2 windows: 1200/s (Kafka's Rate)
    clock.t += 2.5                      # the sample is 3 windows old: dropped
    assert not q.is_exceeded()
    q.update_bound(rq.UNLIMITED)
    q.record(10 ** 9)
    assert not q.is_exceeded()


def test_only_the_marked_partitions_are_throttled():
    q = ReplicationQuota(11, 1.0, Clock())
    q.mark_throttled("a", frozenset({0, 2}))
    q.mark_throttled("b", rq.ALL)
    assert [q.is_throttled("a", p) for p in range(3)] == [True, False, True]
    assert q.is_throttled("b", 7) and not q.is_throttled("c", 0)
    q.mark_throttled("a", frozenset())
    assert not q.is_throttled("a", 0)


def test_a_throttled_replica_list_names_partition_broker_pairs_or_all():
    assert topic_config.check(rq.LEADER_REPLICAS, " 0:1, 1:2 ,0:1") == "0:1,1:2"
    assert topic_config.check(rq.FOLLOWER_REPLICAS, "*") == "*"
    for bad in ("0-1", "0:", "a:1", "0:1,,1:2"):
        with pytest.raises(InvalidConfigError, match=r"\[partitionId\]:\[brokerId\]") as err:
            topic_config.check(rq.FOLLOWER_REPLICAS, bad)
        assert repr(bad) in str(err.value)
    assert rq.throttled_partitions("0:1,1:2,3:1", 1) == frozenset({0, 3})
    assert rq.throttled_partitions("*", 5) == rq.ALL
    assert rq.throttled_partitions(None, 1) == frozenset()


def test_a_rate_is_a_non_negative_long():
    assert rq.check_rate(rq.LEADER_RATE, " 1024 ") == "1024"
    for bad in ("-1", "fast", str(2 ** 63)):
        with pytest.raises(InvalidConfigError, match=rq.LEADER_RATE):
            rq.check_rate(rq.LEADER_RATE, bad)


def test_a_reassignment_throttles_the_current_replicas_as_leaders_and_the_new_ones_as_followers():
    moves = {("t", 0): [1, 2, 3], ("t", 1): [2, 3], ("u", 0): [4], ("u", 1): [1]}
    current = {("t", 0): [1, 2], ("t", 1): [1, 2], ("u", 0): [4], ("u", 1): [2]}
    assert throttled_replicas(moves, current) == {
        "t": {rq.LEADER_REPLICAS: "0:1,0:2,1:1,1:2", rq.FOLLOWER_REPLICAS: "0:3,1:3"},
        "u": {rq.LEADER_REPLICAS: "1:2", rq.FOLLOWER_REPLICAS: "1:1"}}   # u-0 does not move
