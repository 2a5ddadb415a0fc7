"""SaslHandshake (api key 17, KIP-43): the client names the SASL mechanism it will authenticate with.

Declared from Kafka's SaslHandshakeRequest.json and SaslHandshakeResponse.json, versions 0-1, never
flexible. The answer lists the mechanisms the listener has enabled; UNSUPPORTED_SASL_MECHANISM (33)
when the client's is not one of them. After a v0 handshake the client sends the mechanism's tokens as
bare size-prefixed frames; after v1 it wraps each in a SaslAuthenticate request (KIP-152).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import INT16, STRING, Array

API_KEY = 17
VERSIONS = "0-1"


@declare
class SaslHandshakeRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(Field("mechanism", STRING), versions=VERSIONS)


@declare
class SaslHandshakeResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(Field("error_code", INT16), Field("mechanisms", Array(STRING)), versions=VERSIONS)
