"""The mirror's conditional append, as both ports decide it: APPEND_AT (0.7 port) and AppendAt (Kafka port).

One decision, two wire forms (:mod:`ingest.broker.mirror_handlers` for 0.7 topics,
:mod:`ingest.broker.kafka.append_at` for Kafka topics):

- ``acks`` must be -1 (every in-sync replica) or 1 (the leader): a copy must be acknowledged;
- ``expected_offset`` -1 (:data:`QUERY`) with no data asks for the log end and appends nothing;
  -1 with data is a malformed request (any other offset that is not the log end, a negative one
  too, is a mismatch);
- otherwise the data is appended only if the log end (every written offset, unflushed included; a
  replicated partition's leader's) equals ``expected_offset``: the log checks and appends under its
  lock (``Log.append(expected=...)``, ``KafkaLog.append_copied``), so of two writers with the same
  expected offset exactly one succeeds, and a re-sent append after a lost answer (the writer killed,
  a connection cut) finds the log end moved: OFFSET_MISMATCH with the log end, nothing appended;
- acks -1 is answered when the in-sync replicas have the data, as a produce is.
"""
from __future__ import annotations

import logging

from ingest.errors import InvalidRequiredAcksError, MalformedRequestError, OffsetMismatchError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)
_mismatches = RateLimitedLog(log, interval_s=30.0)

QUERY = -1
"""``expected_offset`` of the query form (no data): the log end."""


def is_query(what: str, acks: int, expected_offset: int, size: int) -> bool:
    """Check an append-at request; True for the query form.

    Args:
        what: ``APPEND_AT to topic-partition`` (for messages).
        size: bytes of data carried.

    Raises:
        InvalidRequiredAcksError: ``acks`` is not -1 or 1.
        MalformedRequestError: the query form with data.
    """
    if acks not in (-1, 1):
        raise InvalidRequiredAcksError(f"{what}: acks {acks} is not allowed: use -1 (all in-sync replicas) or 1 "
                                       "(the leader)")
    if expected_offset == QUERY and size:
        raise MalformedRequestError(f"{what}: expected_offset -1 is the query form and takes no data, not {size} "
                                    "bytes")
    return expected_offset == QUERY


def refused(client: str, what: str, expected_offset: int, exc: OffsetMismatchError) -> int:
    """Log an append refused by the expected-offset check (rate-limited per client); the log end to answer."""
    _mismatches.log(logging.INFO, client, what, "client %s: %s at %d refused: the log end is %s", client, what, expected_offset,
                     exc.log_end)
    return exc.log_end
