"""DeleteTopics (api key 20): topics to delete, by name.

Declared from Kafka's DeleteTopicsRequest.json and DeleteTopicsResponse.json, versions 0-5, flexible
from 4. v1 adds the throttle time to the response, v5 an error message per topic. v6 names topics by
id (KIP-516), which this product does not have: not declared.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT16, INT32, STRING, Array

API_KEY = 20
VERSIONS, FLEXIBLE = "0-5", "4+"


@declare
class DeleteTopicsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("topic_names", Array(STRING)),
        Field("timeout_ms", INT32),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class DeletableTopicResult(Record):
    SCHEMA = Schema(
        Field("name", STRING),
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, versions="5+", nullable="5+", default=None))


@declare
class DeleteTopicsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("responses", Array(DeletableTopicResult)),
        versions=VERSIONS, flexible=FLEXIBLE)
