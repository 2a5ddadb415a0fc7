"""AlterConfigs (api key 33): replace the whole set of a resource's dynamic configs.

Declared from Kafka's AlterConfigsRequest.json and AlterConfigsResponse.json, versions 0-2, flexible
from 2 (v1 has v0's layout). A config left out of the request goes back to its default: AlterConfigs
sets the resource's configs to exactly those named (IncrementalAlterConfigs changes some).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT8, INT16, INT32, STRING, Array

API_KEY = 33
VERSIONS, FLEXIBLE = "0-2", "2+"


@declare
class AlterableConfig(Record):
    SCHEMA = Schema(Field("name", STRING), Field("value", STRING, nullable=True, default=None))


@declare
class AlterConfigsResource(Record):
    SCHEMA = Schema(Field("resource_type", INT8), Field("resource_name", STRING),
                    Field("configs", Array(AlterableConfig)))


@declare
class AlterConfigsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("resources", Array(AlterConfigsResource)),
        Field("validate_only", BOOL),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class AlterConfigsResourceResponse(Record):
    SCHEMA = Schema(
        Field("error_code", INT16, default=0),
        Field("error_message", STRING, nullable=True, default=None),
        Field("resource_type", INT8, default=0),
        Field("resource_name", STRING, default=""))


@declare
class AlterConfigsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("responses", Array(AlterConfigsResourceResponse)),
        versions=VERSIONS, flexible=FLEXIBLE)
