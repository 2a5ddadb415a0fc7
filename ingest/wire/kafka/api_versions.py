"""ApiVersions (api key 18, KIP-35): which APIs and versions a broker speaks.

Declared from Kafka's ApiVersionsRequest.json and ApiVersionsResponse.json: versions 0-4, flexible
from 3 (compact strings and arrays, tagged fields). v1 adds ``throttle_time_ms``; v3 the client's
software name and version, and the response's tagged fields (features, KIP-584); v4 has v3's layout
(it only allows a feature's min version 0). The response header stays v0 in every version.

When a client asks with a version newer than the broker knows, Kafka answers UNSUPPORTED_VERSION
with its own ranges in the v0 layout, and the client retries (KIP-511): a client that reads an
error code reads the rest as v0.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import BOOL, INT16, INT32, INT64, STRING, Array

API_KEY = 18
VERSIONS, FLEXIBLE = "0-4", "3+"


@declare
class ApiVersionsRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("client_software_name", STRING, versions="3+"),
        Field("client_software_version", STRING, versions="3+"),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class ApiVersion(Record):
    """One API the broker speaks and its version range, inclusive."""

    SCHEMA = Schema(("api_key", INT16), ("min_version", INT16), ("max_version", INT16))


@declare
class SupportedFeatureKey(Record):
    SCHEMA = Schema(("name", STRING), ("min_version", INT16), ("max_version", INT16))


@declare
class FinalizedFeatureKey(Record):
    SCHEMA = Schema(("name", STRING), ("max_version_level", INT16), ("min_version_level", INT16))


@declare
class ApiVersionsResponse(KafkaResponse):
    API_KEY = API_KEY
    FLEXIBLE_HEADER = False
    SCHEMA = Schema(
        Field("error_code", INT16),
        Field("api_keys", Array(ApiVersion)),
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("supported_features", Array(SupportedFeatureKey), versions="3+", tag=0),
        Field("finalized_features_epoch", INT64, versions="3+", tag=1, default=-1),
        Field("finalized_features", Array(FinalizedFeatureKey), versions="3+", tag=2),
        Field("zk_migration_ready", BOOL, versions="3+", tag=3),
        versions=VERSIONS, flexible=FLEXIBLE)
