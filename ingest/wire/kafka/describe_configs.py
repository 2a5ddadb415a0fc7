"""DescribeConfigs (api key 32): the configs of topics (and brokers), each with its value and source.

Declared from Kafka's DescribeConfigsRequest.json and DescribeConfigsResponse.json, versions 0-4,
flexible from 4. ``configuration_keys`` null asks for every config. v0 answers ``is_default``; from v1
the ``config_source`` replaces it and ``include_synonyms`` asks for the synonyms (the broker-level
settings a topic config falls back to, most specific first); v3 adds ``include_documentation``, and
the answer's config type and documentation.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT8, INT16, INT32, STRING, Array

API_KEY = 32
VERSIONS, FLEXIBLE = "0-4", "4+"

TOPIC, BROKER = 2, 4
"""Resource types (Kafka's ``ConfigResource.Type``)."""

UNKNOWN, DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, \
    DEFAULT_CONFIG = 0, 1, 2, 3, 4, 5
"""Config sources (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 4, 5, 6, 7
"""Config types (v3+, Kafka's ``DescribeConfigsResponse.ConfigType``)."""


@declare
class DescribeConfigsResource(Record):
    SCHEMA = Schema(
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("configuration_keys", Array(STRING), nullable=True, default=None))


@declare
class DescribeConfigsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("resources", Array(DescribeConfigsResource)),
        Field("include_synonyms", BOOL, versions="1+", default=False),
        Field("include_documentation", BOOL, versions="3+", default=False),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class DescribeConfigsSynonym(Record):
    SCHEMA = Schema(Field("name", STRING), Field("value", STRING, nullable=True, default=None),
                    Field("source", INT8, default=0))


@declare
class DescribeConfigsResourceResult(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("value", STRING, nullable=True, default=None),
        Field("read_only", BOOL, default=False),
        Field("is_default", BOOL, versions="0", default=False),
        Field("config_source", INT8, versions="1+", default=-1),
        Field("is_sensitive", BOOL, default=False),
        Field("synonyms", Array(DescribeConfigsSynonym), versions="1+", default=()),
        Field("config_type", INT8, versions="3+", default=0),
        Field("documentation", STRING, versions="3+", nullable=True, default=None))


@declare
class DescribeConfigsResult(Record):
    SCHEMA = Schema(
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, nullable=True, default=None),
        Field("resource_type", INT8, default=0),
        Field("resource_name", STRING, default=""),
        Field("configs", Array(DescribeConfigsResourceResult), default=()))


@declare
class DescribeConfigsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("results", Array(DescribeConfigsResult)),
        versions=VERSIONS, flexible=FLEXIBLE)
