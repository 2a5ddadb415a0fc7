"""The handlers of the mirror's requests: APPEND_AT (15) and DELETED_SEGMENTS (16).

APPEND_AT is decided as :mod:`ingest.broker.append_at` says (the same decision as the Kafka port's
AppendAt): the set is appended only if the partition's log end (every written byte) equals
``expected_offset``, checked under the log's lock (:meth:`Log.append <ingest.broker.log.Log.append>`
with ``expected``); otherwise OFFSET_MISMATCH with the log end in ``offset``, nothing appended.
``expected_offset`` -1 with an empty set is a query: error 0, ``offset`` = the log end. The set is
validated as any produce and stored byte for byte (compressed wrappers kept).

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

from ingest.broker import append_at
from ingest.broker.deletion_log import overlapping, read_deletions
from ingest.broker.reply import Reply
from ingest.broker.topics import validate_topic
from ingest.errors import OffsetMismatchError
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
        what = f"APPEND_AT to {req.topic}-{req.partition}"
        query = append_at.is_query(what, req.required_acks, req.expected_offset, len(req.message_set))
        h = self.h
        part = h._replica(req.topic, req.partition, create=not query)
        if query:
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
            return Reply([_respond(ErrorCode.OFFSET_MISMATCH, append_at.refused(client, what, req.expected_offset,
                                                                                exc))])
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
