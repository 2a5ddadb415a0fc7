"""InitProducerId (22): a producer id and epoch for an idempotent producer, no transactions.

Every answer names a producer id no other answer of the cluster named, before or after any broker's
restart (:mod:`ingest.broker.kafka.producer_ids`: blocks from ZooKeeper, or one broker's own clock), with
epoch 0: as Kafka answers a producer without ``transactional_id``, a new id each time (a producer that
asks again after an error gets a fresh id and starts its sequences at 0). The partitions' leaders then
check each id's sequences (:mod:`ingest.broker.producer_state`; docs/kafka-protocol.md, "Idempotent
producers"). A ``transactional_id`` is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): there is no
transaction coordinator.
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.init_producer_id import InitProducerIdRequest, InitProducerIdResponse


def handle(apis, req: InitProducerIdRequest, ctx) -> InitProducerIdResponse:
    if req.transactional_id is not None:
        apis.refusals.warning(ctx.client, "InitProducerId transactional",
                              "client %s: InitProducerId for transactional id %r refused: this broker has no "
                              "transaction coordinator", ctx.client, req.transactional_id)
        return error(req, KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ctx)
    # Kafka: IdempotentWrite on the cluster, or Write on some topic (KIP-679)
    if not (authorization.cluster(apis, ctx, authorization.IDEMPOTENT_WRITE, audit=False)
            or authorization.any_topic(apis, ctx, authorization.WRITE)):
        apis.authorizer.cluster(ctx.principal, ctx.host, authorization.IDEMPOTENT_WRITE, "InitProducerId")
        return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx)
    return InitProducerIdResponse(0, 0, apis.producer_ids.next(), 0)


def error(req: InitProducerIdRequest, code: int, ctx) -> InitProducerIdResponse:
    return InitProducerIdResponse(0, code, -1, -1)
