"""CreateTopics (19): Kafka topics with partitions and replication factor, or manual assignments, and configs.

Served on the coordination thread (:mod:`ingest.broker.kafka.zk_admin` writes ZooKeeper); each topic
is answered alone (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_TOPIC_EXCEPTION, POLICY_VIOLATION, with a message
from v1). -1 partitions or replication factor take ``num.partitions`` / ``default.replication.factor``.
The answer comes once the assignment is written; the controller elects the leaders a moment later, until
when Metadata answers LEADER_NOT_AVAILABLE for the topic (Kafka's ZooKeeper broker waited up to
``timeout_ms`` for that; clients wait for leaders anyway). v5+ answers what was (or would be) created.
"""
from __future__ import annotations

from ingest.broker import topic_config
from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import authorization
from ingest.broker.kafka.describe_configs import SOURCES
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.create_topics import (CreatableTopicConfigs, CreatableTopicResult, CreateTopicsRequest,
                                             CreateTopicsResponse)


def handle(apis, req: CreateTopicsRequest, ctx) -> CreateTopicsResponse:
    admin = apis.cluster.admin
    if admin is None:
        return error(req, KafkaErrorCode.INVALID_REQUEST, ctx, ao.NO_ZOOKEEPER)
    admin.require_worker("CreateTopics")
    twice = ao.duplicates(t.name for t in req.topics)
    results = []
    for t in req.topics:
        if t.name in twice:
            results.append(CreatableTopicResult(t.name, KafkaErrorCode.INVALID_REQUEST, ao.duplicate_message(t.name)))
            continue
        if not authorization.create_topic(apis, ctx, t.name):   # Create on the cluster or the topic
            results.append(CreatableTopicResult(t.name, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
            continue
        manual = {a.partition_index: a.broker_ids for a in t.assignments} or None
        configs = {c.name: c.value for c in t.configs}
        code, message, new = ao.outcome(lambda: admin.create_topic(t.name, t.num_partitions, t.replication_factor,
                                                                   manual, configs, req.validate_only))
        if code:
            results.append(CreatableTopicResult(t.name, code, message))
            continue
        described = tuple(CreatableTopicConfigs(d.name, d.value, False, SOURCES[d.source], False)
                          for d in topic_config.describe(apis.config, t.name, new.configs))
        results.append(CreatableTopicResult(t.name, 0, None, 0, len(new.assignment), new.replication_factor,
                                            described))
    return CreateTopicsResponse(0, tuple(results))


def error(req: CreateTopicsRequest, code: int, ctx, message: str | None = None) -> CreateTopicsResponse:
    return CreateTopicsResponse(0, tuple(CreatableTopicResult(t.name, code, message) for t in req.topics))
