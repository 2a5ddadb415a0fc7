"""OffsetCommit (api key 8): a group's consumed positions, per partition, stored by its coordinator.

Declared from Kafka's OffsetCommitRequest.json and OffsetCommitResponse.json, versions 0-9, flexible
from 8 (Kafka 4 dropped 0-1; v10 names topics by id, not declared). v1 adds the generation and member id
(a commit from outside the current generation is fenced) and a commit timestamp per partition (v1
only), v2-v4 a retention time, v3 the throttle time, v6 the leader epoch of the committed offset, v7 the
group instance id. v0 commits without membership (as an ``assign`` consumer's generation -1 does).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT16, INT32, INT64, STRING, Array

API_KEY = 8
VERSIONS, FLEXIBLE = "0-9", "8+"


@declare
class OffsetCommitRequestPartition(Record):
    SCHEMA = Schema(
        Field("partition_index", INT32),
        Field("committed_offset", INT64),
        Field("committed_leader_epoch", INT32, versions="6+", default=-1),
        Field("commit_timestamp", INT64, versions="1", default=-1),
        Field("committed_metadata", STRING, nullable=True, default=""))


@declare
class OffsetCommitRequestTopic(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partitions", Array(OffsetCommitRequestPartition)))


@declare
class OffsetCommitRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("group_id", STRING),
        Field("generation_id", INT32, versions="1+", default=-1),
        Field("member_id", STRING, versions="1+", default=""),
        Field("group_instance_id", STRING, versions="7+", nullable="7+", default=None),
        Field("retention_time_ms", INT64, versions="2-4", default=-1),
        Field("topics", Array(OffsetCommitRequestTopic)),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class OffsetCommitResponsePartition(Record):
    SCHEMA = Schema(Field("partition_index", INT32), Field("error_code", INT16, default=0))


@declare
class OffsetCommitResponseTopic(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partitions", Array(OffsetCommitResponsePartition)))


@declare
class OffsetCommitResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="3+"),
        Field("topics", Array(OffsetCommitResponseTopic)),
        versions=VERSIONS, flexible=FLEXIBLE)
