"""The handlers of the mirror's requests: APPEND_AT (15) and DELETED_SEGMENTS (16).

APPEND_AT appends a set only if the partition's log end (every written byte, unflushed included;
a replicated partition's leader's log end) equals the request's ``expected_offset``: the check and
the append happen together under the log's lock (:meth:`Log.append <ingest.broker.log.Log.append>`
with ``expected``), so of two writers with the same expected offset exactly one succeeds. Otherwise
the answer is OFFSET_MISMATCH with the log end in ``offset``, nothing appended. ``expected_offset``
-1 with an empty set is a query: error 0, ``offset`` = the log end. The set is validated as any
produce and stored byte for byte (compressed wrappers kept).

- Kafka 0.7 (unreplicated) topic: appended = acknowledged (as PRODUCE_ACK), ``required_acks`` must
  still be -1 or 1; the log is created on the first append as PRODUCE does (a query creates nothing
  and answers 0 for a partition without data).
- Replicated partition: only its leader answers (NOT_LEADER_FOR_PARTITION / LEADER_NOT_AVAILABLE
  otherwise, the query too); acks 1 answers once the leader appended, acks -1 waits in the
  purgatory exactly as PRODUCE_ACKS does (NOT_ENOUGH_REPLICAS, ..._AFTER_APPEND, REQUEST_TIMED_OUT).

DELETED_SEGMENTS answers from this broker's ``deleted-segments`` file of the partition
(:mod:`ingest.broker.deletion_log`), whatever its role: what *this* broker's retention deleted.
"""
from __future__ import annotations

import logging

from ingest.broker.deletion_log import overlapping, read_deletions
from ingest.broker.reply import Reply
from ingest.broker.topics import validate_topic
from ingest.errors import InvalidRequiredAcksError, MalformedRequestError, OffsetMismatchError
from ingest.wire import protocol as pm
from ingest.wire.errors import ErrorCode

log = logging.getLogger(__name__)


def _respond(code: int, offset: int) -> bytes:
    return pm.ProduceAckResponse(code, offset).encode()


class MirrorHandlers:
    """Bound to the broker's :class:`~ingest.broker.handlers.BrokerHandlers` (validation, logs,
    replicas); stateless."""

    def __init__(self, handlers) -> None:
        self.h = handlers

    def append_at(self, body: memoryview, client: str) -> Reply:
        req = pm.AppendAtRequest.decode(body)
        if req.required_acks not in (-1, 1):
            raise InvalidRequiredAcksError(f"APPEND_AT required_acks {req.required_acks} is not allowed: use -1 "
                                           "(all in-sync replicas) or 1 (the leader)")
        if req.expected_offset == pm.QUERY and req.message_set:
            raise MalformedRequestError(f"APPEND_AT to {req.topic}-{req.partition}: expected_offset -1 is the query "
                                        f"form and takes an empty set, not {len(req.message_set)} bytes")
        h = self.h
        part = h._replica(req.topic, req.partition, create=not req.is_query)
        if req.is_query:
            if part is not None:
                part.check_leader()
                return Reply([_respond(ErrorCode.NONE, part.log.log_end)])
            log_ = h._log_for_read(req.topic, req.partition)
            return Reply([_respond(ErrorCode.NONE, 0 if log_ is None else log_.log_end)])
        vs = h._validated(req)
        try:
            if part is None:
                offset = h._log_for_write(req.topic, req.partition).append(vs, req.expected_offset)
                h.metrics.produced(req.topic, vs)
                return Reply([_respond(ErrorCode.NONE, offset)])
            offset, end, generation = part.append(vs, req.required_acks, h.replicas.min_isr, req.expected_offset)
            h.metrics.produced(req.topic, vs)
        except OffsetMismatchError as exc:
            log.info("client %s: APPEND_AT %s-%d at %d refused: the log end is %s", client, req.topic,
                     req.partition, req.expected_offset, exc.log_end)
            return Reply([_respond(ErrorCode.OFFSET_MISMATCH, exc.log_end)])
        if req.required_acks == 1:
            return Reply([_respond(ErrorCode.NONE, offset)])
        return h.replication.acked_reply(part, offset, end, generation, req.timeout_ms, _respond)

    def deleted_segments(self, body: memoryview, client: str) -> Reply:
        req = pm.DeletedSegmentsRequest.decode(body)
        validate_topic(req.topic)
        part = self.h._replica(req.topic, req.partition)
        log_ = part.log if part is not None else self.h._log_for_read(req.topic, req.partition)
        records = () if log_ is None else tuple(overlapping(read_deletions(log_.directory), req.start_offset,
                                                            req.end_offset))
        return Reply([pm.DeletedSegmentsResponse(ErrorCode.NONE, records).encode()])
