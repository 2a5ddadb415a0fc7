"""The client side of APPEND_AT (request 15): append a message set only at an expected log end.

The mirror's exactly-once primitive (docs/protocol.md, "APPEND_AT"): the broker appends
``message_set`` to the partition only if its log end equals ``expected_offset``, atomically with
the append; otherwise it answers OFFSET_MISMATCH with its log end and appends nothing. The set is
stored byte for byte, so the log end grows by exactly ``len(message_set)``.

``conn`` is a :class:`~ingest.wire.connection.BrokerConnection` to the partition's broker (for a
replicated topic, its leader: others answer NOT_LEADER_FOR_PARTITION). Both calls are one request,
no retry: the caller decides (a BrokerUnavailableError or REQUEST_TIMED_OUT after an append leaves
the outcome unknown; ask :func:`log_end` and compare).
"""
from __future__ import annotations

import logging

from ingest.errors import OffsetMismatchError
from ingest.wire.connection import BrokerConnection
from ingest.wire.errors import ErrorCode, check
from ingest.wire.protocol import QUERY, AppendAtRequest, ProduceAckResponse

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 10_000


def append_at(conn: BrokerConnection, topic: str, partition: int, expected_offset: int, message_set: bytes, *,
              acks: int = -1, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> int:
    """Append ``message_set`` at ``expected_offset``; returns the new log end (expected + set size).

    Raises:
        OffsetMismatchError: the partition's log end is not ``expected_offset`` (``.log_end`` says
            what it is); nothing was appended.
        IngestError subclasses of the wire error (NOT_LEADER_FOR_PARTITION, INVALID_MESSAGE,
            NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...), BrokerUnavailableError.
    """
    data = bytes(message_set)
    req = AppendAtRequest(topic, partition, expected_offset, acks, timeout_ms, data)
    resp = conn.request(req.encode(), ProduceAckResponse)
    context = f"APPEND_AT of {len(data)} bytes at {expected_offset} to {topic}/{partition} on {conn!r}"
    if resp.error == ErrorCode.OFFSET_MISMATCH:
        raise OffsetMismatchError(f"{context}: the partition's log end is {resp.offset}, not {expected_offset}; "
                                  "nothing was appended", log_end=resp.offset)
    check(resp.error, context)
    return resp.offset + len(data)


def log_end(conn: BrokerConnection, topic: str, partition: int) -> int:
    """The partition's log end on that broker (the query form of APPEND_AT; 0 for an empty or
    not yet created 0.7 partition). Raises as :func:`append_at` (a follower: NOT_LEADER)."""
    resp = conn.request(AppendAtRequest(topic, partition, QUERY, 1, 0, b"").encode(), ProduceAckResponse)
    check(resp.error, f"APPEND_AT query of {topic}/{partition} on {conn!r}")
    return resp.offset
