"""DescribeAcls (29): the stored ACLs a filter names, grouped by resource pattern (Kafka's ``KafkaApis``).

Needs Describe on the cluster (CLUSTER_AUTHORIZATION_FAILED (31)); without an authorizer it is
SECURITY_DISABLED (54), a bad filter INVALID_REQUEST (42). Read from ZooKeeper on the coordination
thread, so it answers what is stored, whichever broker wrote it.
"""
from __future__ import annotations

from ingest.broker.authorizer import zk_store
from ingest.broker.kafka import acl_codes, authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.acls import AclDescription, DescribeAclsRequest, DescribeAclsResource, DescribeAclsResponse

NO_AUTHORIZER = "no authorizer is configured on this broker (authorizer.class.name)"


def handle(apis, req: DescribeAclsRequest, ctx) -> DescribeAclsResponse:
    zk = acl_codes.zookeeper(apis, "DescribeAcls")
    if zk is None:
        return error(req, KafkaErrorCode.SECURITY_DISABLED, ctx, NO_AUTHORIZER)
    if not authorization.cluster(apis, ctx, authorization.DESCRIBE):
        return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx)
    try:
        selected = acl_codes.acl_filter(req).select(zk_store.read_all(zk))
    except ValueError as exc:
        return error(req, KafkaErrorCode.INVALID_REQUEST, ctx, str(exc))
    grouped: dict[tuple, list] = {}
    for acl in selected:
        rtype, name, pattern, principal, host, op, perm = acl_codes.codes(acl)
        grouped.setdefault((rtype, name, pattern), []).append(AclDescription(principal, host, op, perm))
    return DescribeAclsResponse(0, 0, None, tuple(
        DescribeAclsResource(rtype, name, pattern, tuple(sorted(entries)))
        for (rtype, name, pattern), entries in sorted(grouped.items())))


def error(req: DescribeAclsRequest, code: int, ctx, message: str | None = None) -> DescribeAclsResponse:
    return DescribeAclsResponse(0, code, message, ())
