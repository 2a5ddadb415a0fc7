"""``ingest topics reassign``: move replicas between brokers (Kafka's ``kafka-reassign-partitions``).

* **generate** (pure, :func:`propose`): for the topics of a ``--topics-to-move-json-file``
  (``{"version":1,"topics":[{"topic":"clicks"},...]}``) and a ``--broker-list`` (``0,1,2,3``), a plan that
  keeps each partition's replication factor and spreads the replicas and the preferred leaders (first
  replicas) evenly: over all the partitions of the plan, every broker's count of each differs from
  another's by at most one. Printed with the current assignment, both in Kafka's plan JSON
  (``{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[...],"log_dirs":["any",...]}]}``).
* **execute** checks the plan against ZooKeeper (replicated topics, existing partitions, registered
  brokers, no repeated broker) and writes it to ``/admin/reassign_partitions``; the controller moves the
  replicas (:mod:`ingest.broker.reassignment`). One request at a time: a pending one is refused. It prints
  the current assignment first, to keep for a rollback.
* **verify** says per partition of the plan: complete (its replicas are the plan's and no move is pending),
  still in progress, or failed (no move pending and its replicas differ: cancelled or refused).
* **cancel** writes each partition's original replicas (the assignment without the replicas being added)
  as its target: the controller removes the added replicas and the partition keeps its old assignment.

Every ZooKeeper call goes through ``client.retry``; paths come from :mod:`ingest.znodes`.
"""
from __future__ import annotations

import json
import logging
from typing import Iterable, Mapping, Sequence, TextIO

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ingest import znodes
from ingest.broker.reassignment import invalid_target, original_replicas
from ingest.client.discovery import read_brokers
from ingest.client.topics_admin import Topics
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import parse_int
from ingest.errors import ReplicationConfigError, UnknownTopicError

log = logging.getLogger(__name__)

Plan = dict[tuple[str, int], tuple[int, ...]]
COMPLETE, IN_PROGRESS, FAILED = "complete", "in progress", "failed"


# --- pure: parsing and generating ------------------------------------------------------------

def parse_broker_list(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (Kafka's ``--broker-list``).

    Raises:
        ReplicationConfigError: not distinct non-negative integers joined by commas.
    """
    try:
        ids = [parse_int(x.strip()) for x in text.split(",")]
    except ValueError:
        raise ReplicationConfigError(f"--broker-list {text!r}: allowed is broker ids joined by ',' (e.g. 0,1,2,3)")\
            from None
    if any(b < 0 for b in ids) or len(set(ids)) != len(ids):
        raise ReplicationConfigError(f"--broker-list {text!r}: broker ids must be distinct and >= 0")
    return ids


def parse_topics_to_move(text: str) -> list[str]:
    """The topic names of Kafka's ``--topics-to-move-json-file`` (``{"version":1,"topics":[{"topic":T},...]}``).

    Raises:
        ReplicationConfigError: not that JSON, or no topic.
    """
    try:
        topics = [str(x["topic"]) for x in json.loads(text)["topics"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplicationConfigError('a topics-to-move file holds {"version":1,"topics":[{"topic":"clicks"},...]}: '
                                     f"{exc!r} in {text[:200]!r}") from None
    if not topics:
        raise ReplicationConfigError("the topics-to-move file names no topic")
    return sorted(set(topics))


def parse_plan(text: str) -> Plan:
    """A plan file (Kafka's reassignment JSON; ``log_dirs`` ignored).

    Raises:
        ReplicationConfigError: not that JSON, no partition, or an empty or repeating replica list.
    """
    try:
        plan = znodes.parse_reassignment(text.encode())
    except ValueError as exc:
        raise ReplicationConfigError(f"plan: {exc}") from None
    if not plan:
        raise ReplicationConfigError("the plan names no partition")
    for (topic, p), target in sorted(plan.items()):
        why = invalid_target(target)
        if why is not None:
            raise ReplicationConfigError(f"plan: partition {topic}-{p}: {why}")
    return plan


def propose(current: Mapping[str, Mapping[int, Sequence[int]]], brokers: Iterable[int]) -> Plan:
    """New replicas for every partition of ``current`` (topic -> partition -> replicas) over ``brokers``,
    each partition keeping its replication factor, replicas and first replicas (preferred leaders) spread
    evenly: every broker's count of each is within one of another's.

    Partitions in order (topic, partition); each takes as leader the broker with the fewest leaders (then
    the fewest replicas, then the next in a rotation) and as followers those with the fewest replicas;
    then, while one broker holds two replicas more than another, a follower replica moves from the first
    to the second. Deterministic: the same input gives the same plan.

    Raises:
        ReplicationConfigError: no broker, or a partition with more replicas than brokers.
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if not n:
        raise ReplicationConfigError("--broker-list names no broker")
    leaders = {b: 0 for b in ids}
    replicas = {b: 0 for b in ids}
    out: dict[tuple[str, int], list[int]] = {}
    for k, (topic, p) in enumerate((t, p) for t in sorted(current) for p in sorted(current[t])):
        rf = len(current[topic][p])
        if rf > n:
            raise ReplicationConfigError(f"{topic}-{p} has {rf} replicas; the broker list {ids} has only {n} "
                                         "broker(s): a replica needs a broker of its own")
        turn = {b: (i - k) % n for i, b in enumerate(ids)}
        leader = min(ids, key=lambda b: (leaders[b], replicas[b], turn[b]))
        after = {b: (i - ids.index(leader)) % n for i, b in enumerate(ids)}
        followers = sorted((b for b in ids if b != leader), key=lambda b: (replicas[b], after[b]))[:rf - 1]
        out[(topic, p)] = [leader, *sorted(followers, key=after.__getitem__)]
        leaders[leader] += 1
        for b in out[(topic, p)]:
            replicas[b] += 1
    for _ in range(len(out) * n):
        most = max(ids, key=lambda b: (replicas[b], -b))
        least = min(ids, key=lambda b: (replicas[b], b))
        if replicas[most] - replicas[least] < 2:
            break
        key = next((key for key, r in sorted(out.items()) if most in r[1:] and least not in r), None)
        if key is None:
            break
        r = out[key]
        r[r.index(most)] = least
        replicas[most] -= 1
        replicas[least] += 1
    return {key: tuple(r) for key, r in out.items()}


def plan_json(plan: Mapping[tuple[str, int], Sequence[int]]) -> str:
    """Kafka's reassignment JSON (with ``log_dirs`` ``"any"``, so Kafka's own tool reads it too)."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


def balance(plan: Mapping[tuple[str, int], Sequence[int]]) -> tuple[dict[int, int], dict[int, int]]:
    """``(replicas per broker, first replicas per broker)`` of a plan."""
    replicas: dict[int, int] = {}
    leaders: dict[int, int] = {}
    for r in plan.values():
        leaders[r[0]] = leaders.get(r[0], 0) + 1
        for b in r:
            replicas[b] = replicas.get(b, 0) + 1
    return replicas, leaders


# --- checks against ZooKeeper ----------------------------------------------------------------

def topics_to_move(topics: Topics, names: Iterable[str]) -> dict[str, dict[int, tuple[int, ...]]]:
    """The current assignments of ``names``.

    Raises:
        UnknownTopicError / ReplicationConfigError: a topic that does not exist, or is unreplicated.
    """
    out = {}
    for name in names:
        _check_topic(topics, name)
        out[name] = dict(topics.replicated[name])
    return out


def _check_topic(topics: Topics, topic: str) -> None:
    if topic in topics.replicated:
        return
    if topic in topics.legacy:
        raise ReplicationConfigError(f"topic {topic!r} is unreplicated (a Kafka 0.7 topic, one copy per broker): "
                                     "it has no replica assignment to move")
    raise UnknownTopicError(f"topic {topic!r} does not exist; replicated topics: "
                            f"{', '.join(sorted(topics.replicated)) or 'none'}")


def check_plan(plan: Plan, topics: Topics, registered: Iterable[int]) -> Plan:
    """The current replicas of each partition of ``plan``, after checking it can be executed.

    Raises:
        UnknownTopicError / ReplicationConfigError: naming the partition and what is wrong (a topic that does
            not exist or is unreplicated, a partition out of range, a broker that is not registered).
    """
    known = set(registered)
    current: Plan = {}
    for (topic, p), target in sorted(plan.items()):
        _check_topic(topics, topic)
        parts = topics.replicated[topic]
        if p not in parts:
            raise ReplicationConfigError(f"plan: partition {p} of topic {topic!r} does not exist: it has "
                                         f"{len(parts)} partition(s), 0..{len(parts) - 1}")
        unknown = sorted(set(target) - known)
        if unknown:
            raise ReplicationConfigError(f"plan: {topic}-{p} names broker id(s) {unknown} that are not registered; "
                                         f"registered brokers are {sorted(known)} (start the new broker first)")
        current[(topic, p)] = tuple(parts[p])
    return current


# --- ZooKeeper: the request and each partition's progress ------------------------------------

def pending(client) -> tuple[Plan | None, int]:
    """The pending request (None if none) and its node version (-1 if none)."""
    try:
        data, stat = client.retry(client.get, znodes.REASSIGN_PARTITIONS)
    except NoNodeError:
        return None, -1
    try:
        return znodes.parse_reassignment(data), stat.version
    except ValueError:
        return {}, stat.version


def execute(client, plan: Plan) -> None:
    """Write ``plan`` to ``/admin/reassign_partitions``.

    Raises:
        ReplicationConfigError: a reassignment is pending (nothing written).
    """
    def refuse(found: Plan | None) -> ReplicationConfigError:
        shown = ", ".join(f"{t}-{p}" for t, p in sorted(found or {})[:5]) + (" ..." if len(found or {}) > 5 else "")
        return ReplicationConfigError(
            f"a reassignment is already in progress ({znodes.REASSIGN_PARTITIONS} names {len(found or {})} "
            f"partition(s){': ' + shown if shown else ''}); wait for it (`--verify`) or `--cancel` it; nothing "
            "was written")

    found, _ = pending(client)
    if found is not None:
        raise refuse(found)
    try:
        client.retry(client.create, znodes.REASSIGN_PARTITIONS, znodes.reassignment_value(plan), makepath=True)
    except NodeExistsError:
        raise refuse(pending(client)[0]) from None


def _topic_node(client, topic: str) -> tuple[dict[int, tuple[int, ...]], dict[int, znodes.ReplicaMove]]:
    try:
        data, _ = client.retry(client.get, znodes.topic_dir(topic))
    except NoNodeError:
        return {}, {}
    try:
        return znodes.parse_assignment(data) or {}, znodes.parse_moves(data)
    except (ValueError, UnicodeDecodeError):
        return {}, {}


def progress(client, plan: Plan) -> list[dict]:
    """Per partition of ``plan``: topic, partition, target, replicas (now, with the ones being added), status
    (:data:`COMPLETE`, :data:`IN_PROGRESS`, :data:`FAILED`)."""
    found, _ = pending(client)
    records = []
    nodes: dict[str, tuple] = {}
    for (topic, p), target in sorted(plan.items()):
        assignment, moves = nodes.setdefault(topic, _topic_node(client, topic))
        replicas = tuple(assignment.get(p, ()))
        moving = (found is not None and (topic, p) in found) or p in moves
        status = IN_PROGRESS if moving else COMPLETE if replicas == tuple(target) else FAILED
        records.append({"topic": topic, "partition": p, "target": list(target), "replicas": list(replicas),
                        "status": status})
    return records


def wait(client, plan: Plan, timeout_s: float, clock: Clock = SYSTEM_CLOCK, poll_s: float = 0.2) -> list[dict]:
    """Poll :func:`progress` until no partition of ``plan`` is in progress, or ``timeout_s`` passed."""
    deadline = clock.monotonic() + timeout_s
    while True:
        records = progress(client, plan)
        if all(r["status"] != IN_PROGRESS for r in records) or clock.monotonic() >= deadline:
            return records
        clock.sleep(poll_s)


def cancel(client, plan: Plan) -> Plan:
    """Make each partition of ``plan`` that is being moved go back to its original replicas; returns them.

    Raises:
        ReplicationConfigError: no partition of the plan is being moved (nothing written).
    """
    for _ in range(10):
        found, version = pending(client)
        originals: Plan = {}
        nodes: dict[str, tuple] = {}
        for topic, p in sorted(plan):
            assignment, moves = nodes.setdefault(topic, _topic_node(client, topic))
            if p in assignment and (p in moves or (found is not None and (topic, p) in found)):
                originals[(topic, p)] = original_replicas(tuple(assignment[p]), moves.get(p))
        if not originals:
            raise ReplicationConfigError("no partition of the plan is being reassigned: nothing to cancel "
                                         "(see `--verify`)")
        value = znodes.reassignment_value({**(found or {}), **originals})
        try:
            if found is None:
                client.retry(client.create, znodes.REASSIGN_PARTITIONS, value, makepath=True)
            else:
                client.retry(client.set, znodes.REASSIGN_PARTITIONS, value, version=version)
            return originals
        except (NodeExistsError, NoNodeError, BadVersionError):
            continue   # the controller changed the request meanwhile: read again
    raise ReplicationConfigError(f"{znodes.REASSIGN_PARTITIONS} kept changing; try --cancel again")


# --- output ------------------------------------------------------------------------------------

def format_progress(records: Sequence[dict], out: TextIO) -> None:
    """Kafka's ``--verify`` lines."""
    out.write("Status of partition reassignment:\n")
    for r in records:
        name = f"{r['topic']}-{r['partition']}"
        if r["status"] == COMPLETE:
            out.write(f"Reassignment of partition {name} is complete.\n")
        elif r["status"] == IN_PROGRESS:
            out.write(f"Reassignment of partition {name} is still in progress.\n")
        else:
            out.write(f"Reassignment of partition {name} failed: its replicas are {r['replicas']}, "
                      f"not {r['target']}.\n")


def registered_brokers(client) -> list[int]:
    return sorted(read_brokers(client))
