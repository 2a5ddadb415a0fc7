"""A synchronous Kafka-protocol producer: records batched per partition, one record batch v2 each, Produce.

``send`` puts a record into its partition's open batch (the partition given, else Kafka's built-in
partitioner: :mod:`ingest.client.kafka.partitioner`). A batch leaves when it holds ``batch.size``
bytes or its first record is ``linger.ms`` old (checked by ``send`` and ``flush``: the producer has
no thread of its own), and at ``flush``. Leaving, the batch is built once with
:func:`ingest.records.builder.build_batch` (``compression.type``, one CRC-32C), and the batches led
by one broker go in one Produce request (at most ``max.request.size`` bytes).

Answers (acks 1 and all): a partition answered NONE is delivered, with its base offset. A retriable
error (a stale leader, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost
connection ...) sends the same batch again after a back-off (``retry.backoff.ms`` doubling to
``retry.backoff.max.ms``), reading the metadata again first when the error says it is stale, up to
``retries`` times and within ``delivery.timeout.ms`` of its first send. Any other error, or the end
of the retries, fails the batch: :class:`~ingest.errors.DeliveryFailedError` is raised by the call
that sent it, naming each failed partition and its cause. A refused batch is never reported
delivered. With ``enable.idempotence`` (the default with acks all) every batch carries a producer id and
its partition's sequence (:mod:`ingest.client.kafka.idempotence`), so a retried batch that the broker had
in fact appended (an answer lost with its connection) is stored once; without it, it is written twice.

acks 0: the request is written to the socket and nothing is answered (Kafka's broker answers nothing);
a delivery then has base offset -1. :meth:`KafkaProducer.close` waits until each broker has read them
(one ApiVersions round trip per connection), as a socket closed right after them can lose them. A failed write to the socket is retried like any lost connection.

Records keep their keys, headers and timestamps; a record without a timestamp gets its batch's
creation time (the first ``send`` into it), as the Java client stamps records at ``send``.

Concurrency: not thread-safe; one thread uses a producer (its cluster view and connections included).
"""
from __future__ import annotations

import logging
import math
from typing import Iterable, NamedTuple, Sequence

from ingest.client.kafka.cluster import Backoff, KafkaCluster, describe_code, needs_refresh
from ingest.client.kafka.config import KAFKA_PRODUCER_CONFIG, as_config
from ingest.client.kafka.idempotence import ProducerSequences
from ingest.client.kafka.partitioner import StickyPartitions, partition_for_key
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import (BrokerUnavailableError, ConfigError, DeliveryFailedError, IngestError,
                           MalformedResponseError, RecordTooLargeError, UnsupportedVersionError)
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import CODECS_BY_NAME
from ingest.wire.errors import KAFKA, KafkaErrorCode, kafka_error_for
from ingest.wire.kafka.produce import PartitionProduceData, ProduceRequest, TopicProduceData

log = logging.getLogger(__name__)

PRODUCE_API_KEY = 0
MIN_PRODUCE_VERSION = 3
"""v3: record batches v2 (v0-v2 carry the old message sets, which this client does not write)."""
RECORD_OVERHEAD = 12
"""Bytes a record adds beyond its key, value and headers, at most (varints and attributes), for sizing."""
REQUEST_OVERHEAD = 128
"""Bytes a Produce request adds beyond its batches per partition, at most (names, indexes, lengths)."""


class Delivery(NamedTuple):
    """One batch the broker accepted: its partition, base offset (-1 with acks 0) and record count."""

    topic: str
    partition: int
    base_offset: int
    records: int
    log_append_time_ms: int = -1


class _Open:
    """The records of one partition waiting for their batch to leave."""

    __slots__ = ("records", "bytes", "first_at", "first_at_ms")

    def __init__(self, now: float, now_ms: int) -> None:
        self.records: list[SimpleRecord | bytes | memoryview] = []
        self.bytes = 0
        self.first_at = now
        self.first_at_ms = now_ms


class _Batch:
    """A built batch on its way: its bytes, record count, attempts, and its last error."""

    __slots__ = ("topic", "partition", "data", "count", "attempts", "deadline", "error")

    def __init__(self, topic: str, partition: int, data: bytes | bytearray, count: int, deadline: float) -> None:
        self.topic, self.partition, self.data, self.count = topic, partition, data, count
        self.attempts = 0
        self.deadline = deadline
        self.error: IngestError | None = None


class KafkaProducer:
    """Produces record batches v2 to a Kafka-protocol cluster.

    Args:
        config: :data:`~ingest.client.kafka.config.KAFKA_PRODUCER_CONFIG` values (a Config or a mapping).
        clock: time for linger, deadlines and back-off.
        **overrides: keys with ``_`` for ``.`` (``bootstrap_servers="127.0.0.1:29092"``, ``acks="all"``).

    Raises:
        ConfigError: a key is unknown or missing, or a value is not allowed (naming the value and what is).
    """

    def __init__(self, config: Config | dict | None = None, *, clock: Clock = SYSTEM_CLOCK, **overrides) -> None:
        self.config = cfg = as_config(KAFKA_PRODUCER_CONFIG, config, overrides)
        self.clock = clock
        self.cluster = KafkaCluster(cfg, clock, allow_auto_create=True)
        self.acks: int = cfg["acks"]
        self.codec: int = CODECS_BY_NAME[cfg["compression.type"]]
        self.linger_s = cfg["linger.ms"] / 1000.0
        self.batch_size: int = cfg["batch.size"]
        self.max_request_size: int = cfg["max.request.size"]
        self.retries: int = cfg["retries"]
        self.delivery_timeout_s = cfg["delivery.timeout.ms"] / 1000.0
        self.max_block_s = cfg["max.block.ms"] / 1000.0
        self.request_timeout_ms: int = cfg["request.timeout.ms"]
        self.backoff = Backoff(cfg["retry.backoff.ms"], cfg["retry.backoff.max.ms"])
        self.idempotent: bool = _idempotence(cfg)
        self._sequences = ProducerSequences()
        self._open: dict[tuple[str, int], _Open] = {}   # records: bare values or SimpleRecords
        self._counts: dict[str, tuple[int, float]] = {}   # topic -> (partitions, when read: clock.monotonic())
        self._sticky = StickyPartitions()
        self._linger_due = math.inf
        self._delivered: list[Delivery] = []
        self._closed = False

    # --- sending --------------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | memoryview | None, key: bytes | memoryview | None = None, *,
             headers: Sequence[tuple[str, bytes | None]] = (), partition: int | None = None,
             timestamp_ms: int | None = None) -> None:
        """Add one record to its partition's batch; send the batches that are due.

        Raises:
            RecordTooLargeError: the record alone is larger than ``max.request.size``.
            WrongPartitionError / UnknownTopicError / InvalidTopicError: no such partition or topic
                (after waiting ``max.block.ms`` for the topic's metadata).
            DeliveryFailedError: a batch sent by this call failed (see the module docstring).
        """
        if self._closed:
            raise IngestError("the producer is closed")
        size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if headers:
            size += sum(len(k) + (len(v) if v is not None else 0) + 2 for k, v in headers)
        if size > self.max_request_size:
            raise RecordTooLargeError(f"a record of about {size} bytes is larger than max.request.size "
                                      f"{self.max_request_size}")
        known = self._counts.get(topic)
        if known is None or (partition is not None and partition >= known[0]) \
                or self.clock.monotonic() - known[1] >= self.cluster.max_age_s:
            count = self._count(topic)   # a topic that grew is seen within metadata.max.age.ms, as in Kafka
        else:
            count = known[0]
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else self._sticky.partition(topic, count)
        elif not 0 <= partition < count:
            self.cluster.partition(topic, partition, self.clock.monotonic())   # raises, naming the range
        now = self.clock.monotonic()
        slot = self._open.get((topic, partition))
        if slot is None:
            slot = self._open[(topic, partition)] = _Open(now, self.clock.time_ms())
            self._linger_due = min(self._linger_due, now + self.linger_s)
        if key is None and not headers and timestamp_ms is None and value is not None:
            slot.records.append(value)           # a bare value: the batch builder's cheapest case
        else:
            slot.records.append(SimpleRecord(value, key, headers, timestamp_ms))
        slot.bytes += size
        if slot.bytes >= self.batch_size or now >= self._linger_due:
            self._send_due(now, force=False)

    def produce(self, topic: str, partition: int, records: Iterable[SimpleRecord | bytes], *,
                deadline: float | None = None) -> Delivery:
        """Send ``records`` to one partition now, as one batch, and return its delivery (records of
        that partition still open are sent first, so order holds). ``deadline`` (a ``clock.monotonic()``
        time) ends the wait for metadata and the retries earlier than ``max.block.ms`` and
        ``delivery.timeout.ms`` would (a caller closing with a timeout).

        Raises:
            DeliveryFailedError: the batch failed (see the module docstring).
        """
        now = self.clock.monotonic()
        until = now + self.delivery_timeout_s if deadline is None else min(now + self.delivery_timeout_s, deadline)
        self.cluster.partition(topic, partition, min(now + self.max_block_s, until))
        if (topic, partition) in self._open:
            self._send_due(self.clock.monotonic(), force=True)
        recs = list(records)
        self._ensure_id(topic, partition, until)
        batch = _Batch(topic, partition, self._build(topic, partition, recs, self.clock.time_ms()), len(recs), until)
        delivered = self._deliver([batch])
        self._delivered.remove(delivered[0])
        return delivered[0]

    def flush(self) -> list[Delivery]:
        """Send every open batch and return the deliveries since the last flush, in the order sent.

        Raises:
            DeliveryFailedError: some batch failed; it carries the failed and the delivered ones.
        """
        if self._open:
            self._send_due(self.clock.monotonic(), force=True)
        out, self._delivered = self._delivered, []
        return out

    def close(self) -> list[Delivery]:
        """Flush, then close every connection. Returns what the flush delivered.

        With acks 0 each connection is first settled (one ApiVersions round trip after the last Produce),
        so closing does not lose the requests a broker had not read yet."""
        if self._closed:
            return []
        try:
            return self.flush()
        finally:
            self._closed = True
            try:
                if self.acks == 0:
                    self.cluster.settle()
            finally:
                self.cluster.close()

    def __enter__(self) -> "KafkaProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def partitions_for(self, topic: str) -> int:
        """The number of partitions of ``topic`` (waiting up to ``max.block.ms`` for its metadata)."""
        return self._count(topic)

    # --- internals ------------------------------------------------------------------------------

    def _ensure_id(self, topic: str, partition: int, deadline: float) -> None:
        """A producer id before the first batch is built (idempotence on); nothing is taken from the open
        batches if it cannot be had."""
        if self.idempotent:
            self._sequences.ensure_id(self.cluster, topic, partition, deadline, self.backoff, self.clock)

    def _build(self, topic: str, partition: int, records, now_ms: int) -> bytearray:
        pid, epoch, seq = self._sequences.stamp(topic, partition, len(records))
        return build_batch(records, codec=self.codec, now_ms=now_ms, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq)

    def _count(self, topic: str) -> int:
        parts = self.cluster.partitions(topic, self.clock.monotonic() + self.max_block_s)
        self._counts[topic] = (len(parts), self.clock.monotonic())
        return len(parts)

    def _send_due(self, now: float, *, force: bool) -> None:
        due = [(tp, slot) for tp, slot in self._open.items()
               if force or slot.bytes >= self.batch_size or now - slot.first_at >= self.linger_s]
        batches = []
        if due:
            self._ensure_id(due[0][0][0], due[0][0][1], now + self.delivery_timeout_s)
        for (topic, partition), slot in due:
            del self._open[(topic, partition)]
            data = self._build(topic, partition, slot.records, slot.first_at_ms)
            batches.append(_Batch(topic, partition, data, len(slot.records), now + self.delivery_timeout_s))
            self._sticky.batch_sent(topic, partition, self._counts.get(topic, (1, 0.0))[0])
        self._linger_due = min((s.first_at + self.linger_s for s in self._open.values()), default=math.inf)
        if batches:
            self._deliver(batches)

    def _deliver(self, batches: list[_Batch]) -> list[Delivery]:
        """Send ``batches`` until each is delivered or failed; raise DeliveryFailedError if any failed."""
        delivered: list[Delivery] = []
        failed: list[_Batch] = []
        todo = batches
        round_ = 0
        while todo:
            retry: list[_Batch] = []
            for node, group in self._by_leader(todo, retry, failed).items():
                for chunk in self._chunks(group):
                    self._send_request(node, chunk, delivered, retry)
            todo = []
            now = self.clock.monotonic()
            for b in retry:
                b.attempts += 1
                if b.attempts > self.retries or now >= b.deadline:
                    failed.append(b)
                else:
                    todo.append(b)
            if todo:
                round_ += 1
                wait = min(self.backoff.delay_s(round_), max(0.0, min(b.deadline for b in todo) - now))
                log.debug("retrying %d batches in %.3f s", len(todo), wait)
                self.clock.sleep(wait)
        self._delivered.extend(delivered)
        if failed:
            self._sequences.reset()   # the leader may or may not hold a failed batch: a new id, sequences from 0
            all_delivered, self._delivered = self._delivered, []
            first = failed[0]
            what = "; ".join(f"{b.topic}-{b.partition} ({b.count} records): {b.error}" for b in failed[:5])
            more = f" and {len(failed) - 5} more batches" if len(failed) > 5 else ""
            raise DeliveryFailedError(
                f"{sum(b.count for b in failed)} records in {len(failed)} batches were not written: {what}{more}",
                [(b.topic, b.partition, b.count, b.error) for b in failed], all_delivered) from first.error
        return delivered

    def _by_leader(self, batches: list[_Batch], retry: list[_Batch], failed: list[_Batch]) -> dict[int, list[_Batch]]:
        groups: dict[int, list[_Batch]] = {}
        for b in batches:
            try:
                info = self.cluster.partition(b.topic, b.partition, min(b.deadline, self.clock.monotonic()))
            except IngestError as exc:
                b.error = exc
                (retry if exc.retriable or isinstance(exc, (BrokerUnavailableError, MalformedResponseError))
                 else failed).append(b)
                continue
            groups.setdefault(info.leader, []).append(b)
        return groups

    def _chunks(self, group: list[_Batch]) -> Iterable[list[_Batch]]:
        chunk: list[_Batch] = []
        size = 0
        for b in group:
            n = len(b.data) + REQUEST_OVERHEAD
            if chunk and size + n > self.max_request_size:
                yield chunk
                chunk, size = [], 0
            chunk.append(b)
            size += n
        if chunk:
            yield chunk

    def _send_request(self, node: int, chunk: list[_Batch], delivered: list[Delivery], retry: list[_Batch]) -> None:
        topics: dict[str, list[PartitionProduceData]] = {}
        for b in chunk:
            topics.setdefault(b.topic, []).append(PartitionProduceData(b.partition, b.data))
        request = ProduceRequest(transactional_id=None, acks=self.acks, timeout_ms=self.request_timeout_ms,
                                 topic_data=tuple(TopicProduceData(t, tuple(p)) for t, p in topics.items()))
        try:
            conn = self.cluster.connection(node)
            version = conn.version(PRODUCE_API_KEY, lo=MIN_PRODUCE_VERSION)
            if self.acks == 0:
                conn.send_only(request, version)
                delivered.extend(Delivery(b.topic, b.partition, -1, b.count) for b in chunk)
                return
            answer = conn.call(request, version)
        except UnsupportedVersionError:
            raise
        except (BrokerUnavailableError, MalformedResponseError) as exc:
            self.cluster.invalidate()
            for b in chunk:
                b.error = exc
            retry.extend(chunk)
            return
        results = {(t.name, p.index): p for t in answer.responses for p in t.partition_responses}
        for b in chunk:
            p = results.get((b.topic, b.partition))
            if p is None:
                b.error = MalformedResponseError(f"Produce answer of broker {node} has no {b.topic}-{b.partition}")
                retry.append(b)
                continue
            if p.error_code == KafkaErrorCode.NONE:
                delivered.append(Delivery(b.topic, b.partition, p.base_offset, b.count, p.log_append_time_ms))
                continue
            context = f"Produce of {b.count} records to {b.topic}-{b.partition} (broker {node})"
            b.error = kafka_error_for(p.error_code, context + (f": {p.error_message}" if p.error_message else ""))
            if needs_refresh(p.error_code):
                self.cluster.invalidate(b.topic)
                retry.append(b)
            elif KAFKA.error_class(p.error_code).retriable:
                retry.append(b)
            else:
                log.warning("%s refused with %s: %s", context, describe_code(p.error_code), p.error_message)
                b.attempts = self.retries + 1
                retry.append(b)


def _idempotence(cfg: Config) -> bool:
    """``enable.idempotence`` as Kafka 3.x clients resolve it: on by default, off by default when acks is not
    all or retries is 0, and a set ``true`` that conflicts with them is refused.

    Raises:
        ConfigError: ``enable.idempotence=true`` set together with acks 0/1 or retries 0.
    """
    if not cfg["enable.idempotence"]:
        return False
    conflict = ("acks is not all" if cfg["acks"] != -1 else "retries is 0" if cfg["retries"] == 0 else None)
    if conflict is None:
        return True
    if cfg.is_set("enable.idempotence"):
        raise ConfigError(f"enable.idempotence=true needs acks=all and retries > 0, but {conflict}; set acks=all "
                          "or enable.idempotence=false")
    return False
