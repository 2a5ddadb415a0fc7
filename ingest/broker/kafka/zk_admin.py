"""The admin API's work in ZooKeeper: create and delete Kafka topics, add partitions, change topic configs.

What Kafka's ZooKeeper-mode ``AdminManager`` and ``AdminZkClient`` do, on this broker's coordination
thread (:mod:`ingest.broker.coordinated`; never a network thread: a caller there gets
:class:`~ingest.errors.NeedsZooKeeperError` and is served again on that thread), every call bounded by
the request's deadline (:mod:`ingest.broker.zk_deadline`). Every check runs before the first write, so a
refused request changes nothing; ``validate_only`` runs the checks and stops there.

- **create**: the assignment (Kafka's ``(i + j) mod n`` over the live brokers, or the request's, checked)
  as the data of ``/brokers/topics/[topic]`` with ``"format":"kafka"``, and the configs at
  ``/config/topics/[topic]``, in one ZooKeeper transaction; the controller then elects the leaders.
- **delete**: ``/admin/delete_topics/[topic]`` (the controller and every replica's broker do the rest,
  :mod:`ingest.broker.controller`), answered once this broker's own view has seen the mark (Kafka's
  ``DelayedDeleteTopics``): from then on this broker no longer shows clients the topic, and the other
  brokers stop as their watches fire, a moment later.
- **partitions**: the assignment rewritten with the new partitions appended (a conditional write on the
  version read), each new one placed by the same rule or as the request says
  (:mod:`ingest.broker.partition_growth`, shared with ``ingest topics alter``).
- **configs**: ``/config/topics/[topic]`` replaced (AlterConfigs) or changed (IncrementalAlterConfigs),
  conditionally on the version read; every broker holding the topic applies it (a watch).

Errors are Kafka's, with Kafka's wording where it has one: TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION,
POLICY_VIOLATION (this product's one rule: a topic whose ``min.insync.replicas`` exceeds its
replication factor, whose every acks=all write would be refused).

Thread-safety: the coordination thread only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ingest import znodes
from ingest.broker import assignment as rule
from ingest.broker import partition_growth
from ingest.broker import topic_config
from ingest.broker import topic_deletion
from ingest.broker.topic_kind import TopicKind, wrong_kind
from ingest.broker.topics import validate_topic
from ingest.errors import (InvalidConfigError, InvalidPartitionsError, InvalidReplicaAssignmentError,
                           InvalidReplicationFactorError, NeedsZooKeeperError, PolicyViolationError,
                           ReplicationConfigError, RequestTimedOutError, TopicAlreadyExistsError,
                           UnknownTopicError)
from ingest.wire.kafka import incremental_alter_configs as ops

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewTopic:
    """What CreateTopics created (or, validating only, would create)."""

    name: str
    assignment: dict[int, list[int]]
    configs: dict[str, str]

    @property
    def replication_factor(self) -> int:
        return len(next(iter(self.assignment.values())))


class ZkTopicAdmin:
    """See the module docstring.

    Args:
        config: the broker's config (``num.partitions``, ``default.replication.factor``, ``min.insync.replicas``).
        view: the broker's ReplicationView; ``replicas``: its ReplicaManager (ZooKeeper client and bounded calls).
        logs: the LogManager (a name it holds a 0.7 log of is a 0.7 topic).
        coordinated: the coordination thread.
    """

    def __init__(self, config, view, replicas, logs, coordinated) -> None:
        self.config = config
        self.view = view
        self.replicas = replicas
        self.logs = logs
        self.coordinated = coordinated

    # --- reads ---------------------------------------------------------------------------------------

    def require_worker(self, what: str) -> None:
        """Raises NeedsZooKeeperError on any thread but the coordination thread (the request is served again there)."""
        if not self.coordinated.on_worker():
            raise NeedsZooKeeperError(f"{what} needs ZooKeeper")

    def _get(self, path: str, what: str):
        """``(data, stat)`` of ``path`` now, None when it does not exist."""
        try:
            return self.replicas.zk.call(self.coordinated.deadline, self.replicas.client.get_async, path, what=what)
        except NoNodeError:
            return None

    def kafka_assignment(self, topic: str) -> tuple[dict[int, tuple[int, ...]], object]:
        """The assignment and its stat of an existing Kafka topic not marked for deletion.

        Raises:
            InvalidTopicError: a bad name. WrongTopicKindError: a 0.7 topic.
            UnknownTopicError: no such topic, or it is being deleted.
        """
        data, stat = self._kafka_topic_node(topic)
        return znodes.parse_assignment(data), stat

    def _kafka_topic_node(self, topic: str) -> tuple[bytes, object]:
        """``(data, stat)`` of an existing Kafka topic's node, not marked for deletion (raises as
        :meth:`kafka_assignment`)."""
        validate_topic(topic)
        found = self._get(znodes.topic_dir(topic), f"read topic {topic}")
        if found is None:
            if self.logs.topic_kind(topic) is TopicKind.V07:
                raise wrong_kind(topic, TopicKind.V07)
            raise UnknownTopicError(f"This server does not host this topic-partition: topic {topic!r} does not exist")
        data, stat = found
        if znodes.parse_topic_format(data) != znodes.KAFKA_FORMAT:
            raise wrong_kind(topic, TopicKind.V07)
        if self._get(znodes.delete_topic_path(topic), f"is topic {topic} being deleted") is not None:
            raise UnknownTopicError(f"topic {topic!r} is marked for deletion")
        return data, stat

    def topic_configs(self, topic: str) -> tuple[dict[str, str], object | None]:
        """The topic's configs in ZooKeeper now, and the stat of their node (None: no node)."""
        found = self._get(znodes.topic_config_path(topic), f"read the configs of topic {topic}")
        if found is None:
            return {}, None
        return znodes.parse_topic_config(found[0]), found[1]

    # --- checks --------------------------------------------------------------------------------------

    def _check_policy(self, topic: str, replication_factor: int, configs: Mapping[str, str]) -> None:
        min_isr = topic_config.min_insync_replicas(configs, self.config["min.insync.replicas"])
        if min_isr > replication_factor:
            raise PolicyViolationError(
                f"topic {topic!r}: min.insync.replicas={min_isr} exceeds its replication factor "
                f"{replication_factor}, so every acks=all write would be refused; lower min.insync.replicas "
                f"to 1..{replication_factor} or raise the replication factor")

    def _plan(self, topic: str, partitions: int, replication_factor: int,
              manual: Mapping[int, Sequence[int]] | None) -> dict[int, list[int]]:
        live = sorted(self.view.brokers)
        if manual:
            try:
                return rule.check_manual(manual, live)
            except ReplicationConfigError as exc:
                raise InvalidReplicaAssignmentError(f"topic {topic!r}: {exc}") from None
        if partitions == -1:
            partitions = self.logs.configured_partition_count(topic)
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if not 1 <= partitions <= rule.MAX_PARTITIONS:
            raise InvalidPartitionsError(f"Number of partitions was set to an invalid value {partitions}: it must be "
                                         f"1..{rule.MAX_PARTITIONS}")
        if replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"Replication factor must be larger than 0 (or -1 for default.replication.factor); "
                f"got {replication_factor}")
        if replication_factor > len(live):
            raise InvalidReplicationFactorError(
                f"Replication factor: {replication_factor} larger than available brokers: {len(live)} "
                f"(live: {live})")
        return rule.assign(live, partitions, replication_factor)

    # --- create ---------------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int, replication_factor: int,
                     manual: Mapping[int, Sequence[int]] | None, configs: Mapping[str, str | None],
                     validate_only: bool) -> NewTopic:
        """Create (or with ``validate_only`` check) a Kafka topic; see the module docstring.

        Raises:
            InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError, InvalidReplicationFactorError,
            InvalidReplicaAssignmentError, InvalidConfigError, PolicyViolationError, CoordinationUnavailableError.
        """
        self.require_worker(f"creating topic {topic!r}")
        validate_topic(topic)
        if manual and (partitions != -1 or replication_factor != -1):
            raise InvalidReplicaAssignmentError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at "
                "the same time.")
        checked = topic_config.check_all(configs)
        if self._get(znodes.delete_topic_path(topic), f"is topic {topic} being deleted") is not None:
            raise TopicAlreadyExistsError(f"Topic '{topic}' is marked for deletion.")
        if self._get(znodes.topic_dir(topic), f"read topic {topic}") is not None \
                or self.logs.topic_kind(topic) is not None:
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
        plan = self._plan(topic, partitions, replication_factor, manual)
        new = NewTopic(topic, plan, checked)
        self._check_policy(topic, new.replication_factor, checked)
        if validate_only:
            return new
        client, zk, deadline = self.replicas.client, self.replicas.zk, self.coordinated.deadline
        zk.call(deadline, client.ensure_path_async, znodes.CONFIG_TOPICS, what="create /config/topics")
        zk.call(deadline, client.ensure_path_async, znodes.BROKER_TOPICS, what="create /brokers/topics")
        tx = client.transaction()
        tx.create(znodes.topic_config_path(topic), znodes.topic_config_value(checked))
        tx.create(znodes.topic_dir(topic), znodes.assignment_value(plan, znodes.KAFKA_FORMAT))
        results = zk.call(deadline, tx.commit_async, what=f"create topic {topic}")
        if any(isinstance(r, NodeExistsError) for r in results):
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        log.info("created Kafka topic %s: %s, configs %s", topic, plan, checked or "{}")
        return new

    # --- delete ---------------------------------------------------------------------------------------

    def delete_topic(self, topic: str) -> None:
        """Mark a Kafka topic for deletion (a topic already marked: nothing to do); the rules are
        :mod:`ingest.broker.topic_deletion`'s, for Kafka-format topics only (D2).

        Raises:
            InvalidTopicError, WrongTopicKindError, UnknownTopicError, ReassignmentInProgressError,
            CoordinationUnavailableError, RequestTimedOutError (marked, but not seen by this broker's watch
            before the deadline).
        """
        self.require_worker(f"deleting topic {topic!r}")

        def read(path: str):
            found = self._get(path, f"read {path}")
            return None if found is None else found[0]

        def create(path: str):
            return self.replicas.zk.call(self.coordinated.deadline, self.replicas.client.create_async, path, b"",
                                         makepath=True, what=f"delete topic {topic}")

        if topic_deletion.check(topic, read, kinds=(TopicKind.KAFKA,), local_kind=self.logs.topic_kind(topic)) \
                is None:
            return   # marked already: Kafka answers the repeat with success too
        topic_deletion.mark(topic, create)
        # Kafka's ZooKeeper-mode broker answers once its own metadata no longer has the topic
        # (DelayedDeleteTopics): a client that lists topics on this broker next must not see it
        if not self.view.wait_deleting(topic, self.coordinated.deadline - time.monotonic()):
            raise RequestTimedOutError(f"topic {topic!r} is marked for deletion, but this broker did not see the "
                                       f"mark within zk.connectiontimeout.ms; the deletion goes on")

    # --- partitions -----------------------------------------------------------------------------------

    def create_partitions(self, topic: str, count: int, manual: Sequence[Sequence[int]] | None,
                          validate_only: bool) -> dict[int, list[int]]:
        """Grow a Kafka topic to ``count`` partitions (:mod:`ingest.broker.partition_growth`, the checks and
        the node's new data that ``ingest topics alter`` writes too); returns the new partitions' replicas.

        Raises:
            UnknownTopicError, WrongTopicKindError, InvalidPartitionsError, InvalidReplicaAssignmentError,
            InvalidReplicationFactorError, ReassignmentInProgressError, CoordinationUnavailableError.
        """
        self.require_worker(f"adding partitions to topic {topic!r}")
        data, stat = self._kafka_topic_node(topic)
        found = self._get(znodes.REASSIGN_PARTITIONS, "read the pending reassignments")
        growth = partition_growth.plan(topic, data, count, manual, self.view.brokers,
                                       None if found is None else found[0])
        if validate_only:
            return growth.added
        try:
            self.replicas.zk.call(self.coordinated.deadline, self.replicas.client.set_async, znodes.topic_dir(topic),
                                  growth.value, stat.version, what=f"add partitions to topic {topic}")
        except BadVersionError:
            raise InvalidPartitionsError(f"topic {topic!r} changed while its partitions were being added; "
                                         "describe it and retry") from None
        log.info("topic %s: %d -> %d partitions, new %s", topic, growth.before, growth.after, growth.added)
        return growth.added

    # --- configs ---------------------------------------------------------------------------------------

    def alter_configs(self, topic: str, configs: Mapping[str, str | None], validate_only: bool) -> dict[str, str]:
        """AlterConfigs: the topic's configs become exactly ``configs`` (null values are dropped)."""
        return self._write_configs(topic, lambda _old: topic_config.check_all(
            {k: v for k, v in configs.items() if v is not None}), validate_only)

    def incremental_alter_configs(self, topic: str, changes: Sequence[tuple[str, int, str | None]],
                                  validate_only: bool) -> dict[str, str]:
        """IncrementalAlterConfigs: ``(name, operation, value)`` applied in order to the topic's configs."""
        names = [name for name, _op, _v in changes]
        if len(set(names)) != len(names):
            raise InvalidConfigError(f"Error due to duplicate config keys: {sorted({n for n in names if names.count(n) > 1})}")

        def change(old: dict[str, str]) -> dict[str, str]:
            new = dict(old)
            for name, op, value in changes:
                cfg = topic_config.CONFIGS.get(name)
                if cfg is None:
                    topic_config.check(name, value)   # raises: unknown
                if op == ops.SET:
                    new[name] = topic_config.check(name, value)
                elif op == ops.DELETE:
                    new.pop(name, None)
                elif op in (ops.APPEND, ops.SUBTRACT):
                    if cfg.type != topic_config.LIST:
                        raise InvalidConfigError(f"Config value {'append' if op == ops.APPEND else 'subtract'} is "
                                                 f"not allowed for config key: {name}")
                    default = "delete" if cfg.default is None else cfg.default
                    items = [w for w in new.get(name, default).split(",") if w]
                    given = [w.strip() for w in (value or "").split(",") if w.strip()]
                    items = items + [w for w in given if w not in items] if op == ops.APPEND else \
                        [w for w in items if w not in given]
                    if not items and cfg.default != "":
                        raise InvalidConfigError(f"config {name} cannot become empty")
                    if items:
                        new[name] = topic_config.check(name, ",".join(items))
                    else:   # an empty list is the default
                        new.pop(name, None)
                else:
                    raise InvalidConfigError(f"Unknown config operation {op} for {name}: allowed 0 SET, 1 DELETE, "
                                             "2 APPEND, 3 SUBTRACT")
            return new

        return self._write_configs(topic, change, validate_only)

    def _write_configs(self, topic: str, change, validate_only: bool) -> dict[str, str]:
        self.require_worker(f"changing the configs of topic {topic!r}")
        assignment, _stat = self.kafka_assignment(topic)
        old, stat = self.topic_configs(topic)
        new = change(old)
        self._check_policy(topic, len(assignment[0]), new)
        if validate_only or new == old:
            return new
        client, zk, deadline = self.replicas.client, self.replicas.zk, self.coordinated.deadline
        value = znodes.topic_config_value(new)
        try:
            if stat is None:
                zk.call(deadline, client.create_async, znodes.topic_config_path(topic), value, makepath=True,
                        what=f"write the configs of topic {topic}")
            else:
                zk.call(deadline, client.set_async, znodes.topic_config_path(topic), value, stat.version,
                        what=f"write the configs of topic {topic}")
        except (BadVersionError, NodeExistsError):
            raise InvalidConfigError(f"the configs of topic {topic!r} changed while being written; describe them "
                                     "and retry") from None
        log.info("topic %s: configs %s -> %s", topic, old or "{}", new or "{}")
        return new
