"""OffsetFetch (9): a group's committed positions (-1 where none is committed).

v0-v7 ask for one group (v2+: a null topic list means every committed partition, and a group-level
error code); v8+ for several groups, each answered on its own. A partition without a commit is
answered offset -1, metadata "" and no error, as Kafka answers it. With an authorizer, each group needs
Describe (GROUP_AUTHORIZATION_FAILED (30) otherwise) and each topic Describe (TOPIC_AUTHORIZATION_FAILED
(29) for its partitions; left out of an answer for every committed partition), as Kafka's.
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.errors import GroupRequestError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.offset_fetch import (NO_OFFSET, OffsetFetchRequest, OffsetFetchResponse,
                                            OffsetFetchResponseGroup, OffsetFetchResponsePartition,
                                            OffsetFetchResponseTopic)


def _topics(apis, ctx, group_id: str, topics) -> tuple[int, tuple[OffsetFetchResponseTopic, ...]]:
    if not authorization.group(apis, ctx, authorization.DESCRIBE, group_id):
        code = KafkaErrorCode.GROUP_AUTHORIZATION_FAILED
        return code, tuple(OffsetFetchResponseTopic(t.name, tuple(
            OffsetFetchResponsePartition(p, NO_OFFSET, -1, "", code) for p in t.partition_indexes))
            for t in topics or ())
    if topics is not None and authorization.enabled(apis):
        denied = [t for t in topics if not authorization.topic(apis, ctx, authorization.DESCRIBE, t.name)]
        if denied:
            code = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED
            err, found = _topics(apis, ctx, group_id, [t for t in topics if t not in denied])
            return err, found + tuple(OffsetFetchResponseTopic(t.name, tuple(
                OffsetFetchResponsePartition(p, NO_OFFSET, -1, "", code) for p in t.partition_indexes))
                for t in denied)
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    try:
        got = apis.groups.fetch_offsets(group_id, wanted)
    except GroupRequestError as exc:
        if topics is None:
            return exc.code, ()
        return exc.code, tuple(OffsetFetchResponseTopic(t.name, tuple(
            OffsetFetchResponsePartition(p, NO_OFFSET, -1, "", exc.code) for p in t.partition_indexes))
            for t in topics)
    if wanted is None:
        wanted = sorted(k for k in got if authorization.topic(apis, ctx, authorization.DESCRIBE, k[0], audit=False))
    by_topic: dict[str, list] = {}
    for topic, p in wanted:
        c = got.get((topic, p))
        by_topic.setdefault(topic, []).append(
            OffsetFetchResponsePartition(p, NO_OFFSET, -1, "", 0) if c is None
            else OffsetFetchResponsePartition(p, c.offset, c.leader_epoch, c.metadata, 0))
    return 0, tuple(OffsetFetchResponseTopic(t, tuple(ps)) for t, ps in by_topic.items())


def handle(apis, req: OffsetFetchRequest, ctx) -> OffsetFetchResponse:
    if ctx.version >= 8:
        groups = []
        for g in req.groups:
            code, topics = _topics(apis, ctx, g.group_id, g.topics)
            groups.append(OffsetFetchResponseGroup(g.group_id, topics, code))
        return OffsetFetchResponse(0, (), 0, tuple(groups))
    code, topics = _topics(apis, ctx, req.group_id, req.topics)
    if code and ctx.version < 2 and not topics:
        topics = ()
    return OffsetFetchResponse(0, topics, code if ctx.version >= 2 else 0)


def error(req: OffsetFetchRequest, code: int, ctx) -> OffsetFetchResponse:
    if ctx.version >= 8:
        return OffsetFetchResponse(0, (), 0, tuple(OffsetFetchResponseGroup(g.group_id, (), code) for g in req.groups))
    topics = tuple(OffsetFetchResponseTopic(t.name, tuple(OffsetFetchResponsePartition(p, NO_OFFSET, -1, "", code)
                                                          for p in t.partition_indexes)) for t in (req.topics or ()))
    return OffsetFetchResponse(0, topics, code if ctx.version >= 2 else 0)
