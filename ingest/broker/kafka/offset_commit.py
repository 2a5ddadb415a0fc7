"""OffsetCommit (8): a group's positions stored in ``__consumer_offsets``, answered once replicated.

See :mod:`ingest.broker.groups.coordinator` (who may commit) and :mod:`ingest.broker.groups.offset_store`
(how a commit is stored). A group-level refusal (NOT_COORDINATOR, ILLEGAL_GENERATION, ...) is every
partition's error, as Kafka answers it. With an authorizer, the group needs Read (else every partition
is GROUP_AUTHORIZATION_FAILED (30)) and each topic Read (else its partitions are
TOPIC_AUTHORIZATION_FAILED (29), not committed), as Kafka's.
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.broker.kafka.answer import Answer
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.offset_commit import (OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponsePartition,
                                             OffsetCommitResponseTopic)


def handle(apis, req: OffsetCommitRequest, ctx):
    if not authorization.group(apis, ctx, authorization.READ, req.group_id):
        return error(req, KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, ctx)
    denied = {t.name for t in req.topics if not authorization.topic(apis, ctx, authorization.READ, t.name)}
    answer = Answer(ctx)
    items = [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
             for t in req.topics if t.name not in denied for p in t.partitions]

    def give(codes: dict, code: int) -> None:
        answer.give(OffsetCommitResponse(0, tuple(
            OffsetCommitResponseTopic(t.name, tuple(
                OffsetCommitResponsePartition(p.partition_index, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED
                                              if t.name in denied else
                                              code or codes.get((t.name, p.partition_index), 0))
                for p in t.partitions))
            for t in req.topics)))

    apis.groups.commit(req.group_id, req.generation_id, req.member_id, req.group_instance_id, items, give)
    return answer.result()


def error(req: OffsetCommitRequest, code: int, ctx) -> OffsetCommitResponse:
    return OffsetCommitResponse(0, tuple(OffsetCommitResponseTopic(
        t.name, tuple(OffsetCommitResponsePartition(p.partition_index, code) for p in t.partitions))
        for t in req.topics))
