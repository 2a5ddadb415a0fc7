"""Incremental cooperative rebalancing (KIP-429) and static membership (KIP-345) with real clients.

Member processes (tests/kafka/group_member.py) commit after processing while a confluent-kafka producer
writes distinct values to a 12-partition topic on one broker (the coordinator's behaviour does not depend
on replication; tests/kafka/test_consumer_groups.py covers the coordinator's failover):

- cooperative-sticky, confluent-kafka and kafka-python members in one group: when a fourth member joins,
  only the partitions that move to it are revoked (each once) and the others keep theirs without a
  revoke; when a member is SIGKILLed, its partitions are added to the others and nothing is revoked;
- static members (``group.instance.id``, confluent-kafka): one SIGKILLed and started again within its
  session gets its partitions back and the others see no rebalance; a second process with a member's
  instance id takes its place (the first is fenced: FENCED_INSTANCE_ID) without a rebalance; a member
  closed (librdkafka sends no LeaveGroup for a static member, as Kafka's clients) and started again gets its
  partitions back without a rebalance; one removed by an operator (LeaveGroup by instance id, kafka-python's
  AdminClient) leaves at once and the group rebalances; one that stays away past its session timeout is
  removed and its partitions move.

Afterwards every acknowledged value was processed and no record was covered by two successful commits.
"""
from __future__ import annotations

import logging

import pytest

from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.kafka import group_checks as gc

log = logging.getLogger(__name__)
pytestmark = pytest.mark.processes

TOPIC = "orders"
PARTITIONS = 12
STATIC_SESSION_MS = 20_000
FENCED = "Static consumer fenced by other consumer with same group.instance.id"   # librdkafka's FENCED_INSTANCE_ID


def _broker(broker_factory):
    return broker_factory(1, overrides={"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
                                        "num.partitions": PARTITIONS})[0]


def _start_producing(bootstrap: str) -> gc.Producer:
    producer = gc.Producer(bootstrap, TOPIC, PARTITIONS)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, timeout=60, interval=0.5, what="the first records acknowledged")
    return producer


def _finish(producer: gc.Producer, members, bootstrap: str, group: str) -> None:
    """Stop producing; every acknowledged record processed, committed up to the ends, none twice."""
    producer.stop()
    assert not producer.failed, f"{len(producer.failed)} records not delivered, e.g. {producer.failed[:3]}"
    wait_until(lambda: gc.processed_everything(members, producer.acked), timeout=120, interval=1.0,
               what="every acknowledged record processed")
    ends = gc.end_offsets(bootstrap, TOPIC, PARTITIONS)
    wait_until(lambda: gc.no_record_committed_twice(members, TOPIC) == ends, timeout=120, interval=1.0,
               what=f"commits up to the partitions' ends {ends}")
    assert gc.committed(bootstrap, group, TOPIC, PARTITIONS) == ends


def _since(member: gc.Member, mark: int) -> list[dict]:
    """The callbacks of the member's running incarnation after the first ``mark`` of them."""
    return member.callbacks()[mark:]


def _revoked(events) -> list[int]:
    return [p for ev in events if ev["e"] == "revoke" for p in ev["p"]]


def _remove_members(bootstrap: str, group: str, instance_ids: list[str]) -> dict[str, str]:
    """kafka-python's AdminClient removes static members by instance id; the error class name of each."""
    from kafka.admin import KafkaAdminClient, MemberToRemove

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = admin.remove_group_members(group, [MemberToRemove(group_instance_id=i) for i in instance_ids])
    finally:
        admin.close()
    return {getattr(k, "group_instance_id", k): err.__name__ for k, err in got.items()}   # keyed by instance id


def test_cooperative_sticky_members_keep_their_partitions_and_give_up_only_those_that_move(broker_factory, tmp_path):
    b = _broker(broker_factory)
    bootstrap = f"127.0.0.1:{b.kafka_port}"
    group = "cooperative"

    def member(client: str, name: str) -> gc.Member:
        return gc.Member(client, name, bootstrap, tmp_path, group, TOPIC, assignor="cooperative-sticky")

    producer = _start_producing(bootstrap)
    first = [member("confluent", "rdkafka-0"), member("confluent", "rdkafka-1"),
             member("kafka-python", "kafka-python-0")]
    newcomer = member("kafka-python", "kafka-python-1")
    members = first + [newcomer]
    try:
        for m in first:
            m.start()
        gc.wait_all_assigned(first, PARTITIONS, "three cooperative members joined")
        before = gc.assigned(first)
        marks = {m.name: len(m.callbacks()) for m in first}

        # a fourth member joins: the others give up only what the sticky assignment moves to it
        newcomer.start()
        gc.wait_all_assigned(members, PARTITIONS, "after a fourth member joined")
        wait_until(lambda: all(len(ps or ()) == 3 for ps in gc.assigned(members).values()), timeout=120,
                   interval=1.0, what=f"three partitions each (now {gc.assigned(members)})")
        after = gc.assigned(members)
        revoked = {m.name: _revoked(_since(m, marks[m.name])) for m in first}
        log.info("cooperative: before %s, after %s, revoked %s", before, after, revoked)
        every_revoked = [p for ps in revoked.values() for p in ps]
        assert sorted(every_revoked) == sorted(after[newcomer.name]), \
            f"only the partitions that moved to the newcomer are revoked, each once: revoked {revoked}, " \
            f"the newcomer has {after[newcomer.name]}"
        for m in first:
            assert set(revoked[m.name]) <= set(before[m.name])
            assert after[m.name] == sorted(set(before[m.name]) - set(revoked[m.name])), \
                f"{m.name} keeps what it was not asked to give up: before {before[m.name]}, after {after[m.name]}"

        # a member dies: its partitions are added to the others, nobody gives up anything
        victim = first[1]
        survivors = [m for m in members if m is not victim]
        marks = {m.name: len(m.callbacks()) for m in survivors}
        victim.kill()
        gc.wait_all_assigned(survivors, PARTITIONS, "after a member was SIGKILLed")
        for m in survivors:
            assert _revoked(_since(m, marks[m.name])) == [], \
                f"{m.name} had partitions revoked when another member died: {_since(m, marks[m.name])}"
            assert set(after[m.name]) <= set(m.current_assignment())
        _finish(producer, members, bootstrap, group)
    finally:
        producer.halt.set()
        for m in members:
            m.stop()


def test_static_members_come_back_to_their_partitions_without_a_rebalance(broker_factory, tmp_path):
    b = _broker(broker_factory)
    bootstrap = f"127.0.0.1:{b.kafka_port}"
    group = "static"

    def member(name: str, instance_id: str) -> gc.Member:
        return gc.Member("confluent", name, bootstrap, tmp_path, group, TOPIC, instance_id=instance_id,
                         session_ms=STATIC_SESSION_MS)

    producer = _start_producing(bootstrap)
    s0, s1, s2 = member("static-0", "instance-0"), member("static-1", "instance-1"), member("static-2", "instance-2")
    twin = member("static-1-twin", "instance-1")
    members = [s0, s1, s2, twin]

    def no_rebalance(others, marks, what: str) -> None:
        for m in others:
            assert _since(m, marks[m.name]) == [], f"{what}: {m.name} saw a rebalance: {_since(m, marks[m.name])}"

    try:
        for m in (s0, s1, s2):
            m.start()
        gc.wait_all_assigned([s0, s1, s2], PARTITIONS, "three static members joined")
        before = gc.assigned([s0, s1, s2])

        # SIGKILLed and started again within its session: the same partitions, the others undisturbed
        marks = {m.name: len(m.callbacks()) for m in (s1, s2)}
        s0.kill()
        s0.start()
        wait_until(lambda: s0.current_assignment(), timeout=60, interval=0.5, what="the restarted member assigned")
        assert s0.current_assignment() == before[s0.name]
        no_rebalance((s1, s2), marks, "a static member restarted")

        # a second process with the same instance id takes the member's place; the first is fenced
        marks = {m.name: len(m.callbacks()) for m in (s0, s2)}
        twin.start()
        wait_until(lambda: twin.current_assignment(), timeout=60, interval=0.5, what="the twin assigned")
        assert twin.current_assignment() == before[s1.name]
        wait_until(lambda: any(ev["e"] == "error" and FENCED in ev["text"] for ev in s1.events()),
                   timeout=60, interval=0.5, what=f"the first {s1.name} fenced (FENCED_INSTANCE_ID)")
        s1.proc.wait(60)                 # a fenced librdkafka consumer is failed for good: the member ends
        no_rebalance((s0, s2), marks, "a second process took a static member's instance id")

        # closed (no LeaveGroup from a static member) and started again: the same partitions, no rebalance
        marks = {m.name: len(m.callbacks()) for m in (s0, twin)}
        s2.stop()
        s2.start()
        wait_until(lambda: s2.current_assignment(), timeout=60, interval=0.5, what="the reopened member assigned")
        assert s2.current_assignment() == before[s2.name]
        no_rebalance((s0, twin), marks, "a static member closed and opened again")

        # an operator removes a static member by instance id (LeaveGroup v3+, as Kafka's AdminClient): it is
        # removed at once and the group rebalances; the process joins again as a new member
        marks = {m.name: len(m.callbacks()) for m in (s0, twin)}
        assert _remove_members(bootstrap, group, ["instance-2", "no-such-instance"]) == \
            {"instance-2": "NoError", "no-such-instance": "UnknownMemberIdError"}
        wait_until(lambda: all(_revoked(_since(m, marks[m.name])) for m in (s0, twin)), timeout=60, interval=0.5,
                   what="a rebalance after a static member was removed")
        gc.wait_all_assigned([s0, twin, s2], PARTITIONS, "after the removed static member joined again")

        # away past its session timeout: removed, its partitions move to the others
        s0.kill()
        gc.wait_all_assigned([twin, s2], PARTITIONS, "after a static member stayed away",
                             timeout=STATIC_SESSION_MS / 1000 + 120)
        assert f"sent nothing for its session timeout ({STATIC_SESSION_MS} ms)" in b.output()
        _finish(producer, [s0, s1, s2, twin], bootstrap, group)
    finally:
        producer.halt.set()
        for m in members:
            m.stop()


def test_a_static_member_that_misses_a_rebalance_keeps_its_place_until_its_session_expires(broker_factory, tmp_path):
    """KIP-345: a static member is removed by its session timeout only. One SIGKILLed while a new member
    joins does not rejoin within the rebalance timeout (kafka-python's ``max.poll.interval.ms``, shorter
    than the session here); the generation completes with it still a member (its partitions wait for it),
    and when it comes back within its session it takes them without another rebalance."""
    b = _broker(broker_factory)
    bootstrap = f"127.0.0.1:{b.kafka_port}"
    group = "static-missed"

    def member(name: str, instance_id: str | None) -> gc.Member:
        return gc.Member("kafka-python", name, bootstrap, tmp_path, group, TOPIC, instance_id=instance_id,
                         session_ms=STATIC_SESSION_MS * 3 // 2, poll_ms=6000)

    producer = _start_producing(bootstrap)
    a, c = member("static-a", "instance-a"), member("static-c", "instance-c")
    newcomer = member("dynamic", None)
    members = [a, c, newcomer]
    try:
        for m in (a, c):
            m.start()
        gc.wait_all_assigned([a, c], PARTITIONS, "two static members joined")
        a.kill()
        mark = len(c.callbacks())
        newcomer.start()             # a rebalance that the killed static member cannot rejoin
        wait_until(lambda: newcomer.current_assignment() and any(ev["e"] == "assign" for ev in _since(c, mark)),
                   timeout=120, interval=0.5, what=f"the rebalance without {a.name} completed ({gc.assigned(members)})")
        kept = gc.assigned([c, newcomer])
        owned = {p for ps in kept.values() for p in ps}
        assert len(owned) < PARTITIONS, \
            f"the absent static member is still a member and its share waits for it: the others own {kept}"
        marks = {m.name: len(m.callbacks()) for m in (c, newcomer)}
        a.start()
        gc.wait_all_assigned(members, PARTITIONS, "the static member back")
        assert a.current_assignment() == sorted(set(range(PARTITIONS)) - owned)
        for m in (c, newcomer):
            assert _since(m, marks[m.name]) == [], f"{m.name} saw a rebalance: {_since(m, marks[m.name])}"
        _finish(producer, members, bootstrap, group)
    finally:
        producer.halt.set()
        for m in members:
            m.stop()
