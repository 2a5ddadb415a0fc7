"""JoinGroup (11): a member joins a group; answered when the join phase ends (:mod:`ingest.broker.groups.coordinator`)."""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.broker.kafka.answer import Answer
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.join_group import JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember


def handle(apis, req: JoinGroupRequest, ctx):
    if not authorization.group(apis, ctx, authorization.READ, req.group_id):   # Kafka: Read on the group
        return error(req, KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, ctx)
    answer = Answer(ctx)
    version = ctx.version

    def give(r) -> None:
        members = tuple(JoinGroupResponseMember(mid, iid, meta) for mid, iid, meta in r.members)
        name = r.protocol_name if r.protocol_name is not None or version >= 7 else ""
        answer.give(JoinGroupResponse(0, r.error, r.generation, r.protocol_type, name, r.leader,
                                      False, r.member_id, members))

    apis.groups.join(req.group_id, req.member_id, req.group_instance_id, req.session_timeout_ms,
                     req.rebalance_timeout_ms, req.protocol_type, tuple((p.name, bytes(p.metadata)) for p in req.protocols),
                     ctx.client_id or "", "/" + ctx.client.rsplit(":", 1)[0], version, give)
    return answer.result()


def error(req: JoinGroupRequest, code: int, ctx) -> JoinGroupResponse:
    return JoinGroupResponse(0, code, -1, None, "" if ctx.version < 7 else None, "", False, req.member_id, ())
