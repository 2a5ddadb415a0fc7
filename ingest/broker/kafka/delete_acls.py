"""DeleteAcls (31): the stored ACLs each filter names removed, and listed in its result (Kafka's ``KafkaApis``).

Needs Alter on the cluster (every filter CLUSTER_AUTHORIZATION_FAILED (31)); without an authorizer
SECURITY_DISABLED (54); a bad filter is INVALID_REQUEST (42), the others are served. Removed on the
coordination thread; this broker's cache is reloaded before the answer, the others follow their watches.
"""
from __future__ import annotations

from ingest.broker.authorizer import zk_store
from ingest.broker.kafka import acl_codes, authorization
from ingest.broker.kafka.describe_acls import NO_AUTHORIZER
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.acls import DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsRequest, DeleteAclsResponse


def handle(apis, req: DeleteAclsRequest, ctx) -> DeleteAclsResponse:
    zk = acl_codes.zookeeper(apis, "DeleteAcls")
    if zk is None:
        return error(req, KafkaErrorCode.SECURITY_DISABLED, ctx, NO_AUTHORIZER)
    if not authorization.cluster(apis, ctx, authorization.ALTER):
        return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx)
    results = []
    for f in req.filters:
        try:
            selected = acl_codes.acl_filter(f).select(zk_store.read_all(zk))
        except ValueError as exc:
            results.append(DeleteAclsFilterResult(KafkaErrorCode.INVALID_REQUEST, str(exc)))
            continue
        by_pattern: dict = {}
        for acl in selected:
            by_pattern.setdefault(acl.resource, set()).add(acl.entry)
        for pattern, entries in by_pattern.items():
            zk_store.change(zk, pattern, remove=entries)
        results.append(DeleteAclsFilterResult(0, None, tuple(
            DeleteAclsMatchingAcl(0, None, *acl_codes.codes(acl)) for acl in selected)))
    apis.authorizer.cache.reload()
    return DeleteAclsResponse(0, tuple(results))


def error(req: DeleteAclsRequest, code: int, ctx, message: str | None = None) -> DeleteAclsResponse:
    return DeleteAclsResponse(0, tuple(DeleteAclsFilterResult(code, message) for _ in req.filters))
