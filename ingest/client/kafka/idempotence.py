"""The product's Kafka producer's idempotence (KIP-98): a producer id from InitProducerId and a sequence per partition.

With ``enable.idempotence`` (the default, as in Kafka 3.x clients) every batch carries the producer's id,
epoch and the sequence of its first record, counted per partition from 0; a retried batch is sent as the
same bytes, so a leader that already stored it answers with its first offset and stores it once
(docs/kafka-protocol.md, "Idempotent producers"). The producer sends one batch per partition at a time,
so sequences reach each leader in order.

The id is asked for (InitProducerId, no transactional id) before the first batch is built, from the
leader of that batch's partition. When a batch fails for good (retries or ``delivery.timeout.ms`` used
up, or a refusal), the leader may or may not hold it, and the partition's next sequence would be
refused as out of order: the producer then forgets its id and sequences, and the next batch starts a
new id at sequence 0 (what Kafka's Java producer did before KIP-360's epoch bump).

Concurrency: as the producer's, one thread.
"""
from __future__ import annotations

import logging

from ingest.errors import BrokerUnavailableError, IngestError, MalformedResponseError
from ingest.records.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from ingest.wire.errors import KAFKA, kafka_error_for
from ingest.wire.kafka.init_producer_id import API_KEY, InitProducerIdRequest

log = logging.getLogger(__name__)

MAX_SEQUENCE = 2 ** 31 - 1
TRANSACTION_TIMEOUT_MS = 60_000
"""What the request's ``transaction_timeout_ms`` carries (Kafka's ``transaction.timeout.ms`` default);
without a transactional id the broker does not use it."""


class ProducerSequences:
    """A producer's id, epoch and next sequence per partition (module docstring)."""

    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = NO_PRODUCER_EPOCH
        self._next: dict[tuple[str, int], int] = {}

    def ensure_id(self, cluster, topic: str, partition: int, deadline: float, backoff, clock) -> None:
        """Ask for a producer id if there is none (from the leader of ``topic``/``partition``), retrying
        retriable failures with ``backoff`` until ``deadline``.

        Raises:
            UnsupportedVersionError: the broker does not serve InitProducerId (set enable.idempotence=false).
            IngestError: refused for good, or no answer by ``deadline``.
        """
        attempt = 0
        while self.producer_id == NO_PRODUCER_ID:
            try:
                leader = cluster.partition(topic, partition, deadline).leader
                conn = cluster.connection(leader)
                version = conn.version(API_KEY, lo=0)
                answer = conn.call(InitProducerIdRequest(None, TRANSACTION_TIMEOUT_MS), version)
                if answer.error_code == 0:
                    self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
                    log.debug("producer id %d epoch %d from broker %d", self.producer_id, self.epoch, leader)
                    return
                error = kafka_error_for(answer.error_code, f"InitProducerId (broker {leader})")
                if not KAFKA.error_class(answer.error_code).retriable:
                    raise error
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                cluster.invalidate()
                error = exc
            except IngestError as exc:
                if not exc.retriable:
                    raise
                error = exc
            attempt += 1
            wait = backoff.delay_s(attempt)
            if clock.monotonic() + wait >= deadline:
                raise error
            clock.sleep(wait)

    def stamp(self, topic: str, partition: int, count: int) -> tuple[int, int, int]:
        """``(producer id, epoch, base sequence)`` for the next batch of ``count`` records to a partition."""
        if self.producer_id == NO_PRODUCER_ID:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
        key = (topic, partition)
        seq = self._next.get(key, 0)
        self._next[key] = (seq + count) % (MAX_SEQUENCE + 1)
        return self.producer_id, self.epoch, seq

    def reset(self) -> None:
        """A batch failed for good: forget the id and every sequence (the next batch asks for a new id)."""
        if self.producer_id != NO_PRODUCER_ID:
            log.info("producer id %d dropped after a failed batch; the next batch starts a new id", self.producer_id)
        self.producer_id, self.epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        self._next.clear()
