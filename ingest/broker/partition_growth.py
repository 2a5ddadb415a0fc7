"""More partitions for an existing replicated topic: the checks and the topic node's new data, pure.

Kafka's ``kafka-topics --alter --partitions N`` and CreatePartitions (its ``AdminZkClient.addPartitions``):
the topic's assignment in ``/brokers/topics/[topic]`` gains partitions ``have .. N-1``, written by one
version-conditional ``set`` of the node (the caller's: the broker's coordination thread for
CreatePartitions, :mod:`ingest.client.topics_alter` for the command line); the controller then elects the
new partitions' leaders and their replicas' brokers create the logs, as for a new topic. Both kinds of
replicated topic (Kafka-format and replicated 0.7) grow the same way; the node keeps its ``format``.

Only growing is allowed: ``N == have`` and ``N < have`` are refused in Kafka's words. The new partitions'
replicas follow the creation rule (:func:`ingest.broker.assignment.assign` over the live brokers: partition
``i`` on brokers ``(i + j) mod n``, continuing the existing partitions' pattern) with the topic's
replication factor (partition 0's), or the operator's assignment of exactly the new partitions. A topic
being reassigned (``adding_replicas`` in its node, or named in ``/admin/reassign_partitions``) is refused,
as Kafka refuses it (REASSIGNMENT_IN_PROGRESS): the controller rewrites the node at each step of a move.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ingest import znodes
from ingest.broker import assignment as rule
from ingest.broker.reassignment import partitions_being_reassigned
from ingest.errors import (InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError,
                           ReassignmentInProgressError, ReplicationConfigError)


@dataclass(frozen=True)
class Growth:
    """What adding partitions to one topic writes: the new partitions' replicas and the node's new data."""

    topic: str
    before: int
    added: dict[int, list[int]]
    value: bytes

    @property
    def after(self) -> int:
        return self.before + len(self.added)


def check_count(count: int, have: int | None = None) -> None:
    """``count`` within 1..10000 and, when ``have`` is known, above it (Kafka's wording).

    Raises:
        InvalidPartitionsError: naming the count, the current one and what is allowed.
    """
    if have is not None and count == have:
        raise InvalidPartitionsError(f"Topic already has {have} partitions.")
    if have is not None and count < have:
        raise InvalidPartitionsError(f"Topic currently has {have} partitions, which is higher than the requested "
                                     f"{count}.")
    if not 1 <= count <= rule.MAX_PARTITIONS:
        raise InvalidPartitionsError(f"Number of partitions {count} is not allowed: it must be "
                                     f"{(have or 0) + 1}..{rule.MAX_PARTITIONS}")


def plan(topic: str, data: bytes, count: int, manual: Sequence[Sequence[int]] | None, live: Iterable[int],
         pending: bytes | None = None) -> Growth:
    """The growth of ``topic`` (whose node holds ``data``) to ``count`` partitions.

    Args:
        manual: the new partitions' replicas, one list per new partition (None: Kafka's rule).
        live: the registered brokers now.
        pending: the data of ``/admin/reassign_partitions`` (None: absent).

    Raises:
        InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError,
        ReassignmentInProgressError; ValueError: ``data`` is not a replicated topic's assignment.
    """
    current = znodes.parse_assignment(data)
    if current is None:
        raise ValueError(f"topic {topic!r} has no replica assignment (an unreplicated 0.7 topic)")
    fmt = znodes.parse_topic_format(data)
    moving = partitions_being_reassigned(topic, data, pending)
    if moving:
        raise ReassignmentInProgressError(
            f"A partition reassignment is in progress for the topic '{topic}' (partition(s) {moving}): add "
            "partitions once `ingest topics reassign --verify` says it is complete")
    have = len(current)
    check_count(count, have)
    rf = len(current[0])
    ids = sorted(set(live))
    if manual is not None:
        if len(manual) != count - have:
            raise InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {count - have} but {len(manual)} assignments provided.")
        added = {have + i: [int(b) for b in r] for i, r in enumerate(manual)}
        for p, replicas in added.items():
            if len(replicas) != rf:
                raise InvalidReplicaAssignmentError(
                    f"Inconsistent replication factor between partitions, partition 0 has {rf} while partition "
                    f"{p} has replicas {replicas}")
        try:
            rule.check_manual({i: r for i, r in enumerate(added.values())}, ids)
        except ReplicationConfigError as exc:
            raise InvalidReplicaAssignmentError(f"topic {topic!r}: {exc}") from None
    else:
        if rf > len(ids):
            raise InvalidReplicationFactorError(
                f"Replication factor: {rf} larger than available brokers: {len(ids)} (live: {ids})")
        whole = rule.assign(ids, count, rf)
        added = {p: whole[p] for p in range(have, count)}
    whole_plan = {**{p: list(r) for p, r in current.items()}, **added}
    return Growth(topic, have, added, znodes.assignment_value(whole_plan, fmt))


def describe(added: Mapping[int, Sequence[int]]) -> str:
    """``2:[1,2] 3:[2,0]``: the new partitions and their replicas."""
    return " ".join(f"{p}:[{','.join(map(str, r))}]" for p, r in sorted(added.items()))
