"""AppendAt (private api key 10000): the mirror's conditional append of batches that keep their offsets.

The decision is :mod:`ingest.broker.append_at`'s (the 0.7 port's APPEND_AT decides the same way);
this module is its Kafka-port form (:mod:`ingest.wire.kafka.append_at`): the partition's leader
appends with :meth:`append_copied <ingest.broker.kafka.cluster.ServedPartition.append_copied>` (the
batches' offsets kept, the leader epoch stamped, a source gap kept as a gap); a log end other than
``expected_offset`` answers OFFSET_MISMATCH (10000) with the log end; acks -1 waits for the in-sync
replicas in the purgatory as Produce does (NOT_ENOUGH_REPLICAS, ..._AFTER_APPEND, REQUEST_TIMED_OUT).
A partition not led here answers NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE, the query too. A
topic is never created by AppendAt (the mirror creates its target topics through ZooKeeper). With an
authorizer it needs ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED (31) otherwise): it writes
offsets a producer never may, as a broker's replica does (docs/security.md).
"""
from __future__ import annotations

import time

from ingest.broker import append_at
from ingest.broker.delayed import DelayedOp
from ingest.broker.kafka import authorization
from ingest.broker.kafka.produce import MAX_ACK_TIMEOUT_MS, Produced
from ingest.broker.reply import Reply
from ingest.errors import OffsetMismatchError
from ingest.wire.errors import KafkaErrorCode, kafka_code
from ingest.wire.kafka.append_at import AppendAtRequest, AppendAtResponse


def handle(apis, req: AppendAtRequest, ctx):
    if not authorization.cluster(apis, ctx, authorization.CLUSTER_ACTION):   # the mirror: a broker-only API
        return AppendAtResponse(KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
    what = f"AppendAt to {req.topic}-{req.partition}"
    records = req.records or b""
    query = append_at.is_query(what, req.acks, req.expected_offset, len(records))
    sp = apis.cluster.leader(req.topic, req.partition)
    lg = sp.log
    if query:
        return AppendAtResponse(0, lg.log_end, lg.start_offset)
    try:
        appended = sp.append_copied(records, req.acks, req.expected_offset)
    except OffsetMismatchError as exc:
        end = append_at.refused(ctx.client, what, req.expected_offset, exc)
        return AppendAtResponse(KafkaErrorCode.OFFSET_MISMATCH, end, lg.start_offset)
    info = appended.info
    apis.metrics.produced(req.topic, Produced(info.records, info.size))
    apis.wake_fetches(req.topic, req.partition)
    end = info.last_offset + 1
    if appended.outcome is None:
        return AppendAtResponse(0, end, lg.start_offset)
    return _deferred(apis, req, ctx, appended.outcome, end, lg)


def _deferred(apis, req: AppendAtRequest, ctx, outcome, end: int, lg):
    """The acks=-1 answer once the in-sync replicas have the batches (or why not), REQUEST_TIMED_OUT after
    ``timeout_ms``."""
    reply = Reply.deferred()

    def decide(final: bool) -> bool:
        o = outcome()
        if o is None and not final:
            return False
        if o is True:
            answer = AppendAtResponse(0, end, lg.start_offset)
        else:
            code = KafkaErrorCode.REQUEST_TIMED_OUT if o is None else kafka_code(o)
            apis.refusals.warning(ctx.client, f"AppendAt acks=-1 {code.name}", "client %s: acks=-1 AppendAt to "
                                  "%s-%d ending at %d not acknowledged (%s)", ctx.client, req.topic, req.partition,
                                  end, code.name)
            answer = AppendAtResponse(code, -1, lg.start_offset)
        reply.complete(ctx.reply(answer).parts)
        return True

    op = DelayedOp(time.monotonic() + max(0, min(req.timeout_ms, MAX_ACK_TIMEOUT_MS)) / 1000.0,
                   lambda: decide(False), lambda: decide(True))
    apis.purgatory.add(("produce", req.topic, req.partition), op)
    return reply


def error(req: AppendAtRequest, code: int, ctx) -> AppendAtResponse:
    return AppendAtResponse(code, -1, -1)
