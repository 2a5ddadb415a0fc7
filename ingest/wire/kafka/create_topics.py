"""CreateTopics (api key 19): new topics with partitions, replication factor or manual assignments, configs.

Declared from Kafka's CreateTopicsRequest.json and CreateTopicsResponse.json, versions 0-6, flexible
from 5. v1 adds ``validate_only`` to the request and an error message per topic to the response, v2 the
throttle time, v4 lets ``num_partitions`` and ``replication_factor`` be -1 (the broker's defaults,
KIP-464); v5's answer carries what was (or would be) created: partitions, replication factor and every
config with its source, and the tagged ``topic_config_error_code``. v7 adds topic ids, which this
product does not have: not declared.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT8, INT16, INT32, STRING, Array

API_KEY = 19
VERSIONS, FLEXIBLE = "0-6", "5+"


@declare
class CreatableReplicaAssignment(Record):
    SCHEMA = Schema(Field("partition_index", INT32), Field("broker_ids", Array(INT32)))


@declare
class CreatableTopicConfig(Record):
    SCHEMA = Schema(Field("name", STRING), Field("value", STRING, nullable=True, default=None))


@declare
class CreatableTopic(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("num_partitions", INT32, default=-1),
        Field("replication_factor", INT16, default=-1),
        Field("assignments", Array(CreatableReplicaAssignment), default=()),
        Field("configs", Array(CreatableTopicConfig), default=()))


@declare
class CreateTopicsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("topics", Array(CreatableTopic)),
        Field("timeout_ms", INT32, default=60000),
        Field("validate_only", BOOL, versions="1+", default=False),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class CreatableTopicConfigs(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("value", STRING, nullable=True, default=None),
        Field("read_only", BOOL, default=False),
        Field("config_source", INT8, default=-1),
        Field("is_sensitive", BOOL, default=False))


@declare
class CreatableTopicResult(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, versions="1+", nullable=True, default=None),
        Field("topic_config_error_code", INT16, versions="5+", tag=0, default=0),
        Field("num_partitions", INT32, versions="5+", default=-1),
        Field("replication_factor", INT16, versions="5+", default=-1),
        Field("configs", Array(CreatableTopicConfigs), versions="5+", nullable=True, default=None),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class CreateTopicsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="2+"),
        Field("topics", Array(CreatableTopicResult)),
        versions=VERSIONS, flexible=FLEXIBLE)
