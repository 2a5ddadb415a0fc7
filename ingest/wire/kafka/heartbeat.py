"""Heartbeat (api key 12): a member is alive; the answer says whether the group is rebalancing.

Declared from Kafka's HeartbeatRequest.json and HeartbeatResponse.json, versions 0-4, flexible from 4.
v1 adds the throttle time, v3 the group instance id.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import INT16, INT32, STRING

API_KEY = 12
VERSIONS, FLEXIBLE = "0-4", "4+"


@declare
class HeartbeatRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, versions="3+", nullable="3+", default=None),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class HeartbeatResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(Field("throttle_time_ms", INT32, versions="1+"), Field("error_code", INT16),
                    versions=VERSIONS, flexible=FLEXIBLE)
