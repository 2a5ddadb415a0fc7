"""SyncGroup (api key 14): the leader hands out the assignment; every member receives its own.

Declared from Kafka's SyncGroupRequest.json and SyncGroupResponse.json, versions 0-5, flexible from 4.
v1 adds the throttle time, v3 the group instance id, v5 the protocol type and name on both sides (the
coordinator checks them against the group's: INCONSISTENT_GROUP_PROTOCOL).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BYTES, INT16, INT32, STRING, Array

API_KEY = 14
VERSIONS, FLEXIBLE = "0-5", "4+"


@declare
class SyncGroupRequestAssignment(Record):
    SCHEMA = Schema(Field("member_id", STRING), Field("assignment", BYTES))


@declare
class SyncGroupRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, versions="3+", nullable="3+", default=None),
        Field("protocol_type", STRING, versions="5+", nullable="5+", default=None),
        Field("protocol_name", STRING, versions="5+", nullable="5+", default=None),
        Field("assignments", Array(SyncGroupRequestAssignment), default=()),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class SyncGroupResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("error_code", INT16),
        Field("protocol_type", STRING, versions="5+", nullable="5+", default=None),
        Field("protocol_name", STRING, versions="5+", nullable="5+", default=None),
        Field("assignment", BYTES),
        versions=VERSIONS, flexible=FLEXIBLE)
