"""ListOffsets (api key 2): the offset of a partition at a time: earliest, latest, max timestamp, by timestamp.

Declared from Kafka's ListOffsetsRequest.json and ListOffsetsResponse.json, versions 0-7 (Kafka 4
dropped 0), flexible from 6. v0 asks ``max_num_offsets`` and answers an array of offsets (Kafka 0.8's
``getOffsetsBefore``); v1+ answer one timestamp and offset. v2 adds the isolation level (request) and
the throttle time (response), v4 the current leader epoch (request) and the leader epoch (response),
v7 allows MAX_TIMESTAMP (-3, KIP-734).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT8, INT16, INT32, INT64, STRING, Array

API_KEY = 2
VERSIONS, FLEXIBLE = "0-7", "6+"
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


@declare
class ListOffsetsPartition(Record):
    SCHEMA = Schema(
        Field("partition_index", INT32),
        Field("current_leader_epoch", INT32, versions="4+", default=-1),
        Field("timestamp", INT64, default=LATEST),
        Field("max_num_offsets", INT32, versions="0", default=1))


@declare
class ListOffsetsTopic(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partitions", Array(ListOffsetsPartition)))


@declare
class ListOffsetsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("replica_id", INT32, default=-1),
        Field("isolation_level", INT8, versions="2+", default=0),
        Field("topics", Array(ListOffsetsTopic)),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class ListOffsetsPartitionResponse(Record):
    SCHEMA = Schema(
        Field("partition_index", INT32),
        Field("error_code", INT16, default=0),
        Field("old_style_offsets", Array(INT64), versions="0", default=()),
        Field("timestamp", INT64, versions="1+", default=-1),
        Field("offset", INT64, versions="1+", default=-1),
        Field("leader_epoch", INT32, versions="4+", default=-1))


@declare
class ListOffsetsTopicResponse(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partitions", Array(ListOffsetsPartitionResponse)))


@declare
class ListOffsetsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="2+"),
        Field("topics", Array(ListOffsetsTopicResponse)),
        versions=VERSIONS, flexible=FLEXIBLE)
