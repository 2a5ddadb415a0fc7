"""Marking a topic for deletion: which topics may be deleted, and the mark ``/admin/delete_topics/[topic]``.

The one place both ways in decide and mark: DeleteTopics on the Kafka listener
(:mod:`ingest.broker.kafka.zk_admin`, Kafka-format topics only, docs/kafka-protocol.md D2) and
``ingest topics delete`` (:mod:`ingest.client.topics_delete`, both kinds). Each caller passes its own
ZooKeeper read and create (the broker's are bounded by the request's deadline, the command's retried).
Once marked, the rest is the cluster's (:mod:`ingest.broker.controller`): every replica's broker stops its
replica, deletes its directories and acknowledges; the controller then removes the topic's nodes.

What may be deleted: a topic with an assignment in ZooKeeper, a Kafka-format or a replicated 0.7 one.
Refused, each with a message naming the topic and what is allowed:

- no such topic (UnknownTopicError);
- an unreplicated 0.7 topic (UnreplicatedTopicError, WrongTopicKindError): it has no assignment, only a log on each broker
  that received a message of it, created on first use; no controller knows its replicas, so there is
  nothing to mark. docs/operations.md, "Deleting topics", says how an operator removes its logs;
- an internal topic (``__consumer_offsets``: the groups' committed offsets; Kafka's kafka-topics refuses
  it with the same words);
- a topic with partitions being reassigned (ReassignmentInProgressError, Kafka's REASSIGNMENT_IN_PROGRESS):
  Kafka's controller would hold such a deletion until the moves end; this product refuses it instead, so
  that the operator sees why nothing happens, and lets the moves finish or cancels them first.

A topic already marked is not an error (Kafka answers the repeat with success): the caller is told so.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from kazoo.exceptions import NodeExistsError

from ingest import znodes
from ingest.broker.groups.offsets_topic import OFFSETS_TOPIC
from ingest.broker.reassignment import partitions_being_reassigned
from ingest.broker.topic_kind import TopicKind, wrong_kind
from ingest.broker.topics import validate_topic
from ingest.errors import (InvalidTopicError, ReassignmentInProgressError, UnknownTopicError,
                           UnreplicatedTopicError, WrongTopicKindError)

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
"""Topics no operator deletes: the brokers' own state."""

Read = Callable[[str], "bytes | None"]
"""``read(path)``: the data of a znode, None when it does not exist."""


def unreplicated_message(topic: str, brokers: Iterable[int]) -> str:
    """Why an unreplicated 0.7 topic is not marked, and how an operator removes it instead."""
    held = sorted(brokers)
    where = f"registered by broker(s) {held}" if held else "registered by no live broker now"
    return (f"topic {topic!r} is an unreplicated 0.7 topic ({where}): each broker holds its own log of it, "
            "created by the first message it received, and no assignment in ZooKeeper names them, so there is "
            "nothing to mark for deletion; only topics with an assignment (Kafka-format or replicated 0.7) are "
            "deleted this way. To remove it, stop its producers, then on each broker that holds it stop the "
            "broker, delete log.dir/" + topic + "-* and start it again (docs/operations.md, \"Deleting topics\")")


def check(topic: str, read: Read, *, kinds: Iterable[TopicKind] = (TopicKind.KAFKA, TopicKind.V07),
          local_kind: TopicKind | None = None, unreplicated_brokers: Callable[[], Iterable[int]] = tuple) \
        -> TopicKind | None:
    """The kind of ``topic`` when it may be marked for deletion now, None when it is marked already.

    Args:
        read: reads a znode (see :data:`Read`).
        kinds: the kinds this caller deletes (DeleteTopics: Kafka-format only).
        local_kind: the kind of a log of ``topic`` the caller holds itself (a broker), else None.
        unreplicated_brokers: the brokers that registered an unreplicated topic (for its message).

    Raises:
        InvalidTopicError: a bad name, or an internal topic.
        UnknownTopicError: no such topic.
        WrongTopicKindError: a topic of a kind not in ``kinds``.
        UnreplicatedTopicError: an unreplicated 0.7 topic.
        ReassignmentInProgressError: partitions of it are being reassigned.
    """
    validate_topic(topic)
    kinds = frozenset(kinds)
    if topic in INTERNAL_TOPICS:
        raise InvalidTopicError(f"Topic {topic} is a kafka internal topic and is not allowed to be marked for "
                                "deletion (it holds the consumer groups' committed offsets); allowed are the "
                                "topics producers write")
    if read(znodes.delete_topic_path(topic)) is not None:
        return None
    data = read(znodes.topic_dir(topic))
    assignment = None if data is None else znodes.parse_assignment(data)
    if assignment is None:
        unreplicated = data is not None or local_kind is TopicKind.V07
        if unreplicated and TopicKind.V07 not in kinds:
            raise _not_here(topic, TopicKind.V07)
        if unreplicated:
            raise UnreplicatedTopicError(unreplicated_message(topic, unreplicated_brokers()))
        raise UnknownTopicError(f"This server does not host this topic-partition: topic {topic!r} does not exist")
    kind = TopicKind.KAFKA if znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT else TopicKind.V07
    if kind not in kinds:
        raise _not_here(topic, kind)
    moving = partitions_being_reassigned(topic, data, read(znodes.REASSIGN_PARTITIONS))
    if moving:
        raise ReassignmentInProgressError(
            f"topic {topic!r} has partition(s) {moving} being reassigned: a topic is deleted only when none of "
            "its partitions is moving; wait until `ingest topics reassign --verify` reports them complete, or "
            "`--cancel` the reassignment, then delete it")
    return kind


def _not_here(topic: str, kind: TopicKind) -> WrongTopicKindError:
    exc = wrong_kind(topic, kind)
    if kind is TopicKind.V07:
        return WrongTopicKindError(f"{exc}; a replicated 0.7 topic is deleted with `ingest topics delete "
                                   f"--zookeeper HOST:PORT --topic {topic}`")
    return exc


def mark(topic: str, create: Callable[[str], object]) -> bool:
    """Create ``/admin/delete_topics/[topic]`` with ``create(path)`` (which makes the parents); True if this
    call created it, False if it existed (marked meanwhile, or our own create replayed after a lost answer)."""
    try:
        create(znodes.delete_topic_path(topic))
    except NodeExistsError:
        return False
    log.info("topic %s marked for deletion", topic)
    return True
