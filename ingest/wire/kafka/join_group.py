"""JoinGroup (api key 11): a member joins a consumer group (or rejoins it in a rebalance).

Declared from Kafka's JoinGroupRequest.json and JoinGroupResponse.json, versions 0-9, flexible from 6.
v1 adds the rebalance timeout, v2 the throttle time, v4 nothing to the layout (a new member is answered
MEMBER_ID_REQUIRED with its id, KIP-394), v5 the group instance id (static membership, KIP-345), v7 the
protocol type in the response, v8 the reason for joining, v9 ``skip_assignment`` (KIP-814).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, BYTES, INT16, INT32, STRING, Array

API_KEY = 11
VERSIONS, FLEXIBLE = "0-9", "6+"


@declare
class JoinGroupRequestProtocol(Record):
    SCHEMA = Schema(Field("name", STRING), Field("metadata", BYTES))


@declare
class JoinGroupRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("group_id", STRING),
        Field("session_timeout_ms", INT32),
        Field("rebalance_timeout_ms", INT32, versions="1+", default=-1),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, versions="5+", nullable="5+", default=None),
        Field("protocol_type", STRING),
        Field("protocols", Array(JoinGroupRequestProtocol)),
        Field("reason", STRING, versions="8+", nullable="8+", default=None),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class JoinGroupResponseMember(Record):
    SCHEMA = Schema(Field("member_id", STRING),
                    Field("group_instance_id", STRING, versions="5+", nullable="5+", default=None),
                    Field("metadata", BYTES, default=b""))


@declare
class JoinGroupResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="2+"),
        Field("error_code", INT16),
        Field("generation_id", INT32, default=-1),
        Field("protocol_type", STRING, versions="7+", nullable="7+", default=None),
        Field("protocol_name", STRING, nullable="7+", default=""),
        Field("leader", STRING),
        Field("skip_assignment", BOOL, versions="9+", default=False),
        Field("member_id", STRING),
        Field("members", Array(JoinGroupResponseMember), default=()),
        versions=VERSIONS, flexible=FLEXIBLE)
