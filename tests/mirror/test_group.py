"""The mirror's control plane against real ZooKeeper and brokers: discovery of two source clusters
(ZooKeeper and a static broker list), whitelist/blacklist, new topics, and the group's assignment
and take-over when a member's session ends."""
from __future__ import annotations

import threading
import uuid

import pytest

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.client.topics_admin import create_topic
from ingest.mirror.config import parse_mirror_config
from ingest.mirror.discovery import SourceDiscovery, UnitKey, units_of
from ingest.mirror.group import MirrorGroup, assignment, read_members
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until
from tests.mirror.mirror_setup import chroot, produce


def test_assignment_is_the_consumer_groups_rule_over_sorted_units():
    units = [UnitKey("dc2", "a", 0, 0), UnitKey("dc1", "b", 1, 0), UnitKey("dc1", "a", 0, 1),
             UnitKey("dc1", "a", 0, 0), UnitKey("dc2", "a", 0, 1)]
    a, b = assignment(units, ["m-b", "m-a"], "m-a"), assignment(units, ["m-a", "m-b"], "m-b")
    assert a == [UnitKey("dc1", "a", 0, 0), UnitKey("dc1", "a", 0, 1), UnitKey("dc1", "b", 1, 0)]
    assert b == [UnitKey("dc2", "a", 0, 0), UnitKey("dc2", "a", 0, 1)]
    assert assignment(units, ["m-a"], "m-a") == sorted(units)
    assert assignment(units, ["m-a"], "m-z") == []
    assert units_of({"t": {"dc2": [(0, 1)], "dc1": [(3, 0)]}}) == [UnitKey("dc1", "t", 3, 0), UnitKey("dc2", "t", 0, 1)]


@pytest.fixture
def two_sources(zookeeper, broker_factory):  # noqa: F811
    """dc1: two ZooKeeper brokers (legacy 'clicks' on broker 0 with 2 partitions, replicated 'views');
    dc2: one broker without ZooKeeper (static broker list)."""
    dc1_zk = chroot(zookeeper, "dc1")
    dc1 = broker_factory(2, zk_connect=dc1_zk, num_partitions=2)
    dc2 = broker_factory(1, num_partitions=1)
    produce(dc1[0], "clicks", 0, [b"c0"])
    produce(dc2[0], "clicks", 0, [b"c"])
    produce(dc2[0], "audit-mirror", 0, [b"own"])
    produce(dc2[0], "views-test", 0, [b"x"])
    zk = start_kazoo(dc1_zk, connection_timeout_ms=30_000)
    plan = create_topic(zk, "views", partitions=3, replication_factor=2, manual=None)
    wait_until(lambda: zk.exists(znodes.topic_path("clicks", dc1[0].broker_id)), what="clicks registered")
    config = {"sources": "dc1,dc2", "source.dc1.zk.connect": dc1_zk,
              "source.dc2.broker.list": dc2[0].address, "target.zk.connect": chroot(zookeeper, "target")}
    yield config, dc1, dc2, plan, zk
    zk.stop()
    zk.close()


def test_discovery_lists_both_sources_filters_and_sees_new_topics(two_sources):
    config, dc1, dc2, plan, zk = two_sources
    b0, b2 = dc1[0].broker_id, dc2[0].broker_id
    views = sorted(UnitKey("dc1", "views", replicas[0], p) for p, replicas in plan.items())
    discovery = SourceDiscovery(parse_mirror_config(config))
    changed = threading.Event()
    discovery.add_listener(changed.set)
    try:
        assert discovery.units() == sorted(
            [UnitKey("dc1", "clicks", b0, 0), UnitKey("dc1", "clicks", b0, 1), UnitKey("dc2", "clicks", b2, 0),
             UnitKey("dc2", "views-test", b2, 0)] + views)   # audit-mirror: never
        assert discovery.topic_partitions()["clicks"] == {"dc1": [(b0, 0), (b0, 1)], "dc2": [(b2, 0)]}
        # a topic created while running: a ZooKeeper source tells at once, a listed source at the next poll
        changed.clear()
        produce(dc1[1], "orders", 1, [b"o"])
        produce(dc2[0], "orders", 0, [b"o"])
        assert changed.wait(10)
        wait_until(lambda: UnitKey("dc1", "orders", dc1[1].broker_id, 1) in discovery.units(), what="orders")
        assert [u for u in discovery.units() if u.topic == "orders"] == [
            UnitKey("dc1", "orders", dc1[1].broker_id, 0), UnitKey("dc1", "orders", dc1[1].broker_id, 1),
            UnitKey("dc2", "orders", b2, 0)]
        assert discovery.sources["dc2"].latest_offset("clicks", b2, 0) == len(encode_message_set([b"c"]))
        assert discovery.sources["dc1"].latest_offset("clicks", b0, 0) == len(encode_message_set([b"c0"]))
        filtered = SourceDiscovery(parse_mirror_config({**config, "whitelist": "views.*|clicks|orders",
                                                        "blacklist": ".*-test|orders"}))
        try:
            assert sorted({(u.source, u.topic) for u in filtered.units()}) == [
                ("dc1", "clicks"), ("dc1", "views"), ("dc2", "clicks")]
        finally:
            filtered.close()
        # a listed broker that does not answer for a while keeps its partitions (its copiers do not stop)
        before = discovery.units()
        dc2[0].kill()
        assert discovery.units() == before
        assert discovery.sources["dc2"].latest_offset("clicks", b2, 0) is None
    finally:
        discovery.close()


def test_group_members_share_units_and_take_over_when_one_ends(zk_connect):
    units = [UnitKey("dc1", "t", 0, p) for p in range(5)]
    clients = [start_kazoo(zk_connect, session_timeout_ms=4000, connection_timeout_ms=30_000) for _ in range(3)]
    wakes = [threading.Event() for _ in range(3)]
    a = MirrorGroup(clients[0], "g", "m-a", on_change=wakes[0].set)
    b = MirrorGroup(clients[1], "g", "m-b", on_change=wakes[1].set)
    try:
        a.join()
        b.join()
        wait_until(lambda: a.members() == ["m-a", "m-b"], what="two members")
        assert a.assignment(units) == units[:3] and b.assignment(units) == units[3:]
        a.report(units[:3], {str(units[0]): {"caught_up_at_ms": 5}})
        members = read_members(clients[2], "g")
        assert members["m-a"]["units"] == [str(u) for u in units[:3]] and members["m-b"]["units"] == []
        assert members["m-a"]["progress"] == {"dc1:t:0-0": {"caught_up_at_ms": 5}}
        # m-b's process dies: its session ends, m-a is told and takes everything
        wakes[0].clear()
        clients[1].stop()
        clients[1].close()
        assert wakes[0].wait(15)
        wait_until(lambda: a.assignment(units) == units, what="m-a owns every unit")
        # m-a restarted with the same id before its old session expired: the new process replaces the node
        c = MirrorGroup(clients[2], "g", "m-a", on_change=lambda: None)
        c.join()
        _, stat = clients[2].get(znodes.mirror_member_path("g", "m-a"))
        assert stat.ephemeralOwner == clients[2].client_id[0]
        assert c.assignment(units) == units
        c.leave()
        assert read_members(clients[2], "g") == {}
    finally:
        for client in (clients[0], clients[2]):
            client.stop()
            client.close()


def test_a_failing_copier_is_started_again_with_a_doubling_back_off(zookeeper, broker_factory):  # noqa: F811
    import time

    from ingest.errors import MirrorError
    from ingest.mirror.mirror_maker import MirrorMaker

    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=1)
    broker_factory(1, zk_connect=target_zk)
    produce(dc1, "clicks", 0, [b"x"])
    calls: list[float] = []

    def failing(unit, mirror):
        calls.append(time.monotonic())
        raise MirrorError(f"{unit}: cannot be copied (test)")

    mirror = MirrorMaker({"sources": "dc1", "source.dc1.zk.connect": dc1_zk, "target.zk.connect": target_zk,
                          "topic.refresh.ms": 100, "checkpoint.interval.ms": 100}, copier_factory=failing).start()
    try:
        wait_until(lambda: len(calls) >= 4, what="four attempts")
    finally:
        mirror.stop()
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    # 0.5 s, 1 s, 2 s at least between attempts (a slow machine only makes them longer)
    assert [g >= want for g, want in zip(gaps, (0.5, 1.0, 2.0))] == [True, True, True], gaps
    assert mirror.last_error is None and mirror.owned() == []


def test_a_copier_that_keeps_failing_is_logged_once_not_at_every_restart(zookeeper, broker_factory,  # noqa: F811
                                                                        caplog):
    """Each restart of a failing copier used to log two WARNINGs (its failure, with a traceback, and
    its restart): thousands of lines a day per unit. Now each is logged once a minute per unit and
    cause, and the repeats are counted."""
    import logging
    import time

    from ingest.errors import MirrorError
    from ingest.mirror.mirror_maker import MirrorMaker

    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=1)
    broker_factory(1, zk_connect=target_zk)
    produce(dc1, "clicks", 0, [b"x"])
    calls: list[float] = []

    def failing(unit, mirror):
        calls.append(time.monotonic())
        raise MirrorError(f"{unit}: cannot be copied (test)")

    with caplog.at_level(logging.WARNING, logger="ingest.mirror"):
        mirror = MirrorMaker({"sources": "dc1", "source.dc1.zk.connect": dc1_zk, "target.zk.connect": target_zk,
                              "topic.refresh.ms": 100, "checkpoint.interval.ms": 100},
                             copier_factory=failing).start()
        try:
            wait_until(lambda: len(calls) >= 4, what="four attempts")
        finally:
            mirror.stop()
    lines = [r.getMessage() for r in caplog.records if "clicks" in r.getMessage()]
    failed = [m for m in lines if "failed" in m]
    restarted = [m for m in lines if "starting it again" in m]
    assert len(failed) == 1 and len(restarted) == 1, lines
