"""ListOffsets (2): a partition's offset for a time: earliest (-2), latest (-1), max timestamp (-3, v7+),
or the first record at or after a timestamp (through the segment's time index).

As Kafka's ``Partition.fetchOffsetForTimestamp`` for a consumer (``replica_id`` -1, READ_UNCOMMITTED):
latest is the high watermark, a timestamp lookup never answers an offset at or past it (offset -1 and
timestamp -1 when no record is at or after the time), earliest is the log start. v0 answers a list of
offsets (``max_num_offsets``): segment starts before the time, as Kafka 0.8 did. v4+ check the
request's ``current_leader_epoch`` and answer the partition's leader epoch. With an authorizer, each topic
needs Describe (TOPIC_AUTHORIZATION_FAILED (29) for its partitions otherwise), as Kafka.
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.broker.kafka.fetch import check_epoch, code_of
from ingest.broker.kafka_log_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from ingest.errors import IngestError, MalformedRequestError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.list_offsets import (ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
                                            ListOffsetsTopicResponse)

MAX_TIMESTAMP_VERSION = 7


def handle(apis, req: ListOffsetsRequest, ctx) -> ListOffsetsResponse:
    denied = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ListOffsetsResponse(0, tuple(
        ListOffsetsTopicResponse(t.name, tuple(_partition(apis, ctx, t.name, p) for p in t.partitions))
        if authorization.topic(apis, ctx, authorization.DESCRIBE, t.name) else
        ListOffsetsTopicResponse(t.name, tuple(ListOffsetsPartitionResponse(p.partition_index, denied)
                                               for p in t.partitions))
        for t in req.topics))


def _partition(apis, ctx, topic: str, p) -> ListOffsetsPartitionResponse:
    try:
        sp = apis.cluster.leader(topic, p.partition_index)
        epoch = sp.leader_epoch()
        check_epoch(epoch, p.current_leader_epoch)
        lg, hw, ts = sp.log, sp.high_watermark(), p.timestamp
        if ctx.version == 0:
            if ts == LATEST_TIMESTAMP:
                offsets = [hw] if p.max_num_offsets > 0 else []
            else:
                offsets = [o for o in lg.offsets_before(ts, p.max_num_offsets) if o <= hw]
            return ListOffsetsPartitionResponse(p.partition_index, 0, tuple(offsets))
        if ts == MAX_TIMESTAMP and ctx.version < MAX_TIMESTAMP_VERSION or ts < MAX_TIMESTAMP:
            raise MalformedRequestError(f"timestamp {ts} is not a time (>= 0), -1 (latest), -2 (earliest)"
                                      f"{' or -3 (max timestamp)' if ctx.version >= MAX_TIMESTAMP_VERSION else ''}")
        if ts == LATEST_TIMESTAMP:
            return ListOffsetsPartitionResponse(p.partition_index, 0, (), -1, hw, epoch)
        if ts == EARLIEST_TIMESTAMP:
            return ListOffsetsPartitionResponse(p.partition_index, 0, (), -1, lg.start_offset, epoch)
        found = lg.offset_for_timestamp(ts)
        if found is None or found.offset >= hw:
            return ListOffsetsPartitionResponse(p.partition_index, 0, (), -1, -1, -1)
        return ListOffsetsPartitionResponse(p.partition_index, 0, (), found.timestamp, found.offset, epoch)
    except IngestError as exc:
        code = code_of(exc)
        apis.refusals.warning(ctx.client, f"ListOffsets {KafkaErrorCode(code).name}",
                              "client %s: ListOffsets v%d of %s-%d refused (%s): %s", ctx.client, ctx.version, topic,
                              p.partition_index, KafkaErrorCode(code).name, exc)
        return ListOffsetsPartitionResponse(p.partition_index, code)


def error(req: ListOffsetsRequest, code: int, ctx) -> ListOffsetsResponse:
    return ListOffsetsResponse(0, tuple(
        ListOffsetsTopicResponse(t.name, tuple(ListOffsetsPartitionResponse(p.partition_index, code)
                                               for p in t.partitions))
        for t in req.topics))
