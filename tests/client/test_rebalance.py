"""The rebalance assignment is a pure function: every partition exactly once, deterministic, balanced."""
from __future__ import annotations

import itertools
import random

import pytest

from ingest.client.rebalance import assign, subscribed_threads, thread_ids

PARTS_3x4 = [(b, p) for b in range(3) for p in range(4)]


def _check_exact_cover(plan, partitions):
    owned = [bp for parts in plan.values() for bp in parts]
    assert sorted(owned) == sorted(set(partitions)), "every partition owned exactly once"
    sizes = [len(v) for v in plan.values()]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced: {sizes}"


@pytest.mark.parametrize("n_consumers", range(1, 16))
def test_every_partition_has_exactly_one_owner(n_consumers):
    threads = [f"c{i}-0" for i in range(n_consumers)]
    plan = assign(PARTS_3x4, threads)
    assert set(plan) == set(threads)
    _check_exact_cover(plan, PARTS_3x4)


def test_kafka_layout_contiguous_runs_remainder_to_first_threads():
    # 12 partitions over 5 threads: N=2, R=2 -> sizes 3,3,2,2,2 in sorted thread order
    plan = assign(PARTS_3x4, ["e-0", "a-0", "c-0", "b-0", "d-0"])
    assert [len(plan[t]) for t in sorted(plan)] == [3, 3, 2, 2, 2]
    assert plan["a-0"] == [(0, 0), (0, 1), (0, 2)]
    assert plan["b-0"] == [(0, 3), (1, 0), (1, 1)]
    assert plan["e-0"] == [(2, 2), (2, 3)]


def test_more_threads_than_partitions_leaves_extra_threads_idle():
    plan = assign([(0, 0), (1, 0)], ["a-0", "b-0", "c-0"])
    assert plan == {"a-0": [(0, 0)], "b-0": [(1, 0)], "c-0": []}


def test_partitions_sorted_numerically_not_as_strings():
    parts = [(10, 0), (2, 0), (1, 11), (1, 2)]
    plan = assign(parts, ["x-0"])
    assert plan["x-0"] == [(1, 2), (1, 11), (2, 0), (10, 0)]


def test_deterministic_regardless_of_input_order():
    rng = random.Random(7)
    threads = [f"c{i}-{j}" for i in range(4) for j in range(2)]
    first = assign(PARTS_3x4, threads)
    for _ in range(20):
        p, t = PARTS_3x4[:], threads[:]
        rng.shuffle(p)
        rng.shuffle(t)
        assert assign(p, t) == first


def test_no_consumers_means_no_assignment():
    assert assign(PARTS_3x4, []) == {}


def test_subscriptions_expand_to_threads_per_topic():
    subs = {"b": {"t": 2, "u": 1}, "a": {"t": 1}}
    assert subscribed_threads(subs, "t") == ["a-0", "b-0", "b-1"]
    assert subscribed_threads(subs, "u") == ["b-0"]
    assert thread_ids("x", 3) == ["x-0", "x-1", "x-2"]


def test_every_group_size_and_join_order_converges_to_the_same_plan():
    consumers = ["c1", "c2", "c3", "c4", "c5"]
    for k in range(1, 6):
        for group in itertools.combinations(consumers, k):
            threads = [t for c in group for t in thread_ids(c, 1)]
            _check_exact_cover(assign(PARTS_3x4, threads), PARTS_3x4)
