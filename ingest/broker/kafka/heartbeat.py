"""Heartbeat (12): a member's session kept (:mod:`ingest.broker.groups.coordinator`)."""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.heartbeat import HeartbeatRequest, HeartbeatResponse


def handle(apis, req: HeartbeatRequest, ctx) -> HeartbeatResponse:
    if not authorization.group(apis, ctx, authorization.READ, req.group_id):   # Kafka: Read on the group
        return error(req, KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, ctx)
    return HeartbeatResponse(0, apis.groups.heartbeat(req.group_id, req.generation_id, req.member_id,
                                                      req.group_instance_id))


def error(req: HeartbeatRequest, code: int, ctx) -> HeartbeatResponse:
    return HeartbeatResponse(0, code)
