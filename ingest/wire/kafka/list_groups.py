"""ListGroups (api key 16): the groups a broker coordinates.

Declared from Kafka's ListGroupsRequest.json and ListGroupsResponse.json, versions 0-5, flexible from 3.
v1 adds the throttle time, v4 a filter by state and the state of each group (KIP-518), v5 a filter by
type and the type of each group (KIP-848: ``classic`` here).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT16, INT32, STRING, Array

API_KEY = 16
VERSIONS, FLEXIBLE = "0-5", "3+"


@declare
class ListGroupsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("states_filter", Array(STRING), versions="4+", default=()),
        Field("types_filter", Array(STRING), versions="5+", default=()),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class ListedGroup(Record):
    SCHEMA = Schema(Field("group_id", STRING), Field("protocol_type", STRING),
                    Field("group_state", STRING, versions="4+", default=""),
                    Field("group_type", STRING, versions="5+", default=""))


@declare
class ListGroupsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("error_code", INT16),
        Field("groups", Array(ListedGroup), default=()),
        versions=VERSIONS, flexible=FLEXIBLE)
