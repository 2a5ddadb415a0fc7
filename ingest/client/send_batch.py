"""One batch's delivery: the request for the acknowledgement level, retries, and failover.

Requests (``request.required.acks``): 0 sends a PRODUCE (no answer, no offset);
1 a PRODUCE_ACK, answered once the broker (a replicated partition's leader)
appended the batch; -1 a PRODUCE_ACKS with ``request.timeout.ms``, answered once
every in-sync replica has the batch (or REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS).

Unreplicated (Kafka 0.7) topic: a failed attempt is re-sent to a partition
chosen afresh over the live brokers (a broker that cannot be reached is marked
down first), up to ``message.send.max.retries`` times within ``delivery.timeout.ms``.
An answer LEADER_NOT_AVAILABLE or NOT_LEADER_FOR_PARTITION means the topic is in
fact replicated (a new topic that a broker with ``default.replication.factor`` > 1
just created, or one created by ``ingest topics create``): the retry routes it as
a replicated topic, waiting for its first leader.

Replicated topic: the batch stays on its partition (a keyed message never moves).
After NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, a connection failure,
NOT_ENOUGH_REPLICAS(_AFTER_APPEND) or REQUEST_TIMED_OUT the producer backs off
(``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``), re-reads the
partition's leader (TOPIC_METADATA, waiting out an election) and re-sends to it.
Waiting out one leader's failure costs one retry however long the election
takes: an attempt that fails against the same leader and leader epoch as the
attempt before it, with a leader error (not leader, no leader, unreachable), is
not counted again. Every other failed attempt is counted; the time budget
``delivery.timeout.ms`` bounds all of it.

At-least-once: a batch whose first attempt failed after the broker received it
(the answer was lost, the leader died after its followers copied the batch, or
REQUEST_TIMED_OUT) may be appended twice by the retry. Kafka 0.8 has no
idempotent producer; consumers that need exactly-once deduplicate.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from ingest.wire import protocol
from ingest.records.message import MAGIC
from ingest.records.message_set import encode_message_set
from ingest.client.cluster import ClusterView, Route
from ingest.clock import Clock
from ingest.errors import (BrokerUnavailableError, IngestError, LeaderNotAvailableError,
                           NotEnoughReplicasAfterAppendError, NotEnoughReplicasError,
                           NotLeaderForPartitionError, RequestTimedOutError)
from ingest.wire.errors import check

log = logging.getLogger(__name__)

__all__ = ["BatchSender", "SendResult"]

LEADER_ERRORS = (NotLeaderForPartitionError, LeaderNotAvailableError, BrokerUnavailableError)
"""The partition's leader moved, is being elected, or cannot be reached: wait for (another) leader."""

FAILOVER_ERRORS = LEADER_ERRORS + (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError,
                                   RequestTimedOutError)
"""Errors after which a replicated batch is re-sent to its partition's (new) leader."""


@dataclass(frozen=True, slots=True)
class SendResult:
    """Outcome of one batch (or of one ``send`` call's share of a batch).

    ``broker_id``/``partition`` are -1 when the messages never reached a broker
    (e.g. dropped from a full queue). ``broker_id`` is the broker that acknowledged
    (a replicated partition's leader at that moment); ``partition`` is the partition
    number (for a replicated topic, its number within the topic). ``first_offset`` is
    the offset of the first of these ``count`` messages, None without acks or on error.
    """

    topic: str
    broker_id: int
    partition: int
    count: int
    first_offset: int | None
    error: BaseException | None


def backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    """The pause before re-send number ``attempt`` (1 = the first): ``base_s`` doubling up to ``max_s``."""
    return min(base_s * 2 ** min(attempt - 1, 30), max_s)


def counts_as_retry(exc: BaseException, where: tuple[int, int] | None,
                    previous: tuple[int, int] | None) -> bool:
    """Whether a failed attempt uses up one of ``message.send.max.retries``.

    ``where`` is the ``(leader, leader_epoch)`` the attempt was sent to (None for an
    unreplicated partition), ``previous`` the one that failed the attempt before with a
    leader error. The same leader failing again with a leader error is the same failover
    still under way: not counted again.
    """
    return not (where is not None and where == previous and isinstance(exc, LEADER_ERRORS))


def produce_frame(acks: int, timeout_ms: int, topic: str, partition: int, message_set: bytes) -> bytes:
    """The request frame of one batch for the acknowledgement level ``acks`` (-1, 0 or 1)."""
    if acks == 0:
        return protocol.ProduceRequest(topic, partition, message_set).encode()
    if acks == 1:
        return protocol.ProduceAckRequest(topic, partition, message_set).encode()
    return protocol.ProduceAcksRequest(acks, timeout_ms, protocol.ProduceRequest(topic, partition,
                                                                                 message_set)).encode()


class BatchSender:
    """Sends batches for one producer (see the module doc). Thread-safe as the ClusterView is.

    Args:
        cluster: the producer's connections, routes and leaders.
        config: the producer's Config.
        stats: the producer's counters; ``retries`` (every re-send) is updated under ``stats_lock``.
    """

    def __init__(self, cluster: ClusterView, config, *, codec: int, clock: Clock,
                 stats: dict[str, int], stats_lock: threading.Lock, magic: int = MAGIC) -> None:
        self.cluster = cluster
        self.codec = codec
        self.magic = magic
        self.clock = clock
        self.acks = config["request.required.acks"]
        self.timeout_ms = config["request.timeout.ms"]
        self.retries = config["message.send.max.retries"]
        self.backoff_s = config["retry.backoff.ms"] / 1000.0
        self.backoff_max_s = config["retry.backoff.max.ms"] / 1000.0
        self.delivery_timeout_s = config["delivery.timeout.ms"] / 1000.0
        self.stats = stats
        self.stats_lock = stats_lock
        self.request_name = {0: "PRODUCE", 1: "PRODUCE_ACK"}.get(self.acks, f"PRODUCE_ACKS(acks={self.acks})")
        self.give_up_at: float | None = None
        """Set by a producer closing with a timeout (monotonic): no batch is retried past it."""

    record_offsets = False
    """Offsets are byte positions (a Kafka-format topic's sender numbers records)."""

    def route(self, topic: str, key: bytes | str | None) -> Route:
        """Where a batch of ``key`` goes now (:meth:`ClusterView.route`)."""
        return self.cluster.route(topic, key)

    def send(self, topic: str, payloads: list[bytes], key: bytes | str | None,
             route: Route | None = None, keys=None) -> SendResult:
        """Send one batch to one partition (``route``, or routed now), retrying as the module doc says.
        ``keys`` (one per payload, from an async producer's queue) are not sent: a 0.7 message has no key."""
        try:
            message_set = encode_message_set(payloads, self.codec, self.magic)
        except IngestError as exc:
            return SendResult(topic, -1, -1, len(payloads), None, exc)
        count = len(payloads)
        deadline = self.clock.monotonic() + self.delivery_timeout_s
        error: BaseException | None = None
        bid, partition = -1, -1
        attempts = 0      # failed attempts (the back-off grows with them)
        counted = 0       # failed attempts that used up a retry
        previous: tuple[int, int] | None = None
        refresh = False
        while True:
            if attempts:
                now = self.clock.monotonic()
                if self.give_up_at is not None:
                    deadline = min(deadline, self.give_up_at)
                if counted > self.retries or deadline - now < 0.001:  # budgets are whole milliseconds
                    break
                with self.stats_lock:
                    self.stats["retries"] += 1
                self.clock.sleep(min(backoff_s(attempts, self.backoff_s, self.backoff_max_s), deadline - now))
            bid = -1
            where: tuple[int, int] | None = None
            try:
                if route is None or (attempts and not route.replicated):
                    route = self.cluster.route_within(topic, key, deadline)
                partition = route.partition
                if route.replicated:
                    addr, state = self.cluster.leader(topic, partition, refresh=refresh, deadline=deadline)
                    where = (state.leader, state.leader_epoch)
                else:
                    addr = route.addr
                bid = addr.broker_id
                first = self._request(addr, topic, partition, message_set, count)
                self.cluster.sent_ok(bid, topic, route.replicated)
                if attempts:
                    log.info("%d messages for %s-%d sent to broker %d after %d failed attempt(s)",
                             count, topic, partition, bid, attempts)
                return SendResult(topic, bid, partition, count, first, None)
            except IngestError as exc:
                error = exc
                attempts += 1
                # a new topic that a broker just created replicated: waiting for its first leader
                # is bounded by the budget only, as the wait for a new leader of a known topic
                creating = route is not None and not route.replicated and isinstance(exc, LeaderNotAvailableError)
                repeat = creating or not counts_as_retry(exc, where, previous)
                if not repeat:
                    counted += 1
                    if isinstance(exc, BrokerUnavailableError) and bid >= 0:
                        self.cluster.mark_down(bid, exc)
                previous = where if isinstance(exc, LEADER_ERRORS) else None
                if not exc.retriable:
                    break
                if route is not None and route.replicated:
                    refresh = True
                    self.cluster.replicas.invalidate(topic)  # the next batch asks too, even with no retry left
                    if not repeat:
                        log.warning("%s-%d: %d messages not acknowledged by broker %d (%s)%s", topic, partition,
                                    count, bid, exc, "; re-sending to the partition's leader"
                                    if counted <= self.retries else "")
                elif isinstance(exc, (LeaderNotAvailableError, NotLeaderForPartitionError)):
                    self.cluster.forget(topic)  # replicated after all: route it again
        return SendResult(topic, bid, partition, count, None, error)

    def _request(self, addr, topic: str, partition: int, message_set: bytes, count: int) -> int | None:
        """One attempt; the first offset (None for acks=0)."""
        conn = self.cluster.conn(addr)
        frame = produce_frame(self.acks, self.timeout_ms, topic, partition, message_set)
        if self.acks == 0:
            conn.send(frame)
            return None
        resp = conn.request(frame, protocol.ProduceAckResponse)
        check(resp.error, f"{self.request_name} of {count} messages to {topic}/{partition} on {conn!r}")
        return resp.offset


Callback = Callable[[SendResult], None]
