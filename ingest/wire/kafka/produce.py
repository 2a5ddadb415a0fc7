"""Produce (api key 0): record sets to partitions; the answer's base offset per partition.

Declared from Kafka's ProduceRequest.json and ProduceResponse.json, versions 0-10 (Kafka 4 dropped
0-2; their layouts are those of the protocol guide), flexible from 9. v0-v2 carry legacy message
sets (magic 0, and 1 from v2), v3+ record batches v2 only; v3 adds the transactional id. The
response: v1 the throttle time (last), v2 the log append time, v5 the log start offset, v8 record
errors and an error message per partition, v10 the tagged current leader (per partition) and node
endpoints (top level), which a broker sends only with NOT_LEADER_OR_FOLLOWER (KIP-951).

``records`` is RECORDS: the codec hands it over as bytes and never looks inside (validation is the
broker's, once per batch). A produce with ``acks`` 0 has no response at all.
"""
from __future__ import annotations

from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.schema import Field, Record, Schema, declare
from ingest.wire.types import INT16, INT32, INT64, RECORDS, STRING, Array

API_KEY = 0
VERSIONS, FLEXIBLE = "0-10", "9+"


@declare
class PartitionProduceData(Record):
    SCHEMA = Schema(Field("index", INT32), Field("records", RECORDS, nullable=True, default=None))


@declare
class TopicProduceData(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partition_data", Array(PartitionProduceData)))


@declare
class ProduceRequest(KafkaRequest):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("transactional_id", STRING, versions="3+", nullable="3+", default=None),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
        Field("topic_data", Array(TopicProduceData)),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class BatchIndexAndErrorMessage(Record):
    SCHEMA = Schema(Field("batch_index", INT32),
                    Field("batch_index_error_message", STRING, nullable=True, default=None))


@declare
class LeaderIdAndEpoch(Record):
    """Where a partition is led now (a tagged field of Produce and Fetch responses)."""

    SCHEMA = Schema(Field("leader_id", INT32, default=-1), Field("leader_epoch", INT32, default=-1))


@declare
class NodeEndpoint(Record):
    SCHEMA = Schema(Field("node_id", INT32), Field("host", STRING), Field("port", INT32),
                    Field("rack", STRING, nullable=True, default=None))


@declare
class PartitionProduceResponse(Record):
    SCHEMA = Schema(
        Field("index", INT32),
        Field("error_code", INT16, default=0),
        Field("base_offset", INT64, default=-1),
        Field("log_append_time_ms", INT64, versions="2+", default=-1),
        Field("log_start_offset", INT64, versions="5+", default=-1),
        Field("record_errors", Array(BatchIndexAndErrorMessage), versions="8+", default=()),
        Field("error_message", STRING, versions="8+", nullable="8+", default=None),
        Field("current_leader", LeaderIdAndEpoch, versions="10+", tag=0, default=None),
        versions=VERSIONS, flexible=FLEXIBLE)


@declare
class TopicProduceResponse(Record):
    SCHEMA = Schema(Field("name", STRING), Field("partition_responses", Array(PartitionProduceResponse)))


@declare
class ProduceResponse(KafkaResponse):
    API_KEY = API_KEY
    SCHEMA = Schema(
        Field("responses", Array(TopicProduceResponse)),
        Field("throttle_time_ms", INT32, versions="1+"),
        Field("node_endpoints", Array(NodeEndpoint), versions="10+", tag=0),
        versions=VERSIONS, flexible=FLEXIBLE)
