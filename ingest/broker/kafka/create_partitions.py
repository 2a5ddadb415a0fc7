"""CreatePartitions (37): more partitions for Kafka topics, placed by Kafka's rule or as the request says.

Served on the coordination thread (:mod:`ingest.broker.kafka.zk_admin`): the topic's assignment gains
the new partitions and the controller elects their leaders. INVALID_PARTITIONS for a count not above
the current one, INVALID_REPLICA_ASSIGNMENT for assignments that do not fit, UNKNOWN_TOPIC_OR_PARTITION
for a topic that does not exist or is being deleted.
"""
from __future__ import annotations

from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.create_partitions import (CreatePartitionsRequest, CreatePartitionsResponse,
                                                 CreatePartitionsTopicResult)


def handle(apis, req: CreatePartitionsRequest, ctx) -> CreatePartitionsResponse:
    admin = apis.cluster.admin
    if admin is None:
        return error(req, KafkaErrorCode.INVALID_REQUEST, ctx, ao.NO_ZOOKEEPER)
    admin.require_worker("CreatePartitions")
    twice = ao.duplicates(t.name for t in req.topics)
    results = []
    for t in req.topics:
        if t.name in twice:
            results.append(CreatePartitionsTopicResult(t.name, KafkaErrorCode.INVALID_REQUEST,
                                                        ao.duplicate_message(t.name)))
            continue
        if not authorization.topic(apis, ctx, authorization.ALTER, t.name):
            results.append(CreatePartitionsTopicResult(t.name, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
            continue
        manual = None if t.assignments is None else [a.broker_ids for a in t.assignments]
        code, message, _ = ao.outcome(lambda: admin.create_partitions(t.name, t.count, manual, req.validate_only))
        results.append(CreatePartitionsTopicResult(t.name, code, message))
    return CreatePartitionsResponse(0, tuple(results))


def error(req: CreatePartitionsRequest, code: int, ctx, message: str | None = None) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(0, tuple(CreatePartitionsTopicResult(t.name, code, message) for t in req.topics))
