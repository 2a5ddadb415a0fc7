"""OffsetFetch (api key 9): a group's committed positions, per partition (-1: none committed).

Declared from Kafka's OffsetFetchRequest.json and OffsetFetchResponse.json, versions 0-9, flexible from
6 (v10 names topics by id, not declared). v2 makes the topic list nullable (null: every partition the
group committed) and adds a top-level error code, v3 the throttle time, v5 the committed leader epoch, v7
``require_stable`` (transactions; nothing is pending here), v8 several groups in one request (KIP-709),
v9 the member id and epoch of the new consumer protocol (KIP-848; ignored by a classic group).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT16, INT32, INT64, STRING, Array

API_KEY = 9
VERSIONS, FLEXIBLE = "0-9", "6+"
NO_OFFSET = -1


@declare
class OffsetFetchRequestTopic(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partition_indexes", Array(INT32)))


@declare
class OffsetFetchRequestGroup(Record):
    SCHEMA = Schema(
        Field("group_id", STRING),
        Field("member_id", STRING, versions="9+", nullable="9+", default=None),
        Field("member_epoch", INT32, versions="9+", default=-1),
        Field("topics", Array(OffsetFetchRequestTopic), nullable=True, default=None))


@declare
class OffsetFetchRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("group_id", STRING, versions="0-7", default=""),
        Field("topics", Array(OffsetFetchRequestTopic), versions="0-7", nullable="2-7", default=()),
        Field("groups", Array(OffsetFetchRequestGroup), versions="8+", default=()),
        Field("require_stable", BOOL, versions="7+", default=False),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class OffsetFetchResponsePartition(Record):
    SCHEMA = Schema(
        Field("partition_index", INT32),
        Field("committed_offset", INT64, default=NO_OFFSET),
        Field("committed_leader_epoch", INT32, versions="5+", default=-1),
        Field("metadata", STRING, nullable=True, default=""),
        Field("error_code", INT16, default=0))


@declare
class OffsetFetchResponseTopic(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partitions", Array(OffsetFetchResponsePartition)))


@declare
class OffsetFetchResponseGroup(Record):
    SCHEMA = Schema(Field("group_id", STRING), Field("topics", Array(OffsetFetchResponseTopic)),
                    Field("error_code", INT16, default=0))


@declare
class OffsetFetchResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="3+"),
        Field("topics", Array(OffsetFetchResponseTopic), versions="0-7", default=()),
        Field("error_code", INT16, versions="2-7", default=0),
        Field("groups", Array(OffsetFetchResponseGroup), versions="8+", default=()),
        versions=VERSIONS, flexible=FLEXIBLE)
