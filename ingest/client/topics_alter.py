"""``ingest topics alter --topic T --partitions N``: more partitions for an existing replicated topic.

Kafka's ``kafka-topics --alter --partitions``.

A replicated topic (Kafka-format or replicated 0.7) grows as CreatePartitions grows it: the checks and the
topic node's new data are :mod:`ingest.broker.partition_growth`'s, written here by one version-conditional
``set`` of ``/brokers/topics/[topic]``; the controller then elects the new partitions' leaders. Every check
runs before that write, so a refused request leaves ZooKeeper unchanged. Refused: a count not above the
current one, a topic marked for deletion (``/admin/delete_topics/[topic]``) or being reassigned, an
assignment that does not fit.

An unreplicated (0.7, one copy per broker) topic has no assignment to grow: every broker sizes it by its own
``topic.partition.count.map`` entry, else ``num.partitions``, raised by the logs it has on disk (a broker
never shrinks a topic). Growing one is a broker config change and a rolling restart
(docs/operations.md, "Adding partitions"); the command refuses it and says so.

Every ZooKeeper call goes through ``client.retry``; paths come from :mod:`ingest.znodes`.
"""
from __future__ import annotations

import logging

from kazoo.exceptions import BadVersionError, NoNodeError

from ingest import znodes
from ingest.broker import assignment, partition_growth
from ingest.client.discovery import read_brokers, read_topic_partition_counts
from ingest.errors import (InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError,
                           ReassignmentInProgressError, ReplicationConfigError, UnknownTopicError)

log = logging.getLogger(__name__)


def parse_new_assignment(text: str) -> list[list[int]]:
    """``--replica-assignment`` of the new partitions only, in Kafka's syntax (``"1:2,2:0"``: one group per new
    partition, replicas joined by ':').

    Raises:
        ReplicationConfigError: not comma-separated groups of ':'-separated integers.
    """
    parsed = assignment.parse_manual(text)
    return [parsed[i] for i in sorted(parsed)]


def _unreplicated_message(topic: str, per_broker: dict[int, int]) -> str:
    counts = ", ".join(f"broker {b}: {n}" for b, n in sorted(per_broker.items())) or "no live broker registers it"
    return (f"topic {topic!r} is unreplicated (Kafka 0.7, one copy per broker; partitions now: {counts}): each "
            "broker sizes it by its own server.properties, so `topics alter` cannot grow it; set "
            f"topic.partition.count.map={topic}:N in every broker's server.properties and restart the brokers one "
            "at a time (docs/operations.md, \"Adding partitions\"); nothing was written")


def add_partitions(client, topic: str, count: int, manual: list[list[int]] | None = None,
                   validate_only: bool = False) -> partition_growth.Growth:
    """Grow ``topic`` to ``count`` partitions; returns what was (with ``validate_only``: would be) written.

    Raises:
        UnknownTopicError: no such topic.
        ReplicationConfigError: an unreplicated topic, a topic marked for deletion or being reassigned, a count
            not above the current one, an assignment that does not fit, a concurrent change (nothing written).
    """
    path = znodes.topic_dir(topic)
    try:
        data, stat = client.retry(client.get, path)
    except NoNodeError:
        raise UnknownTopicError(f"topic {topic!r} does not exist in ZooKeeper (no {path}); nothing was written") \
            from None
    if client.retry(client.exists, znodes.delete_topic_path(topic)) is not None:
        raise ReplicationConfigError(f"topic {topic!r} is marked for deletion ({znodes.delete_topic_path(topic)} "
                                     "exists): it cannot grow; nothing was written")
    try:
        if znodes.parse_assignment(data) is None:
            raise ReplicationConfigError(_unreplicated_message(topic, read_topic_partition_counts(client, topic)))
    except ValueError as exc:
        raise ReplicationConfigError(f"topic {topic!r}: unreadable assignment {data[:80]!r} ({exc}); nothing was "
                                     "written") from None
    try:
        pending, _ = client.retry(client.get, znodes.REASSIGN_PARTITIONS)
    except NoNodeError:
        pending = None
    live = read_brokers(client)
    try:
        growth = partition_growth.plan(topic, data, count, manual, live, pending)
    except (InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError,
            ReassignmentInProgressError) as exc:
        raise ReplicationConfigError(f"topic {topic!r}: {exc}; nothing was written") from None
    if validate_only:
        return growth
    try:
        client.retry(client.set, path, growth.value, version=stat.version)
    except BadVersionError:
        now, _ = client.retry(client.get, path)
        if now == growth.value:   # our own write, whose answer a connection loss swallowed before kazoo's retry
            return growth
        raise ReplicationConfigError(f"topic {topic!r} changed while its partitions were being added (a "
                                     "reassignment or another alter); describe it and retry; nothing was "
                                     "written") from None
    log.info("topic %s: %d -> %d partitions, new %s", topic, growth.before, growth.after,
             partition_growth.describe(growth.added))
    return growth
