"""Kafka's ACL model: resources, operations, permissions, and the decision of one request.

An ACL (Kafka's ``AclBinding``) is a resource pattern plus an entry::

    pattern: resource type (Topic, Group, Cluster, TransactionalId), name, pattern type
             (LITERAL: the name itself, or "*" for every resource of the type; PREFIXED: every
             name that starts with it)
    entry:   principal ("User:alice", "User:*"), host (an IP address or "*"), operation,
             permission (Allow or Deny)

:func:`decide` is Kafka's ``AclAuthorizer.authorize`` for one (principal, host, operation, resource):
a matching Deny wins over any Allow; an Allow of ``All`` allows every operation; Describe is also
allowed by Read, Write, Delete or Alter, and DescribeConfigs by AlterConfigs; a resource with no ACL
at all is allowed only when ``allow.everyone.if.no.acl.found`` is true. Super users are decided
before (:mod:`ingest.broker.authorizer.authorizer`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable

CLUSTER_NAME = "kafka-cluster"
"""The name of the one Cluster resource (Kafka's)."""
WILDCARD = "*"


class _Named(Enum):
    """An enum whose members are spelled as Kafka spells them in ZooKeeper and on the command line."""

    @classmethod
    def parse(cls, text: str):
        """The member spelled ``text`` in any case, with or without underscores (ValueError otherwise)."""
        key = str(text).replace("_", "").replace("-", "").lower()
        for m in cls:
            if m.value.lower() == key:
                return m
        raise ValueError(f"{text!r} is not a {cls.__name__}: use one of {', '.join(m.value for m in cls)}")


class ResourceType(_Named):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


class PatternType(_Named):
    LITERAL = "Literal"
    PREFIXED = "Prefixed"


class Operation(_Named):
    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class Permission(_Named):
    ALLOW = "Allow"
    DENY = "Deny"


IMPLIED = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""Operations whose Allow also allows the key operation (Kafka's ``AclAuthorizer``)."""

VALID_OPERATIONS = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                                   Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS, Operation.ALL}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.ALL}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                                     Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE, Operation.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE, Operation.ALL}),
}
"""What each resource type's ACLs may name (Kafka's ``AclEntry.supportedOperations``)."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Which resources an ACL covers."""

    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a resource name must not be empty")
        if self.type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise ValueError(f"the cluster resource is named {CLUSTER_NAME!r}, not {self.name!r}")
        if self.pattern is PatternType.PREFIXED and self.name == WILDCARD:
            raise ValueError("a prefixed pattern may not be '*' (use a literal '*' for every resource)")

    def matches(self, name: str) -> bool:
        if self.pattern is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True, slots=True)
class AclEntry:
    """Who may (or may not) do what, from where."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {self.principal!r} is not TYPE:NAME (e.g. User:alice, or User:* for "
                             "every principal)")
        if not self.host:
            raise ValueError("a host must be an address or '*'")

    def to_json(self) -> dict:
        """The entry as Kafka writes it in an ACL znode."""
        return {"principal": self.principal, "permissionType": self.permission.value,
                "operation": self.operation.value, "host": self.host}

    @classmethod
    def from_json(cls, d: dict) -> "AclEntry":
        return cls(str(d["principal"]), str(d["host"]), Operation.parse(d["operation"]),
                   Permission.parse(d["permissionType"]))


@dataclass(frozen=True, slots=True)
class Acl:
    """An ACL binding: a resource pattern and an entry."""

    resource: ResourcePattern
    entry: AclEntry

    def __post_init__(self) -> None:
        allowed = VALID_OPERATIONS[self.resource.type]
        if self.entry.operation not in allowed:
            raise ValueError(f"operation {self.entry.operation.value} does not apply to a "
                             f"{self.resource.type.value}: use one of "
                             f"{', '.join(sorted(o.value for o in allowed))}")

    def describe(self) -> str:
        r, e = self.resource, self.entry
        return (f"{e.principal} has {e.permission.value} permission for operation {e.operation.value} from host "
                f"{e.host} on {r.type.value}:{r.pattern.value.upper()}:{r.name}")


def _principal_matches(acl_principal: str, principal: str) -> bool:
    return acl_principal == principal or acl_principal == "User:*"


def _matching(entries: Iterable[AclEntry], principal: str, host: str, ops: frozenset[Operation],
              permission: Permission) -> bool:
    for e in entries:
        if e.permission is permission and _principal_matches(e.principal, principal) \
                and (e.host == host or e.host == WILDCARD) and (e.operation in ops or e.operation is Operation.ALL):
            return True
    return False


def denied(entries: Iterable[AclEntry], principal: str, host: str, operation: Operation) -> bool:
    """True when a Deny among ``entries`` matches."""
    return _matching(entries, principal, host, frozenset({operation}), Permission.DENY)


def decide(entries: list[AclEntry], principal: str, host: str, operation: Operation,
           allow_if_no_acl: bool) -> bool:
    """Kafka's decision over ``entries``, the ACL entries of every pattern that matches the resource."""
    if not entries:
        return allow_if_no_acl
    if _matching(entries, principal, host, frozenset({operation}), Permission.DENY):
        return False
    return _matching(entries, principal, host, IMPLIED.get(operation, frozenset({operation})), Permission.ALLOW)
