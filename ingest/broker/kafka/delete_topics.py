"""DeleteTopics (20): Kafka topics marked for deletion; their data goes from every replica.

Served on the coordination thread: the topic is marked (``/admin/delete_topics/[topic]``) and from then
on no client sees it (UNKNOWN_TOPIC_OR_PARTITION); each replica's broker deletes its logs and the
controller removes the topic from ZooKeeper once all have (:mod:`ingest.broker.controller`). The answer
comes once the topic is marked, as KRaft answers once the topic is gone from the metadata; a broker
that is down deletes its copy when it returns. Which topics may be marked is
:mod:`ingest.broker.topic_deletion`'s (shared with ``ingest topics delete``): UNKNOWN_TOPIC_OR_PARTITION
for a topic that does not exist, INVALID_TOPIC_EXCEPTION for a 0.7 topic (the Kafka API does not touch
them; the message names ``ingest topics delete``) and for ``__consumer_offsets``, REASSIGNMENT_IN_PROGRESS
for a topic with partitions being reassigned; a topic already marked is answered with success.
"""
from __future__ import annotations

from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.delete_topics import DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse


def handle(apis, req: DeleteTopicsRequest, ctx) -> DeleteTopicsResponse:
    admin = apis.cluster.admin
    if admin is None:
        return error(req, KafkaErrorCode.INVALID_REQUEST, ctx, ao.NO_ZOOKEEPER)
    admin.require_worker("DeleteTopics")
    twice = ao.duplicates(req.topic_names)
    results = []
    for name in req.topic_names:
        if name in twice:
            results.append(DeletableTopicResult(name, KafkaErrorCode.INVALID_REQUEST, ao.duplicate_message(name)))
            continue
        if not authorization.topic(apis, ctx, authorization.DELETE, name):
            results.append(DeletableTopicResult(name, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
            continue
        code, message, _ = ao.outcome(lambda: admin.delete_topic(name))
        results.append(DeletableTopicResult(name, code, message))
    return DeleteTopicsResponse(0, tuple(results))


def error(req: DeleteTopicsRequest, code: int, ctx, message: str | None = None) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(0, tuple(DeletableTopicResult(n, code, message) for n in req.topic_names))
