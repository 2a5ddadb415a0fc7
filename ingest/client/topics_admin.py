"""Replicated topics for operators: create them, read them, move leadership back to the preferred replica.

Kafka 0.8's ``kafka-topics --create/--describe`` and ``kafka-preferred-replica-election``,
adapted (``ingest topics create|describe|preferred-leader``, docs/replication.md):

* **create** writes a topic's replica assignment as the data of
  ``/brokers/topics/[topic]`` in one create (nothing else; the controller creates
  the partitions' state nodes and elects leaders). The assignment is Kafka's rule
  over the brokers registered now (:func:`ingest.broker.assignment.assign`), or
  the operator's ``--replica-assignment`` checked against them. Every check runs
  before the write, so a refused request leaves ZooKeeper unchanged. A topic that
  exists, replicated or not, is refused: a topic's kind and assignment are fixed.
* **describe** (:mod:`ingest.client.topics_describe`) reads what this module reads
  (:func:`read_all_topics`, :func:`read_state`) and adds each leader's high watermark.
* **preferred-leader** writes ``/admin/preferred_replica_election``; the
  controller moves each named partition's leadership to its preferred replica
  (the first of its assignment) when that replica is in sync, then deletes the
  node. One request at a time: a pending one is refused.

Every ZooKeeper call goes through ``client.retry``; paths come from :mod:`ingest.znodes`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, TextIO

from kazoo.exceptions import NoNodeError, NodeExistsError

from ingest import znodes
from ingest.broker import assignment
from ingest.client.discovery import read_brokers, read_topic_partition_counts, read_topics
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import ReplicationConfigError, UnknownTopicError

log = logging.getLogger(__name__)

Assignment = Mapping[int, Sequence[int]]


# --- pure checks and plans ------------------------------------------------------------------

def check_counts(partitions: int | None, replication_factor: int) -> None:
    """The checks that need no cluster: ``partitions`` in 1..10000 (when given), replication factor >= 1.

    Raises:
        ReplicationConfigError: naming the value and what is allowed.
    """
    if partitions is not None and not 1 <= partitions <= assignment.MAX_PARTITIONS:
        raise ReplicationConfigError(
            f"partitions {partitions} is not allowed: it must be 1..{assignment.MAX_PARTITIONS}")
    if replication_factor < 1:
        raise ReplicationConfigError(
            f"replication factor {replication_factor} is not allowed: it must be at least 1 "
            "and at most the number of live brokers")


def plan_assignment(live_brokers: Iterable[int], *, partitions: int | None, replication_factor: int | None,
                    manual: str | None) -> dict[int, list[int]]:
    """The assignment a create writes: Kafka's rule over ``live_brokers``, or ``manual`` checked against them.

    Raises:
        ReplicationConfigError: no broker registered, a count out of range, a replication factor above
            the live brokers, a malformed manual assignment or one naming an unregistered broker.
    """
    live = sorted(set(live_brokers))
    if not live:
        raise ReplicationConfigError(
            "no broker is registered in ZooKeeper (/brokers/ids is empty): start the brokers with "
            "enable.zookeeper=true and the same zk.connect first")
    if manual is not None:
        return assignment.check_manual(assignment.parse_manual(manual), live)
    assert partitions is not None and replication_factor is not None
    return assignment.assign(live, partitions, replication_factor)


def describe_assignment(plan: Assignment) -> str:
    """``0:[1,2] 1:[2,0]``: a short text of an assignment."""
    return " ".join(f"{p}:[{','.join(map(str, r))}]" for p, r in sorted(plan.items()))


def election_partitions(replicated: Mapping[str, Assignment], legacy: Iterable[str], topic: str | None,
                        partition: int | None) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` pairs a preferred-leader request names.

    Without ``topic``: every partition of every replicated topic. With ``topic``: its partitions,
    or only ``partition``.

    Raises:
        ReplicationConfigError: ``partition`` without ``topic``, an unreplicated topic, a partition out of
            range, or no replicated topic at all.
        UnknownTopicError: ``topic`` does not exist.
    """
    if partition is not None and topic is None:
        raise ReplicationConfigError(f"--partition {partition} needs --topic (which topic's partition?)")
    if topic is None:
        out = [(t, p) for t in sorted(replicated) for p in sorted(replicated[t])]
        if not out:
            raise ReplicationConfigError("no replicated topic exists: there is no leadership to move "
                                         "(create one with `ingest topics create`)")
        return out
    if topic not in replicated:
        if topic in set(legacy):
            raise ReplicationConfigError(f"topic {topic!r} is unreplicated (a Kafka 0.7 topic, one copy per "
                                         "broker): it has no preferred replica")
        raise UnknownTopicError(f"topic {topic!r} does not exist; replicated topics: "
                                f"{', '.join(sorted(replicated)) or 'none'}")
    parts = sorted(replicated[topic])
    if partition is None:
        return [(topic, p) for p in parts]
    if partition not in replicated[topic]:
        raise ReplicationConfigError(f"partition {partition} of topic {topic!r} does not exist: "
                                     f"it has {len(parts)} partition(s), 0..{len(parts) - 1}")
    return [(topic, partition)]


# --- ZooKeeper reads -----------------------------------------------------------------------

@dataclass(frozen=True)
class Topics:
    """Every topic in ZooKeeper, by kind."""

    replicated: dict[str, dict[int, tuple[int, ...]]]
    legacy: dict[str, dict[int, int]]          # topic -> {broker id: partition count}
    unreadable: dict[str, str]                 # topic -> why its assignment cannot be read
    kafka: frozenset[str] = frozenset()        # the replicated ones that are Kafka topics ("format":"kafka")


def read_all_topics(client, only: str | None = None) -> Topics:
    """Read ``/brokers/topics`` (or just ``only``): assignments of replicated topics, counts of legacy ones."""
    names = read_topics(client) if only is None else [only]
    replicated, legacy, unreadable, kafka = {}, {}, {}, set()
    for name in names:
        try:
            data, _ = client.retry(client.get, znodes.topic_dir(name))
        except NoNodeError:
            continue
        try:
            plan = znodes.parse_assignment(data)
            if znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT:
                kafka.add(name)
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            unreadable[name] = f"unreadable assignment {data[:80]!r}: {exc}"
            continue
        if plan is None:
            legacy[name] = read_topic_partition_counts(client, name)
        else:
            replicated[name] = plan
    return Topics(replicated, legacy, unreadable, frozenset(kafka))


def read_state(client, topic: str, partition: int) -> znodes.PartitionState | None:
    """A partition's state node, or None before the controller wrote it (or if it is unreadable)."""
    try:
        data, stat = client.retry(client.get, znodes.partition_state_path(topic, partition))
        return znodes.PartitionState.parse(data, stat.version)
    except NoNodeError:
        return None
    except ValueError as exc:
        log.debug("unreadable state of %s/%d: %s", topic, partition, exc)
        return None


def read_controller(client) -> tuple[int | None, int | None]:
    """``(controller broker id or None, controller epoch or None)``."""
    def get(path):
        try:
            return client.retry(client.get, path)[0]
        except NoNodeError:
            return None
    data, epoch = get(znodes.CONTROLLER), get(znodes.CONTROLLER_EPOCH)
    try:
        bid = znodes.parse_controller(data) if data else None
    except ValueError:
        bid = None
    try:
        ep = int(epoch.decode().strip()) if epoch else None
    except ValueError:
        ep = None
    return bid, ep


def exists_message(topics: Topics, topic: str) -> str:
    """Why ``topic`` cannot be created: it exists, and as what."""
    if topic in topics.replicated:
        plan = topics.replicated[topic]
        return (f"topic {topic!r} already exists (replicated, {len(plan)} partition(s), replication factor "
                f"{len(plan[0])}: {describe_assignment(plan)}); nothing was changed")
    if topic in topics.legacy:
        owners = sorted(topics.legacy[topic])
        where = f"registered by broker(s) {owners}" if owners else "registered by no live broker now"
        return (f"topic {topic!r} already exists as an unreplicated (Kafka 0.7) topic, {where}; "
                "nothing was changed (an existing topic cannot become replicated)")
    return f"topic {topic!r} already exists ({topics.unreadable.get(topic, 'unknown kind')}); nothing was changed"


# --- create --------------------------------------------------------------------------------

def check_min_insync(plan: Assignment, min_insync_replicas: int | None) -> None:
    """Refuse a plan with a partition of fewer replicas than ``min.insync.replicas`` (None: not known).

    Raises:
        ReplicationConfigError: every acks=-1 write to such a partition would be refused.
    """
    if min_insync_replicas is None:
        return
    rf = min(len(r) for r in plan.values())
    if rf < min_insync_replicas:
        raise ReplicationConfigError(
            f"replication factor {rf} is below the brokers' min.insync.replicas={min_insync_replicas}: every "
            f"acks=-1 write to the topic would be refused (NOT_ENOUGH_REPLICAS); allowed is a replication factor of "
            f"at least {min_insync_replicas}; nothing was written")


def create_topic(client, topic: str, *, partitions: int | None, replication_factor: int | None,
                 manual: str | None, min_insync_replicas: int | None = None,
                 topic_format: str | None = None) -> dict[int, list[int]]:
    """Plan and write a new cluster topic; returns the assignment written. ``topic_format``:
    ``"kafka"`` (a Kafka topic; the command line's default) or None (a replicated 0.7 topic, what the
    mirror creates for its 0.7 targets).

    ``min_insync_replicas``: the brokers' ``min.insync.replicas`` when known (from their config);
    a plan with fewer replicas per partition is refused.

    Raises:
        ReplicationConfigError: a bad request (see :func:`plan_assignment` and :func:`check_min_insync`)
            or the topic exists; ZooKeeper is unchanged then.
    """
    live = read_brokers(client)
    plan = plan_assignment(live, partitions=partitions, replication_factor=replication_factor, manual=manual)
    check_min_insync(plan, min_insync_replicas)
    current = read_all_topics(client, only=topic)
    if topic in current.replicated or topic in current.legacy or topic in current.unreadable:
        raise ReplicationConfigError(exists_message(current, topic))
    value = znodes.assignment_value(plan, topic_format)
    try:
        client.retry(client.create, znodes.topic_dir(topic), value, makepath=True)
    except NodeExistsError:
        # created since the check: by someone else, or by our own create whose answer a connection
        # loss swallowed (kazoo's retry then sees the node). The same assignment means it is ours.
        data, _ = client.retry(client.get, znodes.topic_dir(topic))
        if data != value:
            raise ReplicationConfigError(exists_message(read_all_topics(client, only=topic), topic)) from None
    log.debug("created topic %s: %s", topic, describe_assignment(plan))
    return plan


# --- preferred replica election ------------------------------------------------------------

def pending_election(client) -> list[tuple[str, int]] | None:
    """The partitions of a pending preferred-replica election, or None if none is pending."""
    try:
        data, _ = client.retry(client.get, znodes.PREFERRED_REPLICA_ELECTION)
    except NoNodeError:
        return None
    try:
        return znodes.parse_preferred_election(data)
    except ValueError:
        return []


def _pending_message(pending: list[tuple[str, int]]) -> str:
    shown = ", ".join(f"{t}/{p}" for t, p in pending[:5]) + (" ..." if len(pending) > 5 else "")
    return (f"a preferred replica election is already pending ({znodes.PREFERRED_REPLICA_ELECTION} exists, "
            f"naming {len(pending)} partition(s){': ' + shown if shown else ''}); wait until the controller "
            "has deleted it (is a controller running? see `ingest topics describe`); nothing was written")


def request_election(client, partitions: list[tuple[str, int]]) -> None:
    """Write the election request; ReplicationConfigError if one is pending (nothing written then)."""
    pending = pending_election(client)
    if pending is not None:
        raise ReplicationConfigError(_pending_message(pending))
    try:
        client.retry(client.create, znodes.PREFERRED_REPLICA_ELECTION, znodes.preferred_election_value(partitions),
                     makepath=True)
    except NodeExistsError:
        raise ReplicationConfigError(_pending_message(pending_election(client) or [])) from None


def wait_for_election(client, partitions: list[tuple[str, int]], replicated: Mapping[str, Assignment],
                      timeout_s: float, clock: Clock = SYSTEM_CLOCK, poll_s: float = 0.2) -> list[dict]:
    """Poll until the request node is gone and every partition is led by its preferred replica.

    Stops early once the node is gone and every partition not yet moved cannot move (its preferred
    replica is out of the in-sync set). Returns one record per partition: topic, partition, preferred, leader, isr,
    ``done`` (led by the preferred replica), and ``pending`` (the request node still exists) on each.
    """
    deadline = clock.monotonic() + timeout_s
    while True:
        pending = pending_election(client) is not None
        records = []
        for t, p in partitions:
            s = read_state(client, t, p)
            preferred = replicated[t][p][0]
            leader = s.leader if s is not None and s.leader >= 0 else None
            records.append({"topic": t, "partition": p, "preferred": preferred, "leader": leader,
                            "isr": list(s.isr) if s else [], "done": leader == preferred, "pending": pending})
        if not pending and all(r["done"] or r["preferred"] not in r["isr"] for r in records):
            return records  # finished, or what is left cannot move until its preferred replica is in sync
        if clock.monotonic() >= deadline:
            return records
        clock.sleep(poll_s)


def cell(value) -> str:
    """A table cell: ``-`` for None or an empty list, ``1,2,3`` for a list."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return str(value)


def format_election(records: Sequence[dict], out: TextIO) -> None:
    for r in records:
        if r["done"]:
            status = "led by its preferred replica"
        elif r["leader"] is None and not r["isr"]:
            status = f"no leader elected yet (preferred {r['preferred']})"
        elif r["preferred"] not in r["isr"]:
            status = f"preferred replica {r['preferred']} is not in sync (isr {cell(r['isr'])}): cannot move yet"
        else:
            status = f"not moved (preferred {r['preferred']})"
        out.write(f"{r['topic']}/{r['partition']}: leader {cell(r['leader'])}: {status}\n")
