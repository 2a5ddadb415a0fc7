"""FindCoordinator (api key 10): which broker coordinates a consumer group (or a transactional id).

Declared from Kafka's FindCoordinatorRequest.json and FindCoordinatorResponse.json, versions 0-2
(not flexible; v3+ are, and v4+ ask for several keys at once: not declared). v1 adds the key type
(0 group, 1 transaction) to the request, and the throttle time and an error message to the response.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import INT8, INT16, INT32, STRING

API_KEY = 10
VERSIONS, FLEXIBLE = "0-2", "none"
GROUP, TRANSACTION = 0, 1


@declare
class FindCoordinatorRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(Field("key", STRING), Field("key_type", INT8, versions="1+", default=GROUP),
                    versions=VERSIONS, flexible=FLEXIBLE)


@declare
class FindCoordinatorResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("error_code", INT16),
        Field("error_message", STRING, versions="1+", nullable="1+", default=None),
        Field("node_id", INT32, default=-1),
        Field("host", STRING, default=""),
        Field("port", INT32, default=-1),
        versions=VERSIONS, flexible=FLEXIBLE)
