"""LeaveGroup (api key 13): members leave a group (the group rebalances without waiting for their session).

Declared from Kafka's LeaveGroupRequest.json and LeaveGroupResponse.json, versions 0-5, flexible from 4.
v0-v2 name one member; v3 a batch of members with their group instance ids (KIP-345), each answered with
its own error; v1 adds the throttle time, v5 a reason per member.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT16, INT32, STRING, Array

API_KEY = 13
VERSIONS, FLEXIBLE = "0-5", "4+"


@declare
class MemberIdentity(Record):
    SCHEMA = Schema(Field("member_id", STRING),
                    Field("group_instance_id", STRING, nullable=True, default=None),
                    Field("reason", STRING, versions="5+", nullable="5+", default=None))


@declare
class LeaveGroupRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("group_id", STRING),
        Field("member_id", STRING, versions="0-2", default=""),
        Field("members", Array(MemberIdentity), versions="3+", default=()),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class MemberResponse(Record):
    SCHEMA = Schema(Field("member_id", STRING), Field("group_instance_id", STRING, nullable=True, default=None),
                    Field("error_code", INT16, default=0))


@declare
class LeaveGroupResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("error_code", INT16),
        Field("members", Array(MemberResponse), versions="3+", default=()),
        versions=VERSIONS, flexible=FLEXIBLE)
