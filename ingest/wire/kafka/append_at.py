"""AppendAt (private api key 10000): the mirror's conditional append of record batches that keep their offsets.

A private API of this product (docs/kafka-protocol.md, "Private APIs"): its key lies in a range no
Kafka client sends (>= 10000) and it is never advertised in ApiVersions, so a client that negotiates
versions never finds it. The 0.7 port's APPEND_AT (request 15) for Kafka topics:

- ``expected_offset``: the partition's log end the writer expects. The batches are appended only if
  the log end is exactly that (checked and appended together under the log's lock); otherwise the
  answer is OFFSET_MISMATCH (a private error code, 10000) with the log end in ``log_end_offset`` and
  nothing appended. ``expected_offset`` -1 with no records is a query: the log end, nothing appended.
- ``records``: whole record batches v2 that **keep their base offsets** (the source's): the first
  starts at or after ``expected_offset`` (after it: the source lost offsets to retention, and the
  target's log has the same gap). Each batch's CRC is checked; the partition leader epoch is set to
  the target leader's (it is outside the CRC: a batch's bytes from its magic byte on are unchanged).
- ``acks`` -1 (every in-sync replica) or 1 (the leader); ``timeout_ms`` bounds an acks=-1 wait.

Version 0 only, flexible (tagged fields may be added without a new version).
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Schema, declare
from ingest.wire.types import INT16, INT32, INT64, RECORDS, STRING

API_KEY = 10000
VERSIONS, FLEXIBLE = "0", "0+"
QUERY = -1
"""``expected_offset`` of the query form (no records): answers the log end."""


@declare
class AppendAtRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("topic", STRING),
        Field("partition", INT32),
        Field("expected_offset", INT64),
        Field("acks", INT16, default=-1),
        Field("timeout_ms", INT32, default=10_000),
        Field("records", RECORDS, nullable=True, default=None),
        versions=VERSIONS, flexible=FLEXIBLE)

    @property
    def is_query(self) -> bool:
        return self.expected_offset == QUERY


@declare
class AppendAtResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("error_code", INT16, default=0),
        Field("log_end_offset", INT64, default=-1),
        Field("log_start_offset", INT64, default=-1),
        versions=VERSIONS, flexible=FLEXIBLE)
