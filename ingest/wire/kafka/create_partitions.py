"""CreatePartitions (api key 37): more partitions for existing topics, optionally with their replicas.

Declared from Kafka's CreatePartitionsRequest.json and CreatePartitionsResponse.json, versions 0-3,
flexible from 2 (v1 and v3 have the layout of the version before). ``count`` is the topic's new total;
``assignments`` (null: the broker's choice) names the replicas of each new partition, in order.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT16, INT32, STRING, Array

API_KEY = 37
VERSIONS, FLEXIBLE = "0-3", "2+"


@declare
class CreatePartitionsAssignment(Record):
    SCHEMA = Schema(Field("broker_ids", Array(INT32)))


@declare
class CreatePartitionsTopic(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("count", INT32),
        Field("assignments", Array(CreatePartitionsAssignment), nullable=True, default=None))


@declare
class CreatePartitionsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("topics", Array(CreatePartitionsTopic)),
        Field("timeout_ms", INT32),
        Field("validate_only", BOOL),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class CreatePartitionsTopicResult(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, nullable=True, default=None))


@declare
class CreatePartitionsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("results", Array(CreatePartitionsTopicResult)),
        versions=VERSIONS, flexible=FLEXIBLE)
