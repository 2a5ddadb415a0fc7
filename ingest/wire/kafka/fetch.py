"""Fetch (api key 1): whole record batches from partitions, with long polling.

Declared from Kafka's FetchRequest.json and FetchResponse.json, versions 0-12 (Kafka 4 dropped 0-3;
their layouts are those of the protocol guide), flexible from 12; v13+ name topics by topic id and
are not declared. Request: v3 ``max_bytes``, v4 ``isolation_level``, v5 the partition's
``log_start_offset`` (followers), v7 fetch sessions (KIP-227), v9 ``current_leader_epoch``, v11
``rack_id``, v12 ``last_fetched_epoch`` and the tagged cluster id. Response: v1 the throttle time, v4
the last stable offset and aborted transactions, v5 the log start offset, v7 a top-level error code
and session id, v11 the preferred read replica, v12 the tagged diverging epoch, current leader and
snapshot id per partition.

``records`` is RECORDS. A broker writes it as a file region sent with ``sendfile``: it encodes the
response with :meth:`KafkaMessage.parts`, which keeps a region (any sized object) as a piece of its
own instead of joining it into the body.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.kafka.produce import LeaderIdAndEpoch
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT8, INT16, INT32, INT64, RECORDS, STRING, Array

API_KEY = 1
VERSIONS, FLEXIBLE = "0-12", "12+"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
INT32_MAX = 2 ** 31 - 1


@declare
class FetchPartition(Record):
    SCHEMA = Schema(
        Field("partition", INT32),
        Field("current_leader_epoch", INT32, versions="9+", default=-1),
        Field("fetch_offset", INT64, default=0),
        Field("last_fetched_epoch", INT32, versions="12+", default=-1),
        Field("log_start_offset", INT64, versions="5+", default=-1),
        Field("partition_max_bytes", INT32, default=INT32_MAX))


@declare
class FetchTopic(Record):
    SCHEMA = Schema(Field("topic", STRING), Field("partitions", Array(FetchPartition)))


@declare
class ForgottenTopic(Record):
    SCHEMA = Schema(Field("topic", STRING), Field("partitions", Array(INT32)))


@declare
class FetchRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("cluster_id", STRING, versions="12+", nullable="12+", tag=0, default=None),
        Field("replica_id", INT32, default=-1),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, versions="3+", default=INT32_MAX),
        Field("isolation_level", INT8, versions="4+", default=READ_UNCOMMITTED),
        Field("session_id", INT32, versions="7+", default=0),
        Field("session_epoch", INT32, versions="7+", default=-1),
        Field("topics", Array(FetchTopic)),
        Field("forgotten_topics_data", Array(ForgottenTopic), versions="7+", default=()),
        Field("rack_id", STRING, versions="11+", default=""),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class EpochEndOffset(Record):
    SCHEMA = Schema(Field("epoch", INT32, default=-1), Field("end_offset", INT64, default=-1))


@declare
class SnapshotId(Record):
    SCHEMA = Schema(Field("end_offset", INT64, default=-1), Field("epoch", INT32, default=-1))


@declare
class AbortedTransaction(Record):
    SCHEMA = Schema(Field("producer_id", INT64), Field("first_offset", INT64))


@declare
class PartitionData(Record):
    SCHEMA = Schema(
        Field("partition_index", INT32),
        Field("error_code", INT16, default=0),
        Field("high_watermark", INT64, default=-1),
        Field("last_stable_offset", INT64, versions="4+", default=-1),
        Field("log_start_offset", INT64, versions="5+", default=-1),
        Field("diverging_epoch", EpochEndOffset, versions="12+", tag=0, default=None),
        Field("current_leader", LeaderIdAndEpoch, versions="12+", tag=1, default=None),
        Field("snapshot_id", SnapshotId, versions="12+", tag=2, default=None),
        Field("aborted_transactions", Array(AbortedTransaction), versions="4+", nullable="4+", default=None),
        Field("preferred_read_replica", INT32, versions="11+", default=-1),
        Field("records", RECORDS, nullable=True, default=b""),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class FetchableTopicResponse(Record):
    SCHEMA = Schema(Field("topic", STRING), Field("partitions", Array(PartitionData)))


@declare
class FetchResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("error_code", INT16, versions="7+"),
        Field("session_id", INT32, versions="7+", default=0),
        Field("responses", Array(FetchableTopicResponse)),
        versions=VERSIONS, flexible=FLEXIBLE)
