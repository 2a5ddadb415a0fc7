"""The 0.7 port's requests between brokers carried on a Kafka listener (private api keys 10001-10004).

A private API of this product (docs/kafka-protocol.md, "Private APIs"; docs/security.md, "The 0.7
port"): keys no Kafka client sends, never advertised in ApiVersions. Each carries one 0.7 request
type's body unchanged and answers with that type's whole 0.7 response frame, so that what only a broker
may ask (a replica's fetch, the mirror's conditional append) reaches the 0.7 topics over the
inter-broker Kafka listener, with its TLS, SASL and authorizer, instead of the 0.7 port, which has none::

    request   body:BYTES          the 0.7 request's bytes after its ``type`` (docs/protocol.md)
    response  response:RECORDS    the 0.7 response's bytes after its ``size``: error:int16 body

The RECORDS field's length is the 0.7 frame's own ``size``, so the response's bytes after the Kafka
response header are exactly the 0.7 port's response frame (a follower's data still goes out with sendfile).

=====  =================  ====================
key    0.7 request type   name
=====  =================  ====================
10001  13 REPLICA_FETCH   ReplicaFetch07
10002  15 APPEND_AT       AppendAt07
10003  16 DELETED_SEGMENTS DeletedSegments07
10004  17 REPLICA_FETCHES ReplicaFetches07
=====  =================  ====================

Version 0 only, not flexible (the response header is the correlation id alone).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.protocol import RequestType
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import BYTES, RECORDS

VERSION = 0
VERSIONS = "0"


REPLICA_FETCH_KEY, APPEND_AT_KEY, DELETED_SEGMENTS_KEY, REPLICA_FETCHES_KEY = 10001, 10002, 10003, 10004


@declare
class ReplicaFetch07Request(KafkaRequest):
    API_KEY = REPLICA_FETCH_KEY
    SCHEMA = Schema(Field("body", BYTES), versions=VERSIONS)


@declare
class ReplicaFetch07Response(KafkaResponse):
    API_KEY = REPLICA_FETCH_KEY
    SCHEMA = Schema(Field("response", RECORDS, default=b""), versions=VERSIONS)


@declare
class AppendAt07Request(KafkaRequest):
    API_KEY = APPEND_AT_KEY
    SCHEMA = Schema(Field("body", BYTES), versions=VERSIONS)


@declare
class AppendAt07Response(KafkaResponse):
    API_KEY = APPEND_AT_KEY
    SCHEMA = Schema(Field("response", RECORDS, default=b""), versions=VERSIONS)


@declare
class DeletedSegments07Request(KafkaRequest):
    API_KEY = DELETED_SEGMENTS_KEY
    SCHEMA = Schema(Field("body", BYTES), versions=VERSIONS)


@declare
class DeletedSegments07Response(KafkaResponse):
    API_KEY = DELETED_SEGMENTS_KEY
    SCHEMA = Schema(Field("response", RECORDS, default=b""), versions=VERSIONS)


@declare
class ReplicaFetches07Request(KafkaRequest):
    API_KEY = REPLICA_FETCHES_KEY
    SCHEMA = Schema(Field("body", BYTES), versions=VERSIONS)


@declare
class ReplicaFetches07Response(KafkaResponse):
    API_KEY = REPLICA_FETCHES_KEY
    SCHEMA = Schema(Field("response", RECORDS, default=b""), versions=VERSIONS)


TYPE_OF_KEY: dict[int, RequestType] = {REPLICA_FETCH_KEY: RequestType.REPLICA_FETCH,
                                       APPEND_AT_KEY: RequestType.APPEND_AT,
                                       DELETED_SEGMENTS_KEY: RequestType.DELETED_SEGMENTS,
                                       REPLICA_FETCHES_KEY: RequestType.REPLICA_FETCHES}
"""private api key -> the 0.7 request type it carries."""
KEY_OF_TYPE: dict[int, int] = {int(t): k for k, t in TYPE_OF_KEY.items()}
"""0.7 request type -> the private api key that carries it."""
