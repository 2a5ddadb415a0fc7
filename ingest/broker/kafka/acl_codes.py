"""The ACL APIs' int8 codes (:mod:`ingest.wire.kafka.acls`) to the ACL model and back, and their common
checks: an authorizer must be configured (SECURITY_DISABLED (54) otherwise, as Kafka), and the request is
served on the coordination thread (it reads or writes ZooKeeper)."""
from __future__ import annotations

from ingest.broker.authorizer.acl import (Acl, AclEntry, Operation, PatternType, Permission, ResourcePattern,
                                          ResourceType)
from ingest.broker.authorizer.acl_filter import ANY, MATCH, AclFilter
from ingest.wire.kafka import acls as w

_TYPE_CODE = {ResourceType.parse(v): k for k, v in w.RESOURCE_TYPES.items()}
_PATTERN_CODE = {PatternType.parse(v): k for k, v in w.PATTERN_TYPES.items()}
_OP_CODE = {Operation.parse(v): k for k, v in w.OPERATIONS.items()}
_PERM_CODE = {Permission.parse(v): k for k, v in w.PERMISSIONS.items()}


def codes(acl: Acl) -> tuple[int, str, int, str, str, int, int]:
    """(resource type, name, pattern type, principal, host, operation, permission) as the wire carries them."""
    r, e = acl.resource, acl.entry
    return (_TYPE_CODE[r.type], r.name, _PATTERN_CODE[r.pattern], e.principal, e.host, _OP_CODE[e.operation],
            _PERM_CODE[e.permission])


def _one(table: dict, code: int, what: str):
    if code not in table:
        raise ValueError(f"{what} code {code} is not one this broker serves: use one of "
                                  f"{', '.join(f'{k} ({v})' for k, v in sorted(table.items()))}")
    return table[code]


def binding(c) -> Acl:
    """An AclCreation as an ACL (ValueError naming what is wrong)."""
    pattern = ResourcePattern(ResourceType.parse(_one(w.RESOURCE_TYPES, c.resource_type, "resource type")),
                              c.resource_name,
                              PatternType.parse(_one(w.PATTERN_TYPES, c.resource_pattern_type, "pattern type")))
    entry = AclEntry(c.principal, c.host, Operation.parse(_one(w.OPERATIONS, c.operation, "operation")),
                     Permission.parse(_one(w.PERMISSIONS, c.permission_type, "permission type")))
    return Acl(pattern, entry)


def acl_filter(f) -> AclFilter:
    """A DescribeAcls request or a DeleteAclsFilter as a filter (ValueError naming what is wrong)."""
    def any_or(table, code, what, kind):
        return None if code == w.ANY else kind.parse(_one(table, code, what))

    if f.pattern_type_filter == w.ANY:
        pattern = ANY
    elif f.pattern_type_filter == w.MATCH:
        pattern = MATCH
    else:
        pattern = PatternType.parse(_one(w.PATTERN_TYPES, f.pattern_type_filter, "pattern type"))
    return AclFilter(any_or(w.RESOURCE_TYPES, f.resource_type_filter, "resource type", ResourceType),
                     f.resource_name_filter, pattern, f.principal_filter, f.host_filter,
                     any_or(w.OPERATIONS, f.operation, "operation", Operation),
                     any_or(w.PERMISSIONS, f.permission_type, "permission type", Permission))


def zookeeper(apis, what: str):
    """The authorizer's ZooKeeper client, on the coordination thread (None: no authorizer)."""
    if apis.authorizer is None:
        return None
    apis.cluster.admin.require_worker(what)
    return apis.authorizer.cache.client
