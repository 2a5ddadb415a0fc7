"""ACL filters (Kafka's ``AclBindingFilter``): which stored ACLs a DescribeAcls or DeleteAcls names.

A filter has a value or "any" for each part: resource type, name (None: any), pattern type (``any``: the
exact name in either pattern type; ``match``: every pattern that applies to the named resource, i.e. its
literal name, the literal "*" and each prefix of it; ``literal`` / ``prefixed``: that pattern exactly),
principal, host (None: any), operation and permission (None: any).
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.broker.authorizer.acl import (WILDCARD, Acl, AclEntry, Operation, PatternType, Permission,
                                          ResourcePattern, ResourceType)

ANY, MATCH = "any", "match"


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: ResourceType | None
    name: str | None
    pattern_type: PatternType | str      # a PatternType, ANY or MATCH
    principal: str | None
    host: str | None
    operation: Operation | None
    permission: Permission | None

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type is not None and p.type is not self.resource_type:
            return False
        if self.pattern_type == MATCH:
            if self.name is None:
                return True
            if p.pattern is PatternType.PREFIXED:
                return self.name.startswith(p.name)
            return p.name == self.name or p.name == WILDCARD
        if isinstance(self.pattern_type, PatternType) and p.pattern is not self.pattern_type:
            return False
        return self.name is None or p.name == self.name

    def matches_entry(self, e: AclEntry) -> bool:
        return (self.principal is None or e.principal == self.principal) \
            and (self.host is None or e.host == self.host) \
            and (self.operation is None or e.operation is self.operation) \
            and (self.permission is None or e.permission is self.permission)

    def select(self, stored: dict[ResourcePattern, frozenset[AclEntry]]) -> list[Acl]:
        """The stored ACLs this filter names."""
        return [Acl(p, e) for p, entries in stored.items() if self.matches_pattern(p)
                for e in entries if self.matches_entry(e)]
