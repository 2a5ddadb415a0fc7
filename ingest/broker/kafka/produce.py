"""Produce (0): a producer's record batch per partition, validated once and appended with its offsets assigned.

Per partition, as Kafka's ``KafkaApis.handleProduceRequest`` and ``LogValidator`` do, every refusal is
that partition's error code in the response and nothing of that partition is appended (the request's
other partitions are served):

- v3+ carry exactly one record batch v2 per partition (INVALID_RECORD otherwise); zstd needs v7+
  (UNSUPPORTED_COMPRESSION_TYPE); the batch is validated once (:meth:`KafkaLog.validate
  <ingest.broker.kafka_log.KafkaLog.validate>`: framing, CRC-32C, counts, record lengths, a
  compressed batch inflated under a limit) and stored as sent, its base offset and partition leader
  epoch set by the log;
- v0-v2 carry legacy message sets (magic 0, and 1 from v2): validated and up-converted to one v2
  batch (:mod:`ingest.records.convert`: per-record work, for old clients only);
- a request with transactional batches is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) as a
  whole: this broker has no transaction coordinator (Kafka answers so to a producer not authorized
  for transactions);
- ``acks`` must be -1, 0 or 1 (INVALID_REQUIRED_ACKS, 21). acks 0 gets no response; if any
  partition failed, the connection is closed instead, as Kafka does, so that the producer refreshes
  its metadata. acks 1 is answered once appended; acks -1 once the in-sync replicas have the batch
  (at once for a partition without followers), or REQUEST_TIMED_OUT after ``timeout_ms``;
- a topic this broker does not know is created as a Kafka topic when ``auto.create.topics.enable``
  allows it (without ZooKeeper at once; with ZooKeeper its assignment is written on the coordination
  thread and the partition answered LEADER_NOT_AVAILABLE until its leader is elected); every partition
  is resolved before the first append, so a request served again there appends nothing twice.

An idempotent producer's batch (KIP-98) is checked by the partition's log against the producer's epoch
and last batches (:mod:`ingest.broker.producer_state`): a retried batch already stored is answered with
its first offset as a success and not appended again (acks=-1 still waits until the in-sync replicas
have the stored batch), a sequence gap is refused OUT_OF_ORDER_SEQUENCE_NUMBER (45), a fenced epoch
INVALID_PRODUCER_EPOCH (47) (docs/kafka-protocol.md, "Idempotent producers").

With an authorizer, each topic needs Write (TOPIC_AUTHORIZATION_FAILED (29) for its partitions, nothing
of them appended), and auto-creating a topic needs Create on the cluster or the topic (otherwise the
unknown topic stays UNKNOWN_TOPIC_OR_PARTITION), as Kafka's.
"""
from __future__ import annotations

import time
from typing import NamedTuple

from ingest.broker.delayed import DelayedOp
from ingest.broker.kafka import authorization
from ingest.broker.kafka_log import ProducedBatch
from ingest.broker.reply import Reply
from ingest.errors import (InvalidRecordError, InvalidRequiredAcksError, IngestError, LeaderNotAvailableError,
                           NeedsZooKeeperError, UnknownTopicError, UnsupportedCompressionError)
from ingest.records.batch import ATTRIBUTES_OFFSET, CODEC_MASK, MAGIC, MAGIC_OFFSET, TRANSACTIONAL_MASK, read_header
from ingest.records.compression import ZSTD
from ingest.records.convert import up_convert
from ingest.records.validation import default_inflate_limit
from ingest.wire.errors import KafkaErrorCode, kafka_code
from ingest.wire.kafka.produce import (PartitionProduceResponse, ProduceRequest, ProduceResponse,
                                       TopicProduceResponse)

MAX_ACK_TIMEOUT_MS = 300_000
LEGACY_MAGIC_OFFSET = 16   # offset:int64 size:int32 crc:uint32, then magic


class Produced(NamedTuple):
    """What the broker metrics count of an append: records and bytes."""

    count: int
    size: int


def _check_acks(acks: int) -> None:
    if acks not in (-1, 0, 1):
        raise InvalidRequiredAcksError(f"acks {acks} is not allowed: use -1 (all in-sync replicas), 1 (the leader) "
                                       "or 0 (no response)")


def _transactional(req: ProduceRequest) -> bool:
    for topic in req.topic_data:
        for part in topic.partition_data:
            rec = part.records
            if rec is not None and len(rec) > ATTRIBUTES_OFFSET + 1 and rec[MAGIC_OFFSET] == MAGIC \
                    and rec[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK:
                return True
    return False


def batch_for(version: int, records, log) -> ProducedBatch:
    """The partition's record set validated for ``log`` (and up-converted for v0-v2).

    Raises:
        InvalidRecordError, CorruptRecordError, UnsupportedCompressionError, RecordTooLargeError, ...
    """
    n = 0 if records is None else len(records)
    if n == 0:
        what = "one record batch" if version >= 3 else "messages"
        raise InvalidRecordError(f"Produce v{version}: the partition's record set is empty; it must hold {what}")
    if version >= 3:
        magic = records[MAGIC_OFFSET] if n > MAGIC_OFFSET else None
        if magic != MAGIC:
            raise InvalidRecordError(f"Produce v{version} carries record batches v2 (magic {MAGIC}) only; this "
                                     f"record set has magic {magic}")
        if version < 7 and n > ATTRIBUTES_OFFSET + 1 and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == ZSTD:
            raise UnsupportedCompressionError(f"Produce v{version} may not use zstd compression (v7 and later may)")
        return log.validate(records)
    magic = records[LEGACY_MAGIC_OFFSET] if n > LEGACY_MAGIC_OFFSET else None
    highest = 0 if version < 2 else 1
    if magic is None or magic > highest:
        raise InvalidRecordError(f"Produce v{version} carries message sets of magic 0"
                                 f"{'' if highest == 0 else ' or 1'}; this one has magic {magic}")
    s = log.settings
    data = up_convert(records, max_message_size=s.max_message_bytes,
                      inflate_limit=default_inflate_limit(s.max_message_bytes))
    return ProducedBatch(data, read_header(data), s)


def _served(apis, ctx, topic: str, partition: int):
    cluster = apis.cluster
    try:
        return cluster.leader(topic, partition)
    except UnknownTopicError:
        if not apis.config.get("auto.create.topics.enable", True):
            raise
        if not authorization.create_topic(apis, ctx, topic):
            raise
        if not cluster.create_topic(topic):
            raise LeaderNotAvailableError(f"topic {topic!r} was just created; its leaders are being elected, "
                                          "retry") from None
        return cluster.leader(topic, partition)


def handle(apis, req: ProduceRequest, ctx):
    acks = req.acks
    parts = [(t.name, p.index, p.records) for t in req.topic_data for p in t.partition_data]
    answers: dict[tuple[str, int], PartitionProduceResponse] = {}
    waiting: dict[tuple[str, int], tuple[object, int, int]] = {}   # (outcome, base offset, log start)
    try:
        _check_acks(acks)
        if _transactional(req):
            return _everywhere(req, KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ctx, apis,
                               "transactional batches: this broker has no transaction coordinator")
        served = {}
        writable: dict[str, bool] = {}
        for topic, index, _records in parts:          # every partition first: nothing appended yet
            if topic not in writable:
                writable[topic] = authorization.topic(apis, ctx, authorization.WRITE, topic)
            if not writable[topic]:
                answers[(topic, index)] = PartitionProduceResponse(index, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                                   -1)
                continue
            try:
                served[(topic, index)] = _served(apis, ctx, topic, index)
            except NeedsZooKeeperError:
                raise
            except IngestError as exc:
                answers[(topic, index)] = _refused(apis, ctx, topic, index, exc)
        for topic, index, records in parts:
            sp = served.get((topic, index))
            if sp is None:
                continue
            try:
                batch = batch_for(ctx.version, records, sp.log)
                appended = sp.append(batch, acks)
            except IngestError as exc:
                answers[(topic, index)] = _refused(apis, ctx, topic, index, exc)
                continue
            info = appended.info
            apis.metrics.produced(topic, Produced(info.records, info.size))
            if apis.tier_counts is not None:   # the broker tier of the audit counts what producers handed it
                apis.tier_counts.appended(topic, index, sp.leader_epoch(), batch.data, batch.header,
                                          info.first_offset, info.log_append_time)
            apis.wake_fetches(topic, index)
            if appended.outcome is not None:
                waiting[(topic, index)] = (appended.outcome, info.first_offset, sp.log.start_offset)
            else:
                answers[(topic, index)] = PartitionProduceResponse(index, 0, info.first_offset, info.log_append_time,
                                                                   sp.log.start_offset)
    except InvalidRequiredAcksError as exc:
        return _everywhere(req, kafka_code(exc), ctx, apis, str(exc))
    if acks == 0:
        # no response exists; an error closes the connection so that the producer refreshes its metadata
        return Reply([], close_after=True) if answers and any(a.error_code for a in answers.values()) else None
    if not waiting:
        return _response(req, answers)
    return _deferred(apis, req, ctx, answers, waiting)


def _refused(apis, ctx, topic: str, index: int, exc: IngestError) -> PartitionProduceResponse:
    code = kafka_code(exc)
    apis.refusals.warning(ctx.client, f"Produce {code.name}", "client %s: Produce v%d to %s-%d refused (%s): %s",
                          ctx.client, ctx.version, topic, index, code.name, exc)
    return PartitionProduceResponse(index, code, -1)


def _everywhere(req: ProduceRequest, code: int, ctx, apis, why: str):
    apis.refusals.warning(ctx.client, f"Produce {KafkaErrorCode(code).name}", "client %s: Produce v%d refused (%s): %s",
                          ctx.client, ctx.version, KafkaErrorCode(code).name, why)
    return error(req, code, ctx)


def _response(req: ProduceRequest, answers) -> ProduceResponse:
    return ProduceResponse(tuple(
        TopicProduceResponse(t.name, tuple(answers.get((t.name, p.index)) or PartitionProduceResponse(p.index, 0, -1)
                                           for p in t.partition_data))
        for t in req.topic_data), 0)


def _deferred(apis, req: ProduceRequest, ctx, answers, waiting) -> Reply:
    """An acks=-1 answer completed once every waiting partition's in-sync replicas have its batch (or
    one failed), or with REQUEST_TIMED_OUT for those still waiting after ``timeout_ms``."""
    reply = Reply.deferred()

    def decide(final: bool) -> bool:
        done = dict(answers)
        for key, (outcome, offset, start) in waiting.items():
            o = outcome()
            if o is None and not final:
                return False
            if o is True:
                done[key] = PartitionProduceResponse(key[1], 0, offset, -1, start)
            else:
                code = KafkaErrorCode.REQUEST_TIMED_OUT if o is None else kafka_code(o)
                apis.refusals.warning(ctx.client, f"Produce acks=-1 {code.name}", "client %s: acks=-1 write to %s-%d "
                                      "at %d not acknowledged (%s)", ctx.client, key[0], key[1], offset, code.name)
                done[key] = PartitionProduceResponse(key[1], code, -1)
        reply.complete(ctx.reply(_response(req, done)).parts)
        return True

    op = DelayedOp(time.monotonic() + max(0, min(req.timeout_ms, MAX_ACK_TIMEOUT_MS)) / 1000.0,
                   lambda: decide(False), lambda: decide(True))
    for topic, index in waiting:
        apis.purgatory.add(("produce", topic, index), op)
    return reply


def error(req: ProduceRequest, code: int, ctx) -> ProduceResponse | Reply:
    if req.acks == 0:
        return Reply([], close_after=True)   # no response exists: closing tells the producer
    return ProduceResponse(tuple(TopicProduceResponse(t.name, tuple(PartitionProduceResponse(p.index, code, -1)
                                                                     for p in t.partition_data))
                                 for t in req.topic_data), 0)
