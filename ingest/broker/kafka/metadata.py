"""Metadata (3): the live brokers with this listener's endpoints, the controller, and the Kafka topics.

Only Kafka-format topics are listed; a request naming a 0.7 topic gets INVALID_TOPIC_EXCEPTION (17)
for it, so that no Kafka client auto-creates a topic over it (D2). A request naming an unknown topic
creates it as a Kafka topic when both the request allows it (v4+; always before v4) and
``auto.create.topics.enable`` is true: without ZooKeeper its logs are created here and it is answered
at once; with ZooKeeper its assignment is written (on the coordination thread) and it is answered
LEADER_NOT_AVAILABLE (5) until the controller has elected its leaders, as Kafka answers. Otherwise an
unknown topic is UNKNOWN_TOPIC_OR_PARTITION (3). ``__consumer_offsets`` is listed as internal (v1+), so that
consumers leave it out of pattern subscriptions. v0's empty topic list means all topics; from v1 a null
list means all and an empty one none.

With an authorizer, as Kafka's: a request for all topics lists only those the principal may Describe; a
named topic it may not Describe is TOPIC_AUTHORIZATION_FAILED (29), and so is an unknown topic it may
not create (Create on the cluster or the topic) when the request would auto-create it.
"""
from __future__ import annotations

from ingest.broker.groups.offsets_topic import OFFSETS_TOPIC
from ingest.broker.kafka import authorization
from ingest.errors import IngestError, NeedsZooKeeperError
from ingest.wire.errors import KafkaErrorCode, kafka_code
from ingest.wire.kafka.metadata import (MetadataRequest, MetadataResponse, MetadataResponseBroker,
                                        MetadataResponsePartition, MetadataResponseTopic)


def handle(apis, req: MetadataRequest, ctx) -> MetadataResponse:
    cluster = apis.cluster
    everything = req.topics is None or (ctx.version == 0 and not req.topics)
    create = req.allow_auto_topic_creation and apis.config.get("auto.create.topics.enable", True)
    if everything:
        topics = [_topic(cluster, name, False) for name in cluster.topic_names()
                  if authorization.topic(apis, ctx, authorization.DESCRIBE, name, audit=False)]
    else:
        topics = [_named(apis, ctx, t.name, create) for t in req.topics]
    brokers = tuple(MetadataResponseBroker(b.node_id, b.host, b.port, b.rack) for b in cluster.brokers(ctx.listener))
    return MetadataResponse(0, brokers, cluster.cluster_id, cluster.controller_id(), tuple(topics))


def _named(apis, ctx, name: str, create: bool) -> MetadataResponseTopic:
    if not authorization.topic(apis, ctx, authorization.DESCRIBE, name):
        return MetadataResponseTopic(KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
    if not (create and authorization.enabled(apis)):
        return _topic(apis.cluster, name, create)
    known = _topic(apis.cluster, name, False)
    if known.error_code != KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return known
    if not authorization.create_topic(apis, ctx, name):
        return MetadataResponseTopic(KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
    return _topic(apis.cluster, name, True)


def _topic(cluster, name: str, create: bool) -> MetadataResponseTopic:
    try:
        parts = cluster.describe(name)
        if parts is None and create:
            if not cluster.create_topic(name):
                return MetadataResponseTopic(KafkaErrorCode.LEADER_NOT_AVAILABLE, name)
            parts = cluster.describe(name)
        if parts is None:
            return MetadataResponseTopic(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
    except NeedsZooKeeperError:
        raise   # before anything was done: served again on the coordination thread
    except IngestError as exc:
        return MetadataResponseTopic(kafka_code(exc), name)
    return MetadataResponseTopic(0, name, name == OFFSETS_TOPIC, tuple(
        MetadataResponsePartition(p.error, p.index, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline)
        for p in parts))


def error(req: MetadataRequest, code: int, ctx) -> MetadataResponse:
    return MetadataResponse(0, (), None, -1, tuple(MetadataResponseTopic(code, t.name) for t in req.topics or ()))
