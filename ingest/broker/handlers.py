"""Request handlers: one table from request type to handler, over a LogManager.

``BrokerHandlers.dispatch(kind, body, client)`` is what the network layer
(``processor.py``) calls for every frame. Each handler decodes its request with
``protocol.py``, acts on the :class:`~ingest.broker.log_manager.LogManager`
and returns a :class:`~ingest.broker.reply.Reply` (or ``None`` for PRODUCE
and MULTIPRODUCE, which have no response).

Errors: an :class:`~ingest.errors.IngestError` raised while serving a request
becomes its wire ``code``; any other exception becomes ``UNKNOWN`` (-1) and is
logged with its traceback. Refused requests are logged at WARNING through a
:class:`~ingest.ratelimited_log.RateLimitedLog` (first one per client host and
reason, then a count per 30 s), so a client that repeats one mistake cannot
fill the disk with log lines; each line names the client address. A refused
request that expects no response (PRODUCE, MULTIPRODUCE: a bad CRC, an
unknown magic, a bad topic...) gets none and its connection stays open for the
next request (:data:`KEEP_CONNECTION_AFTER`); one refused because of where the
partition is served (not the leader, the log offline...) closes it, so that
the client re-discovers. Either is logged once per connection and counted by
reason, per connection and broker-wide (:mod:`ingest.broker.refusals`; the
summary is logged when the connection closes). A handler bug on such a
request (not an ``IngestError``) closes the connection too. Every other failure gets an
error response and the connection stays usable. A FETCH (or MULTIFETCH part)
at or inside a damaged range of a log is answered CORRUPT_RANGE with the next
valid offset as its body (``FetchResponse.corrupt_range``, docs/protocol.md),
so that a consumer can skip the damage (logged like a refusal: once per client
host per 30 s, then counted). Nothing is appended unless
the whole request is valid: MULTIPRODUCE validates every topic, partition and
message set, and gets (or creates) every log, before appending the first. A
log is created on a topic's first produce within the limits of the
LogManager (``auto.create.topics.enable``, ``max.topics``,
``max.broker.partitions``: ``TOPIC_CREATION_REFUSED`` beyond them). Each set is validated once, here,
outside the log lock (:meth:`~ingest.records.message_batch.MessageBatch.for_append`).

What PRODUCE_ACK's success promises: the set was written to its log (the
page cache: it survives a broker crash, not a machine crash) and, if it
completed ``log.flush.interval`` messages, fsynced. A write or flush that
fails answers the error instead (``LOG_OFFLINE`` once the log went offline),
and an offline log acknowledges nothing more.

ZooKeeper is never called on a network thread. A produce (any kind, APPEND_AT
too) naming a topic this broker has neither a log nor a replicated assignment
for needs it (is the topic replicated? create it replicated?): the handler
raises :class:`~ingest.errors.NeedsZooKeeperError` before doing anything, and
``dispatch`` hands the request to the coordination thread
(:mod:`ingest.broker.coordinated`), which runs the same handler again with
ZooKeeper calls bounded by the request's deadline (``zk.connectiontimeout.ms``;
COORDINATION_UNAVAILABLE after it). The network thread gets a deferred reply
that holds the connection until then; a held connection is not read either, so
its close is noticed only after that answer (its refusals are all counted when
``connection_closed`` summarizes them).

Thread-safety: handlers hold no mutable state of their own besides the set of
topics already announced to ZooKeeper (guarded by a lock); they may run
concurrently on several network threads and the coordination thread. The
LogManager and Log guard their own state.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from ingest.wire import protocol as p
from ingest.broker.mirror_handlers import MirrorHandlers
from ingest.wire.protocol import RequestType
from ingest.broker.replication_handlers import ReplicationHandlers, check_acks
from ingest.broker.refusals import ProduceRefusals
from ingest.broker.reply import FileRegion, Reply
from ingest.broker.topic_kind import TopicKind
from ingest.broker.topics import validate_partition, validate_topic
from ingest.errors import (
    ClusterAuthorizationFailedError,
    CorruptRangeError,
    IngestError,
    InvalidFetchSizeError,
    LeaderNotAvailableError,
    MalformedRequestError,
    NeedsZooKeeperError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    UnknownRequestTypeError,
)
from ingest.metrics.broker import NO_METRICS
from ingest.ratelimited_log import RateLimitedLog
from ingest.records.message_batch import MessageBatch
from ingest.records.message_codecs import MAX_INFLATED_SIZE
from ingest.wire.errors import ErrorCode, code_for
from ingest.wire.frames import INT16

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_S = 30.0

KEEP_CONNECTION_AFTER = frozenset({
    ErrorCode.INVALID_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.MALFORMED_REQUEST, ErrorCode.INVALID_TOPIC,
    ErrorCode.WRONG_PARTITION, ErrorCode.TOPIC_CREATION_REFUSED,
})
"""Refusals of a responseless request's own content: the connection serves the next request.
Any other refusal (not the leader, no leader, the log offline, disk full) is about where the
partition is served, and the next request would be dropped the same way: the connection is
closed, the only signal that makes a fire-and-forget client re-discover (as Kafka does for
acks=0)."""

BROKER_ONLY = frozenset({RequestType.REPLICA_FETCH, RequestType.REPLICA_FETCHES, RequestType.APPEND_AT})
"""The 0.7 request types only a broker (or the mirror, acting for the target cluster) sends: a replica's
fetch of one partition or of many (which moves the high watermark and the in-sync set), the conditional append that keeps offsets.
DELETED_SEGMENTS is not one: it reads what OFFSETS and FETCH of the same partition already show anyone on
the port, and the loader and the mirror ask it as readers (docs/security.md, "The 0.7 port")."""

MAX_RESPONSE_BYTES = 2**31 - 1 - 64
"""A response frame's size must fit its int32 size field."""


class BrokerHandlers:
    """The request-type -> handler table of one broker.

    Args:
        log_manager: the broker's logs (``get_or_create_log``, ``get_log``, ``topics``).
        config: the broker config (``num.partitions``, ``topic.partition.count.map``,
            ``max.message.size``).
        broker_id, host, port: what METADATA reports about this broker.
        on_new_topic: called once per topic the first time this broker serves
            a produce to it (the ZooKeeper registry announces it); must be quick.
    """

    def __init__(self, log_manager, config, *, broker_id: int, host: str, port: int,
                 on_new_topic: Callable[[str, int], None] | None = None) -> None:
        self.logs = log_manager
        self.replicas = None       # the ReplicaManager (ZooKeeper on), or None
        self.coordinated = None    # the CoordinatedRequests serving requests that need ZooKeeper (ZooKeeper on)
        self.replication: ReplicationHandlers | None = None
        self.config = config
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.on_new_topic = on_new_topic
        self._announced: set[str] = set()
        self._announce_lock = threading.Lock()
        self._max_message_size = config.get("max.message.size", 1 << 62)
        # a compressed wrapper may not inflate beyond what one request frame may carry
        self._max_inflated_size = config.get("max.socket.request.bytes", MAX_INFLATED_SIZE)
        self.refusals = RateLimitedLog(log, interval_s=REFUSAL_LOG_INTERVAL_S)
        self.produce_refusals = ProduceRefusals()
        self.mirror = MirrorHandlers(self)
        self.refuse_broker_only = False
        """Security configured (an authorizer, or a listener other than PLAINTEXT): the 0.7 port answers the
        broker-only requests (:data:`BROKER_ONLY`) CLUSTER_AUTHORIZATION_FAILED; brokers send them over the
        inter-broker Kafka listener."""
        self.metrics = NO_METRICS   # counters (ingest.metrics.broker.BrokerMetrics when metrics.port is set)
        self.table: dict[int, Callable[[memoryview, str], Reply | None]] = {
            RequestType.PRODUCE: self.handle_produce,
            RequestType.FETCH: self.handle_fetch,
            RequestType.MULTIFETCH: self.handle_multifetch,
            RequestType.MULTIPRODUCE: self.handle_multiproduce,
            RequestType.OFFSETS: self.handle_offsets,
            RequestType.PRODUCE_ACK: self.handle_produce_ack,
            RequestType.METADATA: self.handle_metadata,
            RequestType.PRODUCE_ACKS: self.handle_produce_acks,
            RequestType.REPLICA_FETCH: self.handle_replica_fetch,
            RequestType.REPLICA_FETCHES: self.handle_replica_fetches,
            RequestType.TOPIC_METADATA: self.handle_topic_metadata,
            RequestType.APPEND_AT: self.mirror.append_at,
            RequestType.DELETED_SEGMENTS: self.mirror.deleted_segments,
        }

    def attach_replicas(self, replicas, coordinated) -> None:
        """Serve replicated topics through ``replicas`` (a ReplicaManager), set before serving; requests
        that need ZooKeeper go to ``coordinated`` (a started CoordinatedRequests)."""
        self.replicas = replicas
        self.coordinated = coordinated
        self.replication = ReplicationHandlers(self)

    # --- dispatch ----------------------------------------------------------------------

    def dispatch(self, kind: int, body: memoryview, client: str) -> Reply | None:
        if kind in BROKER_ONLY and self.refuse_broker_only:
            return self._refused(kind, ClusterAuthorizationFailedError(
                f"{_name(kind)} is refused on the 0.7 port of a broker with security configured: only brokers "
                "send it, over the inter-broker Kafka listener (docs/security.md, \"The 0.7 port\")"), client)
        return self._dispatch(kind, body, client)

    def serve_broker_only(self, kind: int, body: memoryview, client: str) -> Reply | None:
        """A request the Kafka listener's private keys carried and authorized (:mod:`ingest.broker.kafka.port07`:
        the :data:`BROKER_ONLY` ones and DELETED_SEGMENTS)."""
        return self._dispatch(kind, body, client)

    def _dispatch(self, kind: int, body: memoryview, client: str) -> Reply | None:
        handler = self.table.get(kind)
        if handler is None:
            exc = UnknownRequestTypeError(
                f"unknown request type {kind}; known types are {sorted(int(k) for k in self.table)}")
            code = code_for(exc)
            self.metrics.error(kind, code.name)
            self.refusals.warning(client, code.name, "client %s: %s", client, exc)
            return Reply([p.ErrorResponse(code).encode()])
        try:
            return handler(body, client)
        except NeedsZooKeeperError:
            # raised before anything was done: the coordination thread serves the request again
            data = memoryview(bytes(body))
            try:
                return self.coordinated.submit(lambda: self._serve(kind, handler, data, client),
                                               lambda exc: self._refused(kind, exc, client), len(data))
            except IngestError as exc:
                return self._refused(kind, exc, client)
        except IngestError as exc:
            return self._refused(kind, exc, client)
        except Exception:  # noqa: BLE001 - a bug must not take the broker down
            return self._failed(kind, client)

    def _serve(self, kind: int, handler, body: memoryview, client: str) -> Reply | None:
        """``handler`` with every failure answered (on the coordination thread)."""
        try:
            return handler(body, client)
        except IngestError as exc:
            return self._refused(kind, exc, client)
        except Exception:  # noqa: BLE001 - a bug must not take the broker down
            return self._failed(kind, client)

    def _refused(self, kind: int, exc: IngestError, client: str) -> Reply | None:
        code = code_for(exc)
        self.metrics.error(kind, code.name)
        if kind in p.RESPONSELESS:  # no response exists: log once per connection and count
            keep = code in KEEP_CONNECTION_AFTER
            self.produce_refusals.refused(client, _name(kind), code.name, str(exc), closing=not keep)
            return None if keep else Reply([], close_after=True)
        self.refusals.warning(client, f"{_name(kind)} {code.name}", "client %s: %s request refused (%s): %s",
                              client, _name(kind), code.name, exc)
        return self.error_reply(kind, code)

    def _failed(self, kind: int, client: str) -> Reply:
        self.refusals.log(logging.ERROR, client, f"{_name(kind)} failed unexpectedly",
                          "client %s: %s request failed unexpectedly", client, _name(kind), exc_info=True)
        self.metrics.error(kind, ErrorCode.UNKNOWN.name)
        return self.error_reply(kind, ErrorCode.UNKNOWN)

    def connection_closed(self, client: str) -> None:
        """The network layer closed the connection from ``client``: summarize its refusals."""
        self.produce_refusals.closed(client)

    @staticmethod
    def error_reply(kind: int, code: int) -> Reply:
        if kind in p.RESPONSELESS:
            return Reply([], close_after=True)
        if kind in (RequestType.PRODUCE_ACK, RequestType.PRODUCE_ACKS, RequestType.APPEND_AT):
            return Reply([p.ProduceAckResponse(code, -1).encode()])
        return Reply([p.ErrorResponse(code).encode()])

    # --- helpers -----------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        """Partitions this broker has (or would create) for ``topic``: the log manager's one rule."""
        return self.logs.partition_count(topic)

    def zookeeper_deadline(self) -> float:
        """The deadline (monotonic) of the ZooKeeper calls serving the current request.

        Raises:
            NeedsZooKeeperError: on a network thread, which never calls ZooKeeper; the request is
                served on the coordination thread instead (see ``dispatch``).
        """
        if not self.coordinated.on_worker():
            raise NeedsZooKeeperError("this request needs ZooKeeper; it is served off the network thread")
        return self.coordinated.deadline

    def _log_for_write(self, topic: str, partition: int):
        if self.replicas is not None and not self.logs.has_topic(topic):
            # a bad name or partition is refused here, without asking ZooKeeper
            validate_partition(validate_topic(topic), partition, self.partition_count(topic))
            if self.replicas.is_replicated(topic) \
                    or self.replicas.replicated_in_zookeeper(topic, self.zookeeper_deadline()):
                # created in ZooKeeper a moment ago, before this broker's watch saw it: never a 0.7 log
                raise LeaderNotAvailableError(f"topic {topic!r} is a replicated topic this broker is still "
                                              "learning about; retry")
        log_ = self.logs.get_or_create_log(topic, partition)
        if self.on_new_topic is not None and topic not in self._announced:
            with self._announce_lock:
                first = topic not in self._announced
                self._announced.add(topic)
            if first:
                self.on_new_topic(topic, self.partition_count(topic))
        return log_

    def _log_for_read(self, topic: str, partition: int):
        """The log, or None for a valid topic-partition that has no data yet."""
        validate_topic(topic)
        self.logs.check_kind(topic, TopicKind.V07)   # a Kafka-format topic is the Kafka listener's
        log_ = self.logs.get_log(topic, partition)
        if log_ is None:
            validate_partition(topic, partition, self.partition_count(topic))
        return log_

    def _validated(self, req: p.ProduceRequest) -> MessageBatch:
        # Once per produced set, outside the log lock; Log.append trusts the result.
        return MessageBatch.for_append(req.message_set, max_message_size=self._max_message_size,
                                       max_inflated_size=self._max_inflated_size,
                                       destination=f"{req.topic}-{req.partition}")

    def _replica(self, topic: str, partition: int, *, create: bool = False):
        """The replica of a replicated partition (None for a Kafka 0.7 topic); with ``create``, a
        produce to an unknown topic may create a replicated one (``default.replication.factor``)."""
        if self.replicas is None:
            return None
        validate_topic(topic)
        part = self.replicas.partition(topic, partition)
        if part is None and create and self.replication.auto_create(topic):
            part = self.replicas.partition(topic, partition)
        return part

    def _append(self, req: p.ProduceRequest, acks: int = 1) -> int:
        part = self._replica(req.topic, req.partition, create=True)
        if part is not None:
            vs = self._validated(req)
            offset = part.append(vs, acks, self.replicas.min_isr)[0]
        else:
            # get_or_create_log validates the topic name and partition range
            log_ = self._log_for_write(req.topic, req.partition)
            vs = self._validated(req)
            offset = log_.append(vs)
        self.metrics.produced(req.topic, vs)
        return offset

    # --- handlers ------------------------------------------------------------------------

    def handle_produce(self, body: memoryview, client: str) -> None:
        self._append(p.ProduceRequest.decode(body))
        return None

    def handle_produce_ack(self, body: memoryview, client: str) -> Reply:
        offset = self._append(p.ProduceAckRequest.decode(body))
        return Reply([p.ProduceAckResponse(ErrorCode.NONE, offset).encode()])

    def handle_produce_acks(self, body: memoryview, client: str) -> Reply:
        return self.replication.produce_acks(p.ProduceAcksRequest.decode(body)) if self.replication \
            else self.handle_produce_ack_unreplicated(p.ProduceAcksRequest.decode(body))

    def handle_produce_ack_unreplicated(self, req: p.ProduceAcksRequest) -> Reply:
        """PRODUCE_ACKS on a broker without ZooKeeper: no replicas, so acks -1 is acks 1."""
        check_acks(req.required_acks)
        offset = self._append(req.produce)
        return Reply([p.ProduceAckResponse(ErrorCode.NONE, offset).encode()])

    def handle_replica_fetch(self, body: memoryview, client: str) -> Reply:
        req = p.ReplicaFetchRequest.decode(body)
        if self.replication is None:
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} runs without ZooKeeper and holds no replicated partition")
        return self.replication.replica_fetch(req)

    def handle_replica_fetches(self, body: memoryview, client: str) -> Reply:
        req = p.ReplicaFetchesRequest.decode(body)
        if self.replication is None:
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} runs without ZooKeeper and holds no replicated partition")
        return self.replication.replica_fetches(req)

    def handle_topic_metadata(self, body: memoryview, client: str) -> Reply:
        req = p.TopicMetadataRequest.decode(body)
        for t in req.topics:
            validate_topic(t)
        if self.replication is None:
            resp = p.TopicMetadataResponse(ErrorCode.NONE, ((self.broker_id, self.host, self.port),),
                                           tuple(p.ReplicatedTopic(t, ErrorCode.NONE, ()) for t in req.topics))
            return Reply([resp.encode()])
        return self.replication.topic_metadata(req)

    def handle_multiproduce(self, body: memoryview, client: str) -> None:
        req = p.MultiProduceRequest.decode(body)
        # validate everything first: a bad part must not leave the good parts appended
        sets, replicas = [], []
        for part in req.produces:
            validate_topic(part.topic)
            rp = self._replica(part.topic, part.partition)
            if rp is not None:
                rp.check_leader()
            else:
                validate_partition(part.topic, part.partition, self.partition_count(part.topic))
            replicas.append(rp)
            sets.append(self._validated(part))
        # then every log, so a topic refused by the creation limits leaves nothing appended either
        logs = [None if rp is not None else self._log_for_write(part.topic, part.partition)
                for part, rp in zip(req.produces, replicas)]
        for log_, rp, vs, part in zip(logs, replicas, sets, req.produces):
            if rp is not None:
                rp.append(vs, 0, 1)
            else:
                log_.append(vs)
            self.metrics.produced(part.topic, vs)
        return None

    def _read(self, f: p.FetchRequest) -> tuple[int, FileRegion | None]:
        """(length, region) of one fetch; raises the fetch's error."""
        if f.max_size < 0:
            raise InvalidFetchSizeError(
                f"fetch size {f.max_size} for {f.topic}-{f.partition} is negative; it must be >= 0")
        if f.offset < 0:
            raise OffsetOutOfRangeError(f"offset {f.offset} of {f.topic}-{f.partition} is negative")
        rp = self._replica(f.topic, f.partition)
        if rp is not None:
            try:
                slc = rp.log.read(f.offset, f.max_size, limit=rp.read_limit())
            except CorruptRangeError:
                self.replicas.request_repair(rp.key)  # an in-sync follower may have good bytes (no wait here)
                raise
        else:
            log_ = self._log_for_read(f.topic, f.partition)
            if log_ is None:
                if f.offset == 0:
                    return 0, None
                raise OffsetOutOfRangeError(
                    f"offset {f.offset} of {f.topic}-{f.partition} is out of range: the partition is empty")
            slc = log_.read(f.offset, f.max_size)
        if slc.length == 0:
            slc.release()
            return 0, None
        self.metrics.fetched(f.topic, slc.length)
        return slc.length, FileRegion(slc.fileno(), slc.position, slc.length, slc.release)

    def handle_fetch(self, body: memoryview, client: str) -> Reply:
        f = p.FetchRequest.decode(body)
        try:
            length, region = self._read(f)
        except CorruptRangeError as exc:
            self.refusals.warning(client, "FETCH CORRUPT_RANGE", "client %s: FETCH %s-%d@%d in a damaged range: "
                                  "answered CORRUPT_RANGE, next offset %d", client, f.topic, f.partition, f.offset,
                                  exc.next_offset)
            return Reply([p.FetchResponse.corrupt_range(exc.next_offset, exc.start_offset, exc.messages).encode()])
        parts: list = [p.FetchResponse.header(ErrorCode.NONE, length)]
        if region is not None:
            parts.append(region)
        return Reply(parts)

    def handle_multifetch(self, body: memoryview, client: str) -> Reply:
        req = p.MultiFetchRequest.decode(body)
        reply = Reply()
        total = INT16.size
        try:
            for f in req.fetches:
                body = None
                try:
                    length, region = self._read(f)
                    code = ErrorCode.NONE
                except CorruptRangeError as exc:
                    self.refusals.warning(client, "MULTIFETCH part CORRUPT_RANGE", "client %s: MULTIFETCH part "
                                          "%s-%d@%d in a damaged range: answered CORRUPT_RANGE, next offset %d",
                                          client, f.topic, f.partition, f.offset, exc.next_offset)
                    body = p.FetchResponse.corrupt_range(exc.next_offset, exc.start_offset, exc.messages).message_set
                    length, region, code = len(body), None, ErrorCode.CORRUPT_RANGE
                except IngestError as exc:
                    code = code_for(exc)
                    self.refusals.warning(client, f"MULTIFETCH part {code.name}",
                                          "client %s: MULTIFETCH part %s-%d@%d refused (%s): %s",
                                          client, f.topic, f.partition, f.offset, code.name, exc)
                    length, region = 0, None
                total += p.RESPONSE_HEADER.size + length
                reply.parts.append(p.FetchResponse.header(code, length))   # one framed FetchResponse
                if region is not None:
                    reply.parts.append(region)
                elif body is not None:
                    reply.parts.append(body)
                if total > MAX_RESPONSE_BYTES:
                    raise InvalidFetchSizeError(
                        f"MULTIFETCH of {len(req.fetches)} fetches would answer more than {MAX_RESPONSE_BYTES}"
                        " bytes; lower the fetch sizes")
        except BaseException:
            reply.release()
            raise
        reply.parts.insert(0, p.RESPONSE_HEADER.pack(total, ErrorCode.NONE))
        return reply

    def handle_offsets(self, body: memoryview, client: str) -> Reply:
        req = p.OffsetsRequest.decode(body)
        if req.max_offsets < 0:
            raise MalformedRequestError(f"max_offsets {req.max_offsets} is negative; it must be >= 0")
        rp = self._replica(req.topic, req.partition)
        if rp is not None:
            offsets = self.replication.offsets(rp, req)
            return Reply([p.OffsetsResponse(ErrorCode.NONE, offsets).encode()])
        log_ = self._log_for_read(req.topic, req.partition)
        if log_ is None:
            offsets = (0,) if req.time in (p.LATEST_TIME, p.EARLIEST_TIME) and req.max_offsets else ()
        else:
            offsets = tuple(log_.offsets_before(req.time, req.max_offsets))
        return Reply([p.OffsetsResponse(ErrorCode.NONE, offsets).encode()])

    def handle_metadata(self, body: memoryview, client: str) -> Reply:
        req = p.MetadataRequest.decode(body)
        known = self.logs.topics(TopicKind.V07)   # Kafka-format topics are the Kafka listener's
        names = sorted(known) if not req.topics else [validate_topic(t) for t in req.topics]
        for name in names:
            self.logs.check_kind(name, TopicKind.V07)
        if self.replicas is not None:   # replicated topics are answered by TOPIC_METADATA
            names = [n for n in names if not self.replicas.is_replicated(n)]
        topics = []
        for name in names:
            parts = []
            for partition in range(self.partition_count(name)):
                log_ = self.logs.get_log(name, partition)
                earliest, latest = (0, 0) if log_ is None else (log_.start_offset, log_.end_offset)
                parts.append(p.PartitionMetadata(partition, earliest, latest))
            topics.append(p.TopicMetadata(name, tuple(parts)))
        resp = p.MetadataResponse(ErrorCode.NONE, self.broker_id, self.host, self.port, tuple(topics))
        return Reply([resp.encode()])


def _name(kind: int) -> str:
    try:
        return RequestType(kind).name
    except ValueError:
        return f"type {kind}"
