"""Heartbeat (12): a member's session kept (:mod:`ingest.broker.groups.coordinator`)."""
from __future__ import annotations

from ingest.wire.kafka.heartbeat import HeartbeatRequest, HeartbeatResponse


def handle(apis, req: HeartbeatRequest, ctx) -> HeartbeatResponse:
    return HeartbeatResponse(0, apis.groups.heartbeat(req.group_id, req.generation_id, req.member_id,
                                                      req.group_instance_id))


def error(req: HeartbeatRequest, code: int, ctx) -> HeartbeatResponse:
    return HeartbeatResponse(0, code)
