"""Metadata (api key 3): the brokers, the controller and every topic's partitions with leader, replicas, ISR.

Declared from Kafka's MetadataRequest.json and MetadataResponse.json, versions 0-9, flexible from 9;
v10+ carry topic ids and are not declared. Request: v0 an empty topic list means all topics, from v1
a null list means all and an empty one none; v4 ``allow_auto_topic_creation``; v8 the authorized
operations flags. Response: v1 the broker rack, the controller id and ``is_internal``, v2 the cluster
id, v3 the throttle time (first), v5 offline replicas, v7 the leader epoch, v8 authorized operations
(-2147483648 when not asked).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT16, INT32, STRING, Array

API_KEY = 3
VERSIONS, FLEXIBLE = "0-9", "9+"
NO_OPERATIONS = -2147483648
"""The authorized-operations value of an answer that was not asked for them (Kafka's INT32 min)."""


@declare
class MetadataRequestTopic(Record):
    SCHEMA = Schema(Field("name", STRING))


@declare
class MetadataRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("topics", Array(MetadataRequestTopic), nullable="1+", default=None),
        Field("allow_auto_topic_creation", BOOL, versions="4+", default=True),
        Field("include_cluster_authorized_operations", BOOL, versions="8+", default=False),
        Field("include_topic_authorized_operations", BOOL, versions="8+", default=False),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class MetadataResponseBroker(Record):
    SCHEMA = Schema(Field("node_id", INT32), Field("host", STRING), Field("port", INT32),
                    Field("rack", STRING, versions="1+", nullable="1+", default=None))


@declare
class MetadataResponsePartition(Record):
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("partition_index", INT32),
        Field("leader_id", INT32),
        Field("leader_epoch", INT32, versions="7+", default=-1),
        Field("replica_nodes", Array(INT32), default=()),
        Field("isr_nodes", Array(INT32), default=()),
        Field("offline_replicas", Array(INT32), versions="5+", default=()))


@declare
class MetadataResponseTopic(Record):
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("name", STRING),
        Field("is_internal", BOOL, versions="1+", default=False),
        Field("partitions", Array(MetadataResponsePartition), default=()),
        Field("topic_authorized_operations", INT32, versions="8+", default=NO_OPERATIONS))


@declare
class MetadataResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="3+"),
        Field("brokers", Array(MetadataResponseBroker)),
        Field("cluster_id", STRING, versions="2+", nullable="2+", default=None),
        Field("controller_id", INT32, versions="1+", default=-1),
        Field("topics", Array(MetadataResponseTopic)),
        Field("cluster_authorized_operations", INT32, versions="8+", default=NO_OPERATIONS),
        versions=VERSIONS, flexible=FLEXIBLE)
