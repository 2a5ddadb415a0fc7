"""DescribeGroups (15): each group's state, protocol and members (metadata and assignment once Stable).

A group this broker does not coordinate is answered NOT_COORDINATOR; one it coordinates but does not
know is answered state ``Dead`` with no error, as Kafka answers it. With an authorizer, a group the
principal may not Describe is GROUP_AUTHORIZATION_FAILED (30), as Kafka's.
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.errors import GroupRequestError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.describe_groups import (DescribedGroup, DescribedGroupMember, DescribeGroupsRequest,
                                               DescribeGroupsResponse)


def handle(apis, req: DescribeGroupsRequest, ctx) -> DescribeGroupsResponse:
    out = []
    for gid in req.groups:
        if not authorization.group(apis, ctx, authorization.DESCRIBE, gid):
            out.append(DescribedGroup(KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, None, gid))
            continue
        try:
            found = apis.groups.describe(gid)
        except GroupRequestError as exc:
            out.append(DescribedGroup(exc.code, str(exc), gid))
            continue
        if found is None:
            out.append(DescribedGroup(0, None, gid, "Dead"))
            continue
        state, ptype, pname, members = found
        out.append(DescribedGroup(0, None, gid, state, ptype, pname, tuple(
            DescribedGroupMember(mid, iid, cid, host, meta, assignment)
            for mid, iid, cid, host, meta, assignment in members)))
    return DescribeGroupsResponse(0, tuple(out))


def error(req: DescribeGroupsRequest, code: int, ctx) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(0, tuple(DescribedGroup(code, None, g) for g in req.groups))
