"""The mirror's partition mapping: documented order, target topic creation, recorded once, fallback."""
from __future__ import annotations

import json

import pytest

from ingest import znodes
from ingest.client.topics_admin import create_topic, read_all_topics
from ingest.errors import MirrorError
from ingest.mirror.mapping import (FALLBACK_STATUS, MirrorUnit, apply_mapping, ensure_mapping, moved_units,
                                   parse_mapping, plan_units)
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until


def test_plan_orders_sources_as_configured_then_broker_and_partition():
    units = plan_units("t", ["dc2", "dc1"], {"dc1": [(1, 0), (0, 1), (0, 0)], "dc2": [(5, 1), (5, 0)]})
    assert [(u.source, u.broker_id, u.partition, u.target_partition) for u in units] == [
        ("dc2", 5, 0, 0), ("dc2", 5, 1, 1), ("dc1", 0, 0, 2), ("dc1", 0, 1, 3), ("dc1", 1, 0, 4)]
    assert units[0].session("g") == "mirror:g:dc2:t:5-0"
    with pytest.raises(MirrorError, match=r"\['dc3'\]"):
        plan_units("t", ["dc1"], {"dc3": [(0, 0)]})


def test_apply_mapping_marks_new_partitions_and_missing_target_partitions_as_fallback():
    recorded = plan_units("t", ["a", "b"], {"a": [(0, 0)], "b": [(0, 0), (0, 1)]})
    now = {"a": [(0, 0), (0, 1)], "b": [(0, 0), (0, 1)]}          # a/0-1 appeared later
    units = apply_mapping(recorded, "t", now, target_partitions=3)
    assert [(u.source, u.partition, u.target_partition) for u in units] == [
        ("a", 0, 0), ("b", 0, 1), ("b", 1, 2), ("a", 1, None)]
    assert [u.target_partition for u in apply_mapping(recorded, "t", now, target_partitions=2)] == [0, 1, None, None]
    assert all(u.fallback for u in apply_mapping(recorded, "t", now, target_partitions=None))


def test_a_moved_replicated_partition_keeps_its_target_partition_and_a_07_one_is_new():
    recorded = [MirrorUnit("dc1", "t", 0, 0, 0), MirrorUnit("dc1", "t", 1, 1, 1), MirrorUnit("dc2", "t", 0, 0, 2)]
    now = {"dc1": [(1, 0), (1, 1)], "dc2": [(0, 0), (1, 0)]}
    # dc1's partition 0 moved from home 0 to 1; dc2's topic is unreplicated: its 1-0 is another partition
    assert moved_units(recorded, "t", now, replicated=["dc1"]) == [MirrorUnit("dc1", "t", 1, 0, 0)]
    assert moved_units(recorded, "t", now, replicated=[]) == []
    assert [u.replicated for u in apply_mapping(recorded, "t", now, 4, replicated=["dc1"])] == [
        True, False, True, False]


def test_parse_mapping_refuses_garbage_naming_the_topic():
    with pytest.raises(MirrorError, match="mapping of topic 't' is unreadable"):
        parse_mapping("t", b"{nope")


def test_ensure_mapping_creates_the_replicated_target_topic_with_spares_and_records_once(broker_factory, zk_connect,
                                                                                        zk):
    _, broker = broker_factory(n=2, zk_connect=zk_connect)
    parts = {"dc1": [(0, 0), (0, 1)], "dc2": [(3, 0)]}
    m = ensure_mapping(zk, "g", "clicks", ["dc1", "dc2"], parts, replication_factor=2)
    assert m.fallback_reason is None and m.target_partitions == 3 + 4                # reserve -1: max(4, 3) spares
    assert [(u.source, u.broker_id, u.partition, u.target_partition) for u in m.units] == [
        ("dc1", 0, 0, 0), ("dc1", 0, 1, 1), ("dc2", 3, 0, 2)]
    plan = read_all_topics(zk, only="clicks").replicated["clicks"]
    assert sorted(plan) == list(range(7)) and all(len(r) == 2 for r in plan.values())
    data, stat = zk.retry(zk.get, znodes.mirror_mapping_path("g", "clicks"))
    assert [p["target_partition"] for p in json.loads(data)["partitions"]] == [0, 1, 2]
    # later (another process): the recorded mapping is read; new partitions take spare ones, one to one,
    # in the documented order among them (dc1 before dc2)
    later = {"dc1": [(0, 0), (0, 1), (1, 0)], "dc2": [(3, 0), (3, 1)]}
    m2 = ensure_mapping(zk, "g", "clicks", ["dc1", "dc2"], later)
    assert [(u.source, u.broker_id, u.partition, u.target_partition) for u in m2.units] == [
        ("dc1", 0, 0, 0), ("dc1", 0, 1, 1), ("dc2", 3, 0, 2), ("dc1", 1, 0, 3), ("dc2", 3, 1, 4)]
    assert m2.fallback_reason is None
    assert zk.retry(zk.get, znodes.mirror_mapping_path("g", "clicks"))[1].version == stat.version + 1
    # the same view again changes nothing; past the spares (the source topic grew more than the reserve):
    # the target topic grows (the mapping's 8 partitions plus the reserve), still one to one
    assert ensure_mapping(zk, "g", "clicks", ["dc1", "dc2"], later).units == m2.units
    more = {**later, "dc2": [(3, p) for p in range(5)]}
    m3 = ensure_mapping(zk, "g", "clicks", ["dc1", "dc2"], more)
    assert [u.target_partition for u in m3.units] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert m3.fallback_reason is None and m3.target_partitions == 8 + 8
    plan = read_all_topics(zk, only="clicks").replicated["clicks"]
    assert sorted(plan) == list(range(16)) and all(len(r) == 2 for r in plan.values())
    # a target that cannot grow (its replication factor above the live brokers): fallback, said so
    create_topic(zk, "narrow", partitions=1, replication_factor=2, manual=None)
    ensure_mapping(zk, "g", "narrow", ["dc1"], {"dc1": [(0, 0)]})
    broker.kill()
    wait_until(lambda: len(zk.get_children(znodes.BROKER_IDS)) == 1, what="one live target broker")
    m4 = ensure_mapping(zk, "g", "narrow", ["dc1"], {"dc1": [(0, 0), (0, 1)]})
    assert [u.target_partition for u in m4.units] == [0, None]
    assert "no spare partition left" in m4.fallback_reason and m4.status(m4.units[-1]) == FALLBACK_STATUS


def test_a_target_topic_with_too_few_partitions_means_fallback(broker_factory, zk_connect, zk):
    broker_factory(n=1, zk_connect=zk_connect)
    create_topic(zk, "views", partitions=1, replication_factor=1, manual=None)
    m = ensure_mapping(zk, "g", "views", ["dc1"], {"dc1": [(0, 0), (0, 1)]})
    assert [u.target_partition for u in m.units] == [None, None]
    assert "has 1 partition(s), fewer than the 2" in m.fallback_reason
    assert MirrorUnit("dc1", "views", 0, 0, None).fallback


def test_a_failed_target_creation_records_nothing(zk):
    with pytest.raises(MirrorError, match="could not be created .* records no mapping"):
        ensure_mapping(zk, "g", "t", ["dc1"], {"dc1": [(0, 0)]})      # no target broker registered
    assert zk.retry(zk.exists, znodes.mirror_mapping_path("g", "t")) is None
