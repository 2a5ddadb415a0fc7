"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): ACLs managed by AdminClients (KIP-140, KIP-290).

Declared from Kafka's DescribeAclsRequest/Response.json, CreateAclsRequest/Response.json and
DeleteAclsRequest/Response.json, versions 0-3, flexible from v2. v1 adds the pattern type (KIP-290:
literal or prefixed; before it every pattern is literal). Resource types, pattern types, operations and
permissions travel as int8 codes: :data:`RESOURCE_TYPES`, :data:`PATTERN_TYPES`, :data:`OPERATIONS`,
:data:`PERMISSIONS` (Kafka's ``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT8, INT16, INT32, STRING, Array

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
VERSIONS, FLEXIBLE = "0-3", "2+"

UNKNOWN, ANY = 0, 1
RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
"""code -> resource type (0 unknown, 1 any in a filter; 6 DelegationToken and 7 User are not served)."""
MATCH, LITERAL, PREFIXED = 2, 3, 4
PATTERN_TYPES = {LITERAL: "Literal", PREFIXED: "Prefixed"}
"""code -> pattern type (1 any and 2 match in a filter)."""
OPERATIONS = {2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter", 8: "Describe",
              9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs", 12: "IdempotentWrite"}
"""code -> operation (1 any in a filter)."""
PERMISSIONS = {2: "Deny", 3: "Allow"}
"""code -> permission (1 any in a filter)."""


@declare
class DescribeAclsRequest(KafkaRequest):
    API_KEY = DESCRIBE_ACLS
    SCHEMA = Schema(
        Field("resource_type_filter", INT8),
        Field("resource_name_filter", STRING, nullable=True),
        Field("pattern_type_filter", INT8, versions="1+", default=LITERAL),
        Field("principal_filter", STRING, nullable=True),
        Field("host_filter", STRING, nullable=True),
        Field("operation", INT8),
        Field("permission_type", INT8),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class AclDescription(Record):
    SCHEMA = Schema(
        Field("principal", STRING),
        Field("host", STRING),
        Field("operation", INT8),
        Field("permission_type", INT8))


@declare
class DescribeAclsResource(Record):
    SCHEMA = Schema(
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("pattern_type", INT8, versions="1+", default=LITERAL),
        Field("acls", Array(AclDescription), default=()))


@declare
class DescribeAclsResponse(KafkaResponse):
    API_KEY = DESCRIBE_ACLS
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable=True),
        Field("resources", Array(DescribeAclsResource)),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class AclCreation(Record):
    SCHEMA = Schema(
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("resource_pattern_type", INT8, versions="1+", default=LITERAL),
        Field("principal", STRING, default=""),
        Field("host", STRING, default="*"),
        Field("operation", INT8, default=UNKNOWN),
        Field("permission_type", INT8, default=UNKNOWN))


@declare
class CreateAclsRequest(KafkaRequest):
    API_KEY = CREATE_ACLS
    SCHEMA = Schema(Field("creations", Array(AclCreation)), versions=VERSIONS, flexible=FLEXIBLE)


@declare
class AclCreationResult(Record):
    SCHEMA = Schema(Field("error_code", INT16), Field("error_message", STRING, nullable=True, default=None))


@declare
class CreateAclsResponse(KafkaResponse):
    API_KEY = CREATE_ACLS
    SCHEMA = Schema(Field("throttle_time_ms", INT32), Field("results", Array(AclCreationResult)),
                    versions=VERSIONS, flexible=FLEXIBLE)


@declare
class DeleteAclsFilter(Record):
    SCHEMA = Schema(
        Field("resource_type_filter", INT8),
        Field("resource_name_filter", STRING, nullable=True),
        Field("pattern_type_filter", INT8, versions="1+", default=LITERAL),
        Field("principal_filter", STRING, nullable=True, default=None),
        Field("host_filter", STRING, nullable=True, default=None),
        Field("operation", INT8, default=ANY),
        Field("permission_type", INT8, default=ANY))


@declare
class DeleteAclsRequest(KafkaRequest):
    API_KEY = DELETE_ACLS
    SCHEMA = Schema(Field("filters", Array(DeleteAclsFilter)), versions=VERSIONS, flexible=FLEXIBLE)


@declare
class DeleteAclsMatchingAcl(Record):
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("error_message", STRING, nullable=True),
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("pattern_type", INT8, versions="1+", default=LITERAL),
        Field("principal", STRING, default=""),
        Field("host", STRING, default="*"),
        Field("operation", INT8, default=UNKNOWN),
        Field("permission_type", INT8, default=UNKNOWN))


@declare
class DeleteAclsFilterResult(Record):
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("error_message", STRING, nullable=True, default=None),
        Field("matching_acls", Array(DeleteAclsMatchingAcl), default=()))


@declare
class DeleteAclsResponse(KafkaResponse):
    API_KEY = DELETE_ACLS
    SCHEMA = Schema(Field("throttle_time_ms", INT32), Field("filter_results", Array(DeleteAclsFilterResult)),
                    versions=VERSIONS, flexible=FLEXIBLE)
