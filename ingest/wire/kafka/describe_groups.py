"""DescribeGroups (api key 15): a group's state, protocol and members with their metadata and assignment.

Declared from Kafka's DescribeGroupsRequest.json and DescribeGroupsResponse.json, versions 0-6, flexible
from 5. v1 adds the throttle time, v3 the authorized operations, v4 each member's group instance id,
v6 an error message per group.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, BYTES, INT16, INT32, STRING, Array

API_KEY = 15
VERSIONS, FLEXIBLE = "0-6", "5+"
NO_OPERATIONS = -2147483648


@declare
class DescribeGroupsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("groups", Array(STRING)),
        Field("include_authorized_operations", BOOL, versions="3+", default=False),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class DescribedGroupMember(Record):
    SCHEMA = Schema(
        Field("member_id", STRING),
        Field("group_instance_id", STRING, versions="4+", nullable="4+", default=None),
        Field("client_id", STRING, default=""),
        Field("client_host", STRING, default=""),
        Field("member_metadata", BYTES, default=b""),
        Field("member_assignment", BYTES, default=b""))


@declare
class DescribedGroup(Record):
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("error_message", STRING, versions="6+", nullable="6+", default=None),
        Field("group_id", STRING, default=""),
        Field("group_state", STRING, default=""),
        Field("protocol_type", STRING, default=""),
        Field("protocol_data", STRING, default=""),
        Field("members", Array(DescribedGroupMember), default=()),
        Field("authorized_operations", INT32, versions="3+", default=NO_OPERATIONS))


@declare
class DescribeGroupsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("groups", Array(DescribedGroup)),
        versions=VERSIONS, flexible=FLEXIBLE)
