"""LeaveGroup (13): members leave at once (:mod:`ingest.broker.groups.coordinator`).

v0-v2 name one member and get one error; v3+ name a batch, each answered with its own error (the
top-level error is the group's: NOT_COORDINATOR and the like).
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse


def handle(apis, req: LeaveGroupRequest, ctx) -> LeaveGroupResponse:
    if not authorization.group(apis, ctx, authorization.READ, req.group_id):   # Kafka: Read on the group
        return error(req, KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, ctx)
    if ctx.version < 3:
        code, codes = apis.groups.leave(req.group_id, [(req.member_id, None)])
        return LeaveGroupResponse(0, code or codes[0], ())
    members = [(m.member_id, m.group_instance_id) for m in req.members]
    code, codes = apis.groups.leave(req.group_id, members)
    if code:
        return error(req, code, ctx)
    return LeaveGroupResponse(0, 0, tuple(MemberResponse(mid, iid, c) for (mid, iid), c in zip(members, codes)))


def error(req: LeaveGroupRequest, code: int, ctx) -> LeaveGroupResponse:
    return LeaveGroupResponse(0, code, ())
