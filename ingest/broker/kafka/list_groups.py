"""ListGroups (16): the groups this broker coordinates now (with members or committed offsets).

As Kafka, each broker lists only its own groups: a client asks every broker (``ingest groups list``
does). v4+ filter by state, v5+ by type (every group here is ``classic``). With an authorizer, Describe
on the cluster lists every group, otherwise only the groups the principal may Describe (Kafka's).
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.wire.kafka.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse

CLASSIC = "classic"


def handle(apis, req: ListGroupsRequest, ctx) -> ListGroupsResponse:
    states = {s.lower() for s in req.states_filter}
    types = {t.lower() for t in req.types_filter}
    if types and CLASSIC not in types:
        return ListGroupsResponse(0, 0, ())
    out = []
    every = authorization.cluster(apis, ctx, authorization.DESCRIBE, audit=False)
    for g in apis.groups.coordinated():
        if states and g.state.lower() not in states:
            continue
        if not every and not authorization.group(apis, ctx, authorization.DESCRIBE, g.group_id, audit=False):
            continue
        out.append(ListedGroup(g.group_id, g.protocol_type or "", g.state, CLASSIC))
    return ListGroupsResponse(0, 0, tuple(out))


def error(req: ListGroupsRequest, code: int, ctx) -> ListGroupsResponse:
    return ListGroupsResponse(0, code, ())
