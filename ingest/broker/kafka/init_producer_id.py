"""InitProducerId (22): a producer id and epoch for an idempotent producer, no transactions.

What is guaranteed: every answer names a producer id no other answer of this broker named (a counter
in the low 16 bits, the broker id in the next 10, the broker's start time in ms above them, so ids of
brokers restarted or of other brokers differ too unless their clocks disagree), epoch 0. What is not:
the broker does not check the sequence numbers of the batches of an idempotent producer (KIP-98): a
batch the producer retries after a lost answer may be stored twice, and a gap in a producer's
sequence is not refused (docs/kafka-protocol.md, "Producer ids"). A ``transactional_id`` is refused
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): there is no transaction coordinator.
"""
from __future__ import annotations

import itertools
import threading
import time

from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.init_producer_id import InitProducerIdRequest, InitProducerIdResponse

_COUNTER_BITS, _BROKER_BITS = 16, 10
_EPOCH_MS = 1_767_225_600_000   # 2026-01-01: keeps the ids well inside int64 for centuries


class ProducerIds:
    """The ids one broker gives out (thread-safe)."""

    def __init__(self, broker_id: int, now_ms: int | None = None) -> None:
        start = (now_ms if now_ms is not None else int(time.time() * 1000)) - _EPOCH_MS
        self._base = ((max(0, start) << _BROKER_BITS) | (broker_id % (1 << _BROKER_BITS))) << _COUNTER_BITS
        self._count = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            n = next(self._count)
            if n >> _COUNTER_BITS:   # the counter is full: move the time part on (never back)
                self._base += 1 << (_COUNTER_BITS + _BROKER_BITS)
                self._count = itertools.count(1)
                n = 0
            return self._base | n


def handle(apis, req: InitProducerIdRequest, ctx) -> InitProducerIdResponse:
    if req.transactional_id is not None:
        apis.refusals.warning(ctx.client, "InitProducerId transactional",
                              "client %s: InitProducerId for transactional id %r refused: this broker has no "
                              "transaction coordinator", ctx.client, req.transactional_id)
        return error(req, KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ctx)
    return InitProducerIdResponse(0, 0, apis.producer_ids.next(), 0)


def error(req: InitProducerIdRequest, code: int, ctx) -> InitProducerIdResponse:
    return InitProducerIdResponse(0, code, -1, -1)
