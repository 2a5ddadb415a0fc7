"""OffsetForLeaderEpoch (api key 23): the end offset of a leader epoch in a partition's log (KIP-101, KIP-279).

Declared from Kafka's OffsetForLeaderEpochRequest.json and OffsetForLeaderEpochResponse.json,
versions 0-4 (Kafka 4 dropped 0-1), flexible from 4. v1 adds the answered leader epoch, v2 the
requester's current leader epoch (fencing) and the throttle time, v3 the replica id (-1 a consumer,
-2 a debugging tool, a broker id a follower).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT16, INT32, INT64, STRING, Array

API_KEY = 23
VERSIONS, FLEXIBLE = "0-4", "4+"
CONSUMER, DEBUGGING = -1, -2


@declare
class OffsetForLeaderPartition(Record):
    SCHEMA = Schema(
        Field("partition", INT32),
        Field("current_leader_epoch", INT32, versions="2+", default=-1),
        Field("leader_epoch", INT32, default=-1))


@declare
class OffsetForLeaderTopic(Record):
    SCHEMA = Schema(Field("topic", STRING), Field("partitions", Array(OffsetForLeaderPartition)))


@declare
class OffsetForLeaderEpochRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("replica_id", INT32, versions="3+", default=DEBUGGING),
        Field("topics", Array(OffsetForLeaderTopic)),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class EpochEndOffsetResult(Record):
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("partition", INT32),
        Field("leader_epoch", INT32, versions="1+", default=-1),
        Field("end_offset", INT64, default=-1))


@declare
class OffsetForLeaderTopicResult(Record):
    SCHEMA = Schema(Field("topic", STRING), Field("partitions", Array(EpochEndOffsetResult)))


@declare
class OffsetForLeaderEpochResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="2+"),
        Field("topics", Array(OffsetForLeaderTopicResult)),
        versions=VERSIONS, flexible=FLEXIBLE)
