"""The request handlers that exist because of replication: PRODUCE_ACKS (acks -1 waits for the
in-sync replicas), REPLICA_FETCHES (a follower's fetcher thread copying many partitions of one leader in
one request), REPLICA_FETCH (one partition: older brokers' followers; replica id -1: a leader's repair
read of a range damaged in its own log, answered by its followers), TOPIC_METADATA (where each
replicated partition is led), and the replicated side of OFFSETS and auto-creation (which writes to
ZooKeeper, so it runs on the handlers' coordination thread, never on a network thread).

Waiting requests do not block a network thread: the handler returns a deferred
:class:`~ingest.broker.reply.Reply` and registers a :class:`~ingest.broker.delayed.DelayedOp` in
the replica manager's purgatory; the thread that moves the high watermark or the log end (a
follower's fetch, an append) completes it, or the timer answers the timeout. A REPLICA_FETCHES is
watched under every partition it names, with one deadline (Kafka's ``tryCompleteElseWatch``): an append
to any of them completes it.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ingest.broker.delayed import DelayedOp
from ingest.broker.partition import Role
from ingest.broker.reply import FileRegion, Reply
from ingest.errors import (CorruptRangeError, IngestError, InvalidRequiredAcksError, LeaderNotAvailableError,
                           MalformedRequestError, NotLeaderForPartitionError, StaleLeaderEpochError,
                           TopicCreationRefusedError)
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode, code_for

log = logging.getLogger(__name__)

_unacknowledged = RateLimitedLog(log, interval_s=60.0)
"""acks=-1 writes that end unacknowledged (followers away, the in-sync set too small) fail in
series: logged once a minute per partition and outcome, the repeats counted."""

MAX_ACK_TIMEOUT_MS = 300_000


def check_acks(acks: int) -> None:
    """Raise InvalidRequiredAcksError unless ``acks`` is -1 or 1 (0 is a plain PRODUCE)."""
    if acks not in (-1, 1):
        raise InvalidRequiredAcksError(
            f"required_acks {acks} is not allowed in PRODUCE_ACKS: use -1 (all in-sync replicas) or 1 (the "
            "leader); acks 0 is a plain PRODUCE")


class ReplicationHandlers:
    """Bound to the broker's :class:`~ingest.broker.handlers.BrokerHandlers` (for validation and the
    replica manager)."""

    def __init__(self, handlers) -> None:
        self.h = handlers
        self.replicas = handlers.replicas
        self.purgatory = handlers.replicas.purgatory
        self.config = handlers.config

    # --- produce ---------------------------------------------------------------------------------

    def produce_acks(self, req: p.ProduceAcksRequest) -> Reply:
        check_acks(req.required_acks)
        part = self.h._replica(req.topic, req.partition, create=True)
        if part is None or req.required_acks == 1:
            offset = self.h._append(req.produce, req.required_acks)
            return Reply([p.ProduceAckResponse(ErrorCode.NONE, offset).encode()])
        min_isr = self.replicas.min_isr
        vs = self.h._validated(req.produce)
        offset, end, generation = part.append(vs, -1, min_isr)
        self.h.metrics.produced(req.topic, vs)
        return self.acked_reply(part, offset, end, generation, req.timeout_ms,
                                lambda code, off: p.ProduceAckResponse(code, off).encode())

    def acked_reply(self, part, offset: int, end: int, generation: int, timeout_ms: int,
                    respond: Callable[[int, int], bytes]) -> Reply:
        """The answer to an acks=-1 write of ``[offset, end)`` appended by the leader: at once if the
        in-sync replicas have it already, else a deferred reply completed from the purgatory (or
        REQUEST_TIMED_OUT after ``timeout_ms``). ``respond(error, offset)`` encodes the response."""
        min_isr = self.replicas.min_isr
        outcome = part.ack_outcome(end, generation, min_isr)
        if outcome is True:
            return Reply([respond(ErrorCode.NONE, offset)])
        if isinstance(outcome, IngestError):
            raise outcome
        reply = Reply.deferred()

        def attempt() -> bool:
            o = part.ack_outcome(end, generation, min_isr)
            if o is None:
                return False
            code = ErrorCode.NONE if o is True else code_for(o)
            reply.complete([respond(code, offset if o is True else -1)])
            if o is not True:
                _unacknowledged.warning(f"{part.topic}-{part.partition}", code.name,
                                        "%s: acks=-1 write at %d not acknowledged: %s", part, offset, o)
            return True

        def expire() -> None:
            _unacknowledged.warning(f"{part.topic}-{part.partition}", "timed out",
                                    "%s: acks=-1 write at %d..%d timed out after %d ms (hw %d, in-sync %s)", part,
                                    offset, end, timeout_ms, part.hw, list(part.isr))
            reply.complete([respond(ErrorCode.REQUEST_TIMED_OUT, -1)])

        timeout_ms = max(0, min(timeout_ms, MAX_ACK_TIMEOUT_MS))
        self.purgatory.add(("produce",) + part.key, DelayedOp(time.monotonic() + timeout_ms / 1000.0, attempt, expire))
        return reply

    # --- followers ---------------------------------------------------------------------------------

    def replica_fetch(self, req: p.ReplicaFetchRequest) -> Reply:
        f = req.fetch
        part = self.h._replica(f.topic, f.partition)
        if part is None:
            raise NotLeaderForPartitionError(f"topic {f.topic!r} is not replicated")
        if req.replica_id < 0 and part.role is Role.FOLLOWER:
            return self._repair_read(part, req)
        hw, start, end, wants = part.on_follower_fetch(req.replica_id, req.leader_epoch, f.offset)
        if wants:
            self.replicas.wants_isr_check()
        if f.offset < start or f.offset > end:
            return Reply([p.ReplicaFetchResponse(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, end).encode()])
        if f.offset < end or req.max_wait_ms <= 0:
            return self._replica_data(part, f)
        reply = Reply.deferred()

        def attempt() -> bool:
            if part.log.log_end <= f.offset and part.role is Role.LEADER and part.epoch == req.leader_epoch:
                return False
            reply.complete(self._replica_data(part, f).parts)
            return True

        def expire() -> None:
            reply.complete(self._replica_data(part, f).parts)

        self.purgatory.add(("fetch",) + part.key,
                           DelayedOp(time.monotonic() + min(req.max_wait_ms, 60_000) / 1000.0, attempt, expire))
        return reply

    def _replica_data(self, part, f: p.FetchRequest, limit: int | None = None) -> Reply:
        """REPLICA_FETCH's answer: :meth:`_replica_read` of ``f``."""
        code, data = self._replica_read(part, f.offset, f.max_size, limit)
        head = p.ReplicaFetchResponse.header(code, part.hw, part.log.start_offset, part.log.log_end, len(data))
        return Reply([head, data] if len(data) else [head])

    def _replica_read(self, part, offset: int, max_size: int, limit: int | None = None) -> tuple[int, object]:
        """``(error, bytes)``: up to ``limit`` (default: the log end) of the log from ``offset``, as a file
        region (sendfile); the first message CRC-checked (``Log.read(check_first=True)``). A damaged range
        there is answered CORRUPT_RANGE with the FETCH body naming it (docs/protocol.md), and on the leader
        the repair of the range from another in-sync replica is asked for."""
        try:
            slc = part.log.read(offset, max_size, limit=part.log.log_end if limit is None else limit,
                                check_first=True)
        except CorruptRangeError as exc:
            if part.role is Role.LEADER:
                self.replicas.request_repair(part.key)
            return ErrorCode.CORRUPT_RANGE, p.FetchResponse.corrupt_range(exc.next_offset, exc.start_offset,
                                                                          exc.messages).message_set
        except IngestError as exc:
            return code_for(exc), b""
        if slc.length == 0:
            slc.release()
            return ErrorCode.NONE, b""
        return ErrorCode.NONE, FileRegion(slc.fileno(), slc.position, slc.length, slc.release)

    def replica_fetches(self, req: p.ReplicaFetchesRequest) -> Reply:
        """A follower's fetch of many partitions (REPLICA_FETCHES). Each partition's position is recorded
        (as REPLICA_FETCH records it); a partition in error answers its error alone. With no error and
        fewer than ``min_bytes`` new bytes in all, the answer waits in the purgatory under every partition
        until one of them has something past its offset, or ``max_wait_ms`` (at most 60 s) ends."""
        if req.replica_id < 0:
            raise MalformedRequestError(f"REPLICA_FETCHES with replica_id {req.replica_id}: a follower's id (>= 0) "
                                        "is required; a repair read (replica_id -1) is a REPLICA_FETCH")
        parts: list = []   # per request entry: its partition, or the error that answers it
        wants = errors = False
        for e in req.partitions:
            try:
                part = self.h._replica(e.topic, e.partition)
                if part is None:
                    raise NotLeaderForPartitionError(f"topic {e.topic!r} is not replicated")
                hw, start, end, w = part.on_follower_fetch(req.replica_id, e.leader_epoch, e.offset)
            except IngestError as exc:
                parts.append(code_for(exc))
                errors = True
                continue
            wants = wants or w
            if e.offset < start or e.offset > end:
                parts.append(p.ReplicaPartitionData(e.topic, e.partition, ErrorCode.OFFSET_OUT_OF_RANGE, hw, start,
                                                    end, b""))
                errors = True
            else:
                parts.append(part)
        if wants:
            self.replicas.wants_isr_check()
        entries, size = self._replica_entries(req, parts)
        if errors or size >= max(1, req.min_bytes) or req.max_wait_ms <= 0:
            return Reply(p.ReplicaFetchesResponse.parts(ErrorCode.NONE, entries))
        _release(entries)
        reply = Reply.deferred()
        led = [(part, e) for part, e in zip(parts, req.partitions)]

        def attempt() -> bool:
            if all(part.log.log_end <= e.offset and part.role is Role.LEADER and part.epoch == e.leader_epoch
                   for part, e in led):
                return False
            reply.complete(p.ReplicaFetchesResponse.parts(ErrorCode.NONE, self._replica_entries(req, parts)[0]))
            return True

        def expire() -> None:
            reply.complete(p.ReplicaFetchesResponse.parts(ErrorCode.NONE, self._replica_entries(req, parts)[0]))

        self.purgatory.watch([("fetch",) + part.key for part, _e in led],
                             DelayedOp(time.monotonic() + min(req.max_wait_ms, 60_000) / 1000.0, attempt, expire))
        return reply

    def _replica_entries(self, req: p.ReplicaFetchesRequest, parts: list) -> tuple[list, int]:
        """The answer's ``(entry, bytes)`` per partition of ``req`` and their size in all. A partition is
        read whole (up to its ``max_size``) or not at all, so a cut-off set never stands for damage: once
        ``max_bytes`` is spent, the partitions after the first one with bytes are answered without bytes."""
        entries: list = []
        size = 0
        for e, part in zip(req.partitions, parts):
            if isinstance(part, p.ReplicaPartitionData):
                entries.append((part, b""))
                continue
            if isinstance(part, int):
                entries.append((p.ReplicaPartitionData(e.topic, e.partition, part, -1, -1, -1, b""), b""))
                continue
            code, data = ErrorCode.NONE, b""
            end = part.log.log_end
            if e.offset < end and (size == 0 or size + e.max_size <= req.max_bytes):   # nothing to read at the end
                code, data = self._replica_read(part, e.offset, e.max_size)
            entries.append((p.ReplicaPartitionData(e.topic, e.partition, code, part.hw, part.log.start_offset,
                                                   part.log.log_end, b""), data))
            size += len(data)
        return entries, size

    def _repair_read(self, part, req: p.ReplicaFetchRequest) -> Reply:
        """A repair read (replica id -1) at a follower: the leader of ``req.leader_epoch`` asks for
        bytes of a range damaged in its own log. Served from this replica's log up to its high
        watermark (committed: the same bytes on every in-sync replica); the leader checks them."""
        f = req.fetch
        with part.lock:
            epoch, hw = part.epoch, part.hw
        if req.leader_epoch != epoch:
            raise StaleLeaderEpochError(f"{part.topic}-{part.partition}: a repair read in leader epoch "
                                        f"{req.leader_epoch}; this follower is in epoch {epoch}")
        start = part.log.start_offset
        if not start <= f.offset <= hw:
            return Reply([p.ReplicaFetchResponse(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, part.log.log_end).encode()])
        return self._replica_data(part, f, limit=hw)

    # --- reads -------------------------------------------------------------------------------------

    def offsets(self, part, req: p.OffsetsRequest) -> tuple[int, ...]:
        """OFFSETS on the leader: as for any log, but nothing above the high watermark (-1 = the HW)."""
        hw = part.read_limit()
        if req.max_offsets <= 0:
            return ()
        found = [o for o in part.log.offsets_before(req.time, req.max_offsets + 1) if o <= hw]
        if req.time == p.LATEST_TIME:
            found = [hw] + [o for o in found if o < hw]
        elif req.time != p.EARLIEST_TIME and not found and hw == part.log.start_offset:
            found = [hw]
        return tuple(found[:req.max_offsets])

    def topic_metadata(self, req: p.TopicMetadataRequest) -> Reply:
        view = self.replicas.view
        assignments = view.assignments
        names = req.topics or tuple(sorted(t for t in assignments if not view.is_kafka(t) and not view.is_deleting(t)))
        topics = []
        for name in names:
            if view.is_kafka(name):   # a Kafka topic is the Kafka listener's (docs/kafka-protocol.md, D2)
                topics.append(p.ReplicatedTopic(name, ErrorCode.WRONG_TOPIC_KIND, ()))
                continue
            # a topic marked for deletion is unknown to clients from the mark on, as on the Kafka listener
            assignment = None if view.is_deleting(name) else assignments.get(name)
            if assignment is None:
                topics.append(p.ReplicatedTopic(name, ErrorCode.NONE, ()))
                continue
            parts = []
            error = ErrorCode.NONE
            for pn, replicas in sorted(assignment.items()):
                st = view.state(name, pn)
                if st is None or st.leader < 0:
                    error = ErrorCode.LEADER_NOT_AVAILABLE
                parts.append(p.PartitionReplicas(pn, -1 if st is None else st.leader,
                                                 -1 if st is None else st.leader_epoch, tuple(replicas),
                                                 () if st is None else tuple(st.isr)))
            topics.append(p.ReplicatedTopic(name, error, tuple(parts)))
        brokers = tuple((bid, host, port) for bid, (host, port) in sorted(view.brokers.items()))
        return Reply([p.TopicMetadataResponse(ErrorCode.NONE, brokers, tuple(topics)).encode()])

    # --- creation ----------------------------------------------------------------------------------

    def auto_create(self, topic: str) -> bool:
        """A produce named an unknown topic: with ``default.replication.factor`` > 1 and auto-creation
        on, write a replicated topic for it (the answer is LEADER_NOT_AVAILABLE until elected). True
        if the topic is replicated now (it was created by someone meanwhile)."""
        cfg = self.config
        rf = cfg.get("default.replication.factor", 1)
        if rf <= 1 or not cfg.get("auto.create.topics.enable", True) or self.h.logs.has_topic(topic):
            return False
        live = len(self.replicas.view.brokers)
        if 0 < live < rf and live < self.replicas.min_isr:
            # the factor is capped by the live brokers and stays so: acks=-1 could never succeed on it
            raise TopicCreationRefusedError(
                f"cannot auto-create topic {topic!r}: with {live} live broker(s) it would get replication factor "
                f"{live} (default.replication.factor={rf}), below min.insync.replicas={self.replicas.min_isr}, so "
                "every acks=-1 write would be refused; start more brokers or create it with `ingest topics create`")
        self.replicas.create_topic(topic, cfg["num.partitions"], rf, self.h.zookeeper_deadline())
        raise LeaderNotAvailableError(
            f"topic {topic!r} was just created with replication factor {rf}; its leaders are being elected, retry")


def _release(entries: list) -> None:
    """Give back the file regions of an answer that is not sent."""
    for _entry, data in entries:
        release = getattr(data, "release", None)
        if release is not None:
            data.release = None
            release()
