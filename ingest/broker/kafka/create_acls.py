"""CreateAcls (30): ACLs added to ZooKeeper, one result per creation (Kafka's ``KafkaApis``).

Needs Alter on the cluster (every creation CLUSTER_AUTHORIZATION_FAILED (31)); without an authorizer
SECURITY_DISABLED (54); a creation that is not a valid ACL is INVALID_REQUEST (42) with the reason, the
others are stored. Written on the coordination thread as ``ingest acls add`` writes them; this broker's
cache is reloaded before the answer, the others follow their watches.
"""
from __future__ import annotations

from ingest.broker.authorizer import zk_store
from ingest.broker.kafka import acl_codes, authorization
from ingest.broker.kafka.describe_acls import NO_AUTHORIZER
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.acls import AclCreationResult, CreateAclsRequest, CreateAclsResponse


def handle(apis, req: CreateAclsRequest, ctx) -> CreateAclsResponse:
    zk = acl_codes.zookeeper(apis, "CreateAcls")
    if zk is None:
        return error(req, KafkaErrorCode.SECURITY_DISABLED, ctx, NO_AUTHORIZER)
    if not authorization.cluster(apis, ctx, authorization.ALTER):
        return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx)
    results = []
    for c in req.creations:
        try:
            acl = acl_codes.binding(c)
        except ValueError as exc:
            results.append(AclCreationResult(KafkaErrorCode.INVALID_REQUEST, str(exc)))
            continue
        zk_store.change(zk, acl.resource, add={acl.entry})
        results.append(AclCreationResult(0, None))
    apis.authorizer.cache.reload()
    return CreateAclsResponse(0, tuple(results))


def error(req: CreateAclsRequest, code: int, ctx, message: str | None = None) -> CreateAclsResponse:
    return CreateAclsResponse(0, tuple(AclCreationResult(code, message) for _ in req.creations))
