"""InitProducerId (api key 22): a producer id and epoch for an idempotent (or transactional) producer (KIP-98).

Declared from Kafka's InitProducerIdRequest.json and InitProducerIdResponse.json, versions 0-4,
flexible from 2. v3 adds the producer id and epoch a producer already has (-1 for a new one), so
that it can bump its epoch (KIP-360); v4 has v3's layout. v5+ are transactions v2's (KIP-890).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import INT16, INT32, INT64, STRING

API_KEY = 22
VERSIONS, FLEXIBLE = "0-4", "2+"


@declare
class InitProducerIdRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("transactional_id", STRING, nullable=True, default=None),
        Field("transaction_timeout_ms", INT32),
        Field("producer_id", INT64, versions="3+", default=-1),
        Field("producer_epoch", INT16, versions="3+", default=-1),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class InitProducerIdResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("producer_id", INT64, default=-1),
        Field("producer_epoch", INT16, default=-1),
        versions=VERSIONS, flexible=FLEXIBLE)
