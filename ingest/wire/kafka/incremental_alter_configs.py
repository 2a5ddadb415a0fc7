"""IncrementalAlterConfigs (api key 44): set, delete, append to or subtract from some of a resource's configs (KIP-339).

Declared from Kafka's IncrementalAlterConfigsRequest.json and IncrementalAlterConfigsResponse.json,
versions 0-1, flexible from 1. Each config names its operation (:data:`SET`, :data:`DELETE`: back to
the default, :data:`APPEND` / :data:`SUBTRACT`: for list-valued configs); configs not named keep their
values. The answer has AlterConfigs' layout.
"""
from __future__ import annotations

from ingest.wire.kafka.alter_configs import AlterConfigsResourceResponse
from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT8, INT32, STRING, Array

API_KEY = 44
VERSIONS, FLEXIBLE = "0-1", "1+"
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
"""Config operations (Kafka's ``AlterConfigOp.OpType``)."""


@declare
class IncrementalAlterableConfig(Record):
    SCHEMA = Schema(Field("name", STRING), Field("config_operation", INT8),
                    Field("value", STRING, nullable=True, default=None))


@declare
class IncrementalAlterConfigsResource(Record):
    SCHEMA = Schema(Field("resource_type", INT8), Field("resource_name", STRING),
                    Field("configs", Array(IncrementalAlterableConfig)))


@declare
class IncrementalAlterConfigsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("resources", Array(IncrementalAlterConfigsResource)),
        Field("validate_only", BOOL),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class IncrementalAlterConfigsResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("responses", Array(AlterConfigsResourceResponse)),
        versions=VERSIONS, flexible=FLEXIBLE)
