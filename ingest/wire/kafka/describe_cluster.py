"""DescribeCluster (api key 60): the cluster id, the controller and the brokers (KIP-700).

Declared from Kafka's DescribeClusterRequest.json and DescribeClusterResponse.json, versions 0-2, all
flexible. v1 adds the endpoint type (1 brokers, 2 controllers: KRaft's, which a ZooKeeper cluster does
not have), v2 asks for fenced brokers and answers ``is_fenced`` per broker (KRaft's; never true here).
"""
from __future__ import annotations

from ingest.wire.kafka.metadata import NO_OPERATIONS
from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT8, INT16, INT32, STRING, Array

API_KEY = 60
VERSIONS, FLEXIBLE = "0-2", "0+"
BROKERS, CONTROLLERS = 1, 2
"""Endpoint types (v1+)."""


@declare
class DescribeClusterRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("include_cluster_authorized_operations", BOOL),
        Field("endpoint_type", INT8, versions="1+", default=BROKERS),
        Field("include_fenced_brokers", BOOL, versions="2+", default=False),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class DescribeClusterBroker(Record):
    SCHEMA = Schema(
        Field("broker_id", INT32),
        Field("host", STRING),
        Field("port", INT32),
        Field("rack", STRING, nullable=True, default=None),
        Field("is_fenced", BOOL, versions="2+", default=False))


@declare
class DescribeClusterResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable=True, default=None),
        Field("endpoint_type", INT8, versions="1+", default=BROKERS),
        Field("cluster_id", STRING),
        Field("controller_id", INT32, default=-1),
        Field("brokers", Array(DescribeClusterBroker)),
        Field("cluster_authorized_operations", INT32, default=NO_OPERATIONS),
        versions=VERSIONS, flexible=FLEXIBLE)
