"""Fetch (1): whole record batches of the partitions this broker leads, by ``sendfile``, with long polling.

As Kafka's ``ReplicaManager.fetchMessages``:

- per partition, the batches from the one holding ``fetch_offset`` up to the high watermark, at most
  ``partition_max_bytes``, and at most ``max_bytes`` (v3+) for the whole response; the first partition
  with data gets at least one whole batch even when it is larger (KIP-74), the later ones only what
  fits. The batches are sent from the segment file (a :class:`~ingest.broker.reply.FileRegion`); no
  record is looked at;
- v0-v3 read old formats: the batches are converted down to magic 0 (v0, v1) or 1 (v2, v3) message
  sets (:func:`ingest.records.convert.down_convert`: per-record work, for old clients only); below v10
  a zstd batch cannot be expressed: UNSUPPORTED_COMPRESSION_TYPE (76) for that partition;
- the answer carries the high watermark, the last stable offset (= the high watermark: no
  transactions) and the log start offset; an offset outside ``[log start, log end]`` is
  OFFSET_OUT_OF_RANGE (1) for that partition; a partition this broker does not lead
  NOT_LEADER_OR_FOLLOWER (6), an unknown one UNKNOWN_TOPIC_OR_PARTITION (3); v9+ ``current_leader_epoch``
  is checked (FENCED_LEADER_EPOCH 74 / UNKNOWN_LEADER_EPOCH 75);
- with less than ``min_bytes`` and no error, the answer waits up to ``max_wait_ms`` in the broker's
  purgatory (:mod:`ingest.broker.delayed`), woken by every append to one of its partitions; the
  connection's later requests are answered after it (the reply keeps its place);
- no fetch sessions (KIP-227): ``session_id`` 0 in every answer, so clients keep sending full fetches.

A follower's fetch (``replica_id`` >= 0, a broker copying a partition of a Kafka cluster topic, D4) reads up
to the leader's log end instead of the high watermark, and tells the leader the follower's log end (its
``fetch_offset``, recorded once per request: ``follower_fetch`` of the served partition), from which the
leader moves the high watermark and the in-sync set; its ``current_leader_epoch`` must be the leader's.
With the leader's replication throttle (:mod:`ingest.broker.replication_quota`), a throttled partition's
answer to a follower outside its in-sync set is empty while the leader's quota is exceeded (Kafka's
``shouldLeaderThrottle``), and the bytes sent to followers of every throttled partition are recorded.
An OFFSET_OUT_OF_RANGE answer to a follower carries the leader's log start offset, so that a follower
below it restarts there. Without ZooKeeper there are no followers: such a fetch is served like a consumer's.

With an authorizer (:mod:`ingest.broker.kafka.authorization`), as Kafka's ``KafkaApis.handleFetchRequest``:
a follower's fetch needs ClusterAction on the cluster and the registered principal of the broker it names
(otherwise every partition is answered CLUSTER_AUTHORIZATION_FAILED (31) and nothing of it is recorded,
so nothing counts toward the high watermark or the in-sync set); a consumer's needs Read on each topic
(TOPIC_AUTHORIZATION_FAILED (29) for the partitions of a topic it may not read).
"""
from __future__ import annotations

import dataclasses
import time

from ingest.broker.delayed import DelayedOp
from ingest.broker.kafka import authorization
from ingest.broker.reply import FileRegion, Reply
from ingest.errors import IngestError, StaleLeaderEpochError, UnknownLeaderEpochError, UnsupportedCompressionError
from ingest.records.batch import ATTRIBUTES_OFFSET, CODEC_MASK, iter_batches
from ingest.records.compression import ZSTD
from ingest.records.convert import down_convert
from ingest.records.validation import default_inflate_limit
from ingest.wire.errors import KafkaErrorCode, kafka_code
from ingest.wire.kafka.fetch import FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData

MAX_WAIT_MS = 300_000   # a longer max_wait_ms waits this long (a bound, not a promise)
ZSTD_FETCH_VERSION = 10


def check_epoch(current: int, asked: int) -> None:
    """A request's ``current_leader_epoch`` against the partition's (-1: not checked).

    Raises:
        StaleLeaderEpochError: an older epoch (FENCED_LEADER_EPOCH).
        UnknownLeaderEpochError: a newer one (UNKNOWN_LEADER_EPOCH).
    """
    if asked < 0 or asked == current:
        return
    if asked < current:
        raise StaleLeaderEpochError(f"the request's leader epoch {asked} is older than the partition's {current}")
    raise UnknownLeaderEpochError(f"the request's leader epoch {asked} is newer than the partition's {current}")


def code_of(exc: IngestError) -> int:
    return int(kafka_code(exc))


class _Read:
    """One attempt at the whole fetch: every partition's answer and the bytes gathered."""

    __slots__ = ("answers", "size", "errors", "regions")

    def __init__(self) -> None:
        self.answers: list[tuple[str, list[PartitionData]]] = []
        self.size = 0
        self.errors = False
        self.regions: list[FileRegion] = []

    def release(self) -> None:
        for r in self.regions:
            rel, r.release = r.release, None
            if rel is not None:
                rel()
        self.regions = []


def _read(apis, req: FetchRequest, ctx, record: bool = False) -> _Read:
    """Every partition's answer; ``record``: a follower's position is recorded (the request's first read)."""
    out = _Read()
    budget = req.max_bytes if ctx.version >= 3 else 2 ** 31 - 1
    first = True
    for t in req.topics:
        parts = []
        for p in t.partitions:
            parts.append(_partition(apis, ctx, t.topic, p, out, budget - out.size, first, req.replica_id, record))
            if out.size:
                first = False
        out.answers.append((t.topic, parts))
    return out


def _partition(apis, ctx, topic: str, p, out: _Read, budget: int, first: bool, replica_id: int = -1,
               record: bool = False) -> PartitionData:
    sp = None
    try:
        sp = apis.cluster.leader(topic, p.partition)
        check_epoch(sp.leader_epoch(), p.current_leader_epoch)
        follower = replica_id >= 0 and hasattr(sp, "follower_fetch")
        if follower and record:
            sp.follower_fetch(replica_id, p.current_leader_epoch, p.fetch_offset)
        hw = sp.high_watermark()
        lg = sp.log
        start = lg.start_offset
        limit = lg.log_end if follower else hw
        max_bytes = max(0, min(p.partition_max_bytes, budget))
        if follower and sp.leader_throttled(replica_id):
            return PartitionData(p.partition, 0, hw, hw, start)
        sl = lg.read(p.fetch_offset, max_bytes, limit, min_one=first)
    except IngestError as exc:
        out.errors = True
        code = code_of(exc)
        if replica_id >= 0 and sp is not None and code == KafkaErrorCode.OFFSET_OUT_OF_RANGE:
            # a follower learns where the leader's log starts (below it: restart there)
            return PartitionData(p.partition, code, -1, -1, sp.log.start_offset)
        apis.refusals.warning(ctx.client, f"Fetch {KafkaErrorCode(code).name}",
                              "client %s: Fetch v%d of %s-%d at %d refused (%s): %s", ctx.client, ctx.version, topic,
                              p.partition, p.fetch_offset, KafkaErrorCode(code).name, exc)
        return PartitionData(p.partition, code, -1, -1, -1)
    records: object = b""
    if sl.length:
        if ctx.version < ZSTD_FETCH_VERSION:
            try:
                records = _old_format(ctx.version, sl, lg)
            except IngestError as exc:
                sl.release()
                out.errors = True
                return PartitionData(p.partition, code_of(exc), hw, hw, start)
        else:
            records = FileRegion(sl.fileno(), sl.position, sl.length, sl.release)
            out.regions.append(records)
        out.size += len(records)
        apis.metrics.fetched(topic, len(records))
        if follower:
            sp.record_replicated(len(records))
    else:
        sl.release()
    return PartitionData(p.partition, 0, hw, hw, start, records=records)


def _old_format(version: int, sl, lg):
    """The slice for a Fetch below v10: as it is (v4-v9: batches v2, refused when zstd) or converted down
    (v0-v3). The slice is released here."""
    try:
        data = sl.read_bytes()
    finally:
        sl.release()
    for _pos, head in iter_batches(data):
        if head.attributes & CODEC_MASK == ZSTD:
            raise UnsupportedCompressionError(f"Fetch v{version} cannot carry zstd-compressed batches (v10 and later"
                                              " can)")
    if version >= 4:
        return data
    return down_convert(data, 0 if version < 2 else 1,
                        inflate_limit=default_inflate_limit(lg.settings.max_message_bytes))


def _response(read: _Read) -> FetchResponse:
    return FetchResponse(0, 0, 0, tuple(FetchableTopicResponse(name, tuple(parts)) for name, parts in read.answers))


def handle(apis, req: FetchRequest, ctx):
    if authorization.enabled(apis):
        if req.replica_id >= 0:
            if not authorization.replica(apis, ctx, req.replica_id):
                return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx, top_level=False)
        else:
            denied = [t for t in req.topics if not authorization.topic(apis, ctx, authorization.READ, t.topic)]
            if denied:
                return _partly(apis, req, ctx, denied)
    return _serve(apis, req, ctx)


def _partly(apis, req: FetchRequest, ctx, denied):
    """The allowed topics read (at once: an answer with errors does not wait), the partitions of the
    ``denied`` topics answered TOPIC_AUTHORIZATION_FAILED."""
    refused = {id(t) for t in denied}
    read = _read(apis, dataclasses.replace(req, topics=tuple(t for t in req.topics if id(t) not in refused)), ctx,
                 record=True)
    code = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED
    tail = tuple(FetchableTopicResponse(t.topic, tuple(PartitionData(p.partition, code) for p in t.partitions))
                 for t in denied)
    return ctx.reply(FetchResponse(0, 0, 0, _response(read).responses + tail))


def _serve(apis, req: FetchRequest, ctx):
    read = _read(apis, req, ctx, record=True)
    if read.errors or read.size >= req.min_bytes or req.max_wait_ms <= 0:
        return ctx.reply(_response(read))
    read.release()
    reply = Reply.deferred()

    def attempt(final: bool) -> bool:
        again = _read(apis, req, ctx)
        if not final and not again.errors and again.size < req.min_bytes:
            again.release()
            return False
        reply.complete(ctx.reply(_response(again)).parts)
        return True

    op = DelayedOp(time.monotonic() + min(req.max_wait_ms, MAX_WAIT_MS) / 1000.0,
                   lambda: attempt(False), lambda: attempt(True))
    apis.purgatory.watch([("fetch", t.topic, p.partition) for t in req.topics for p in t.partitions], op)
    return reply


def error(req: FetchRequest, code: int, ctx, top_level: bool = True) -> FetchResponse:
    return FetchResponse(0, 0 if ctx.version < 7 or not top_level else code, 0, tuple(
        FetchableTopicResponse(t.topic, tuple(PartitionData(p.partition, code) for p in t.partitions))
        for t in req.topics))
