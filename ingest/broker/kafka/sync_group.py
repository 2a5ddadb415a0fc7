"""SyncGroup (14): the leader's assignment in, each member's own out (:mod:`ingest.broker.groups.coordinator`)."""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.broker.kafka.answer import Answer
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.sync_group import SyncGroupRequest, SyncGroupResponse


def handle(apis, req: SyncGroupRequest, ctx):
    if not authorization.group(apis, ctx, authorization.READ, req.group_id):   # Kafka: Read on the group
        return error(req, KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, ctx)
    answer = Answer(ctx)
    coordinator = apis.groups

    def give(code: int, assignment: bytes) -> None:
        ptype = pname = None
        if ctx.version >= 5 and not code:
            ptype, pname = req.protocol_type, req.protocol_name
        answer.give(SyncGroupResponse(0, code, ptype, pname, assignment))

    coordinator.sync(req.group_id, req.generation_id, req.member_id, req.group_instance_id, req.protocol_type,
                     req.protocol_name, {a.member_id: bytes(a.assignment) for a in req.assignments}, give)
    return answer.result()


def error(req: SyncGroupRequest, code: int, ctx) -> SyncGroupResponse:
    return SyncGroupResponse(0, code, None, None, b"")
