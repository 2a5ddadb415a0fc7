"""SaslAuthenticate (api key 36, KIP-152): one SASL token each way, wrapped in a Kafka request.

Declared from Kafka's SaslAuthenticateRequest.json and SaslAuthenticateResponse.json, versions 0-2,
flexible from 2. v1 adds the session lifetime (KIP-368: 0, no re-authentication required). A failed
authentication is answered SASL_AUTHENTICATION_FAILED (58) with an error message, and the broker then
closes the connection.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import BYTES, INT16, INT64, STRING

API_KEY = 36
VERSIONS, FLEXIBLE = "0-2", "2+"


@declare
class SaslAuthenticateRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(Field("auth_bytes", BYTES), versions=VERSIONS, flexible=FLEXIBLE)


@declare
class SaslAuthenticateResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("error_message", STRING, nullable=True, default=None),
        Field("auth_bytes", BYTES),
        Field("session_lifetime_ms", INT64, versions="1+", default=0),
        versions=VERSIONS, flexible=FLEXIBLE)
