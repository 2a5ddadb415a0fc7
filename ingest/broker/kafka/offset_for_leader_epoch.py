"""OffsetForLeaderEpoch (23): the end offset of a leader epoch of a partition this broker leads (KIP-101/279).

Answered from what the leader knows now: for the partition's current leader epoch, its log end offset;
for a newer epoch than the current one, UNDEFINED (epoch -1, offset -1), as Kafka answers. An older
epoch needs the partition's leader-epoch history (Kafka's ``leader-epoch-checkpoint``), which the
replication of Kafka topics adds behind :class:`~ingest.broker.kafka.cluster.ServedPartition`
(``epoch_end``); until then it is answered UNDEFINED too, which tells a follower or consumer to fall
back to the high watermark as Kafka's clients do for a broker without the epoch. v2+ check
``current_leader_epoch`` (FENCED_LEADER_EPOCH 74 / UNKNOWN_LEADER_EPOCH 75).

With an authorizer, as Kafka (KIP-320): ClusterAction on the cluster, or Describe on the topic
(TOPIC_AUTHORIZATION_FAILED (29) for its partitions); a request naming a replica (``replica_id`` >= 0,
v3+) must also come from that broker's registered principal (else CLUSTER_AUTHORIZATION_FAILED (31)).
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.broker.kafka.fetch import check_epoch, code_of
from ingest.errors import IngestError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.offset_for_leader_epoch import (EpochEndOffsetResult, OffsetForLeaderEpochRequest,
                                                       OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult)

UNDEFINED_EPOCH, UNDEFINED_OFFSET = -1, -1


def handle(apis, req: OffsetForLeaderEpochRequest, ctx) -> OffsetForLeaderEpochResponse:
    if authorization.enabled(apis):
        if req.replica_id >= 0:
            if not authorization.replica(apis, ctx, req.replica_id):
                return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx)
        elif not authorization.cluster(apis, ctx, authorization.CLUSTER_ACTION, audit=False):
            return OffsetForLeaderEpochResponse(0, tuple(
                OffsetForLeaderTopicResult(t.topic, tuple(_partition(apis, t.topic, p) for p in t.partitions))
                if authorization.topic(apis, ctx, authorization.DESCRIBE, t.topic) else
                OffsetForLeaderTopicResult(t.topic, tuple(
                    EpochEndOffsetResult(KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, p.partition)
                    for p in t.partitions))
                for t in req.topics))
    return OffsetForLeaderEpochResponse(0, tuple(
        OffsetForLeaderTopicResult(t.topic, tuple(_partition(apis, t.topic, p) for p in t.partitions))
        for t in req.topics))


def _partition(apis, topic: str, p) -> EpochEndOffsetResult:
    try:
        sp = apis.cluster.leader(topic, p.partition)
        current = sp.leader_epoch()
        check_epoch(current, p.current_leader_epoch)
        epoch_end = getattr(sp, "epoch_end", None)
        if epoch_end is not None:
            epoch, end = epoch_end(p.leader_epoch)
        elif p.leader_epoch == current:
            epoch, end = current, sp.log.end_offset
        else:
            epoch, end = UNDEFINED_EPOCH, UNDEFINED_OFFSET
        return EpochEndOffsetResult(0, p.partition, epoch, end)
    except IngestError as exc:
        return EpochEndOffsetResult(code_of(exc), p.partition)


def error(req: OffsetForLeaderEpochRequest, code: int, ctx) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(0, tuple(
        OffsetForLeaderTopicResult(t.topic, tuple(EpochEndOffsetResult(code, p.partition) for p in t.partitions))
        for t in req.topics))
