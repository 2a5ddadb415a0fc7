"""Synchronous Kafka-protocol reads: Fetch by partition from an offset, and ListOffsets.

:meth:`KafkaFetcher.fetch` asks the partition's leader for the record batches from an offset
(``fetch.max.wait.ms``, ``fetch.min.bytes``, ``fetch.max.bytes``, ``max.partition.fetch.bytes``;
read-uncommitted, no fetch session) and returns a :class:`FetchedBatches`: the whole batches of
the answer, each checked once (framing, magic 2, CRC-32C over the batch:
:func:`ingest.records.validation.check_batch`), a last batch that the broker cut at the byte limit
dropped (Kafka's consumer does the same), the high watermark and log start offset. Records are read
from the batches only when asked (:meth:`FetchedBatches.records`, which checks every field of every
record and skips records before the fetch offset and control batches): counting, copying or
forwarding batches costs no per-record Python work.

An offset outside the log raises :class:`~ingest.errors.OffsetOutOfRangeError` naming the offset
and the log's range (asked with ListOffsets), so that the caller decides where to go (Kafka's
``auto.offset.reset`` is the caller's choice here). Leader errors and lost connections read the
metadata again and retry with back-off until ``request.timeout.ms`` has passed since the call began;
then the last error is raised.

:meth:`KafkaFetcher.list_offsets` answers the earliest (-2) and latest (-1) offsets, the offset of
the record with the largest timestamp (-3, ListOffsets v7+), or the first offset whose timestamp is
at or after a time (None when there is none).

Concurrency: not thread-safe; one thread uses a fetcher.
"""
from __future__ import annotations

import logging
from typing import Iterator, NamedTuple, Sequence

from ingest.client.kafka.cluster import Backoff, KafkaCluster, needs_refresh
from ingest.client.kafka.config import KAFKA_CONSUMER_CONFIG, as_config
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import (BrokerUnavailableError, IngestError, MalformedResponseError, OffsetOutOfRangeError)
from ingest.records.batch import BatchHeader, iter_batches
from ingest.records.record import Record, iter_records
from ingest.records.validation import check_batch
from ingest.wire.errors import KAFKA, KafkaErrorCode, kafka_error_for
from ingest.wire.kafka.fetch import FetchPartition, FetchRequest, FetchTopic
from ingest.wire.kafka.list_offsets import (EARLIEST, LATEST, MAX_TIMESTAMP, ListOffsetsPartition, ListOffsetsRequest,
                                            ListOffsetsTopic)

log = logging.getLogger(__name__)

FETCH_API_KEY, LIST_OFFSETS_API_KEY = 1, 2
MIN_FETCH_VERSION = 4
"""v4: record batches v2 and the last stable offset (older versions answer message sets)."""
MIN_LIST_OFFSETS_VERSION = 1
"""v1: one offset and its timestamp (v0 answers Kafka 0.8's list of offsets)."""
MAX_TIMESTAMP_VERSION = 7


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class FetchedBatches:
    """The whole, checked record batches of one partition's Fetch answer.

    Attributes:
        topic, partition, fetch_offset: what was asked.
        high_watermark, log_start_offset, last_stable_offset: as the broker answered (-1 if not sent).
        data: the batches' bytes (a memoryview of the answer).
        batches: ``(position in data, header)`` of each batch, in order.
    """

    __slots__ = ("topic", "partition", "fetch_offset", "high_watermark", "log_start_offset", "last_stable_offset",
                 "data", "batches")

    def __init__(self, topic: str, partition: int, fetch_offset: int, high_watermark: int, log_start_offset: int,
                 last_stable_offset: int, data: memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        self.topic, self.partition, self.fetch_offset = topic, partition, fetch_offset
        self.high_watermark, self.log_start_offset = high_watermark, log_start_offset
        self.last_stable_offset = last_stable_offset
        self.data, self.batches = data, batches

    @property
    def next_offset(self) -> int:
        """Where the next fetch starts: after the last whole batch, or the fetch offset when there is none."""
        return max(self.fetch_offset, self.batches[-1][1].next_offset) if self.batches else self.fetch_offset

    @property
    def record_count(self) -> int:
        """Records at or after the fetch offset, from the batch headers (control batches left out)."""
        n = 0
        for _pos, h in self.batches:
            if h.is_control:
                continue
            n += h.records_count
            if h.base_offset < self.fetch_offset:
                n -= min(h.records_count, self.fetch_offset - h.base_offset)
        return n

    def records(self, *, inflate_limit: int | None = None) -> Iterator[Record]:
        """Every record at or after the fetch offset, in order, each field checked
        (:func:`ingest.records.record.iter_records`); keys, values and header values are memoryviews."""
        kwargs = {} if inflate_limit is None else {"inflate_limit": inflate_limit}
        start = self.fetch_offset
        for pos, h in self.batches:
            if h.is_control:
                continue
            for rec in iter_records(self.data, pos, **kwargs):
                if rec.offset >= start:
                    yield rec

    def __repr__(self) -> str:
        return (f"FetchedBatches({self.topic}-{self.partition} from {self.fetch_offset}: {len(self.batches)} batches, "
                f"next {self.next_offset}, high watermark {self.high_watermark})")


class KafkaFetcher:
    """Reads partitions of a Kafka-protocol cluster by offset.

    Args:
        config: :data:`~ingest.client.kafka.config.KAFKA_CONSUMER_CONFIG` values (a Config or a mapping).
        clock: time for deadlines and back-off.
        **overrides: keys with ``_`` for ``.`` (``bootstrap_servers=...``, ``fetch_max_wait_ms=100``).

    Raises:
        ConfigError: a key is unknown or missing, or a value is not allowed (naming the value and what is).
    """

    def __init__(self, config: Config | dict | None = None, *, clock: Clock = SYSTEM_CLOCK, **overrides) -> None:
        self.config = cfg = as_config(KAFKA_CONSUMER_CONFIG, config, overrides)
        self.clock = clock
        self.cluster = KafkaCluster(cfg, clock, allow_auto_create=cfg["allow.auto.create.topics"])
        self.timeout_s = cfg["request.timeout.ms"] / 1000.0
        self.backoff = Backoff(cfg["retry.backoff.ms"], cfg["retry.backoff.max.ms"])
        self.check_crcs: bool = cfg["check.crcs"]

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> "KafkaFetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def partitions_for(self, topic: str) -> int:
        """The number of partitions of ``topic``.

        Raises:
            UnknownTopicError: the topic does not exist (within ``request.timeout.ms``).
        """
        return len(self.cluster.partitions(topic, self.clock.monotonic() + self.timeout_s))

    # --- Fetch ----------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int | None = None,
              min_bytes: int | None = None, max_bytes: int | None = None,
              partition_max_bytes: int | None = None) -> FetchedBatches:
        """The record batches of ``topic``-``partition`` from ``offset`` (settings default to the config's).

        Raises:
            OffsetOutOfRangeError: ``offset`` is before the log start or after its end (the message names both).
            UnknownTopicError / WrongPartitionError: no such topic or partition.
            CorruptRecordError / InvalidRecordError: a whole batch of the answer fails its check.
            BrokerUnavailableError / NotLeaderForPartitionError / ...: the last error, when retries
                did not succeed within ``request.timeout.ms``.
        """
        cfg = self.config
        wait_ms = cfg["fetch.max.wait.ms"] if max_wait_ms is None else max_wait_ms
        request = FetchRequest(
            replica_id=-1, max_wait_ms=wait_ms,
            min_bytes=cfg["fetch.min.bytes"] if min_bytes is None else min_bytes,
            max_bytes=cfg["fetch.max.bytes"] if max_bytes is None else max_bytes,
            topics=(FetchTopic(topic, (FetchPartition(
                partition, fetch_offset=offset,
                partition_max_bytes=cfg["max.partition.fetch.bytes"] if partition_max_bytes is None
                else partition_max_bytes),)),))
        answer = self._call_leader(topic, partition, FETCH_API_KEY, MIN_FETCH_VERSION, None, request,
                                   socket_timeout_s=self.timeout_s + wait_ms / 1000.0, what=f"Fetch from {offset}",
                                   find=lambda a: _find(a.responses, "topic", "partitions", "partition_index",
                                                        topic, partition))
        if answer.error_code == KafkaErrorCode.OFFSET_OUT_OF_RANGE:
            raise self._out_of_range(topic, partition, offset, answer)
        return self._batches(topic, partition, offset, answer)

    def _batches(self, topic: str, partition: int, offset: int, p) -> FetchedBatches:
        data = memoryview(p.records or b"")
        batches = []
        for pos, h in iter_batches(data):
            if h.magic != 2:
                break
            if self.check_crcs:
                check_batch(data, pos, pos + h.size)
            if h.next_offset > offset:
                batches.append((pos, h))
        if not batches and len(data) >= 17 and data[16] != 2:
            raise MalformedResponseError(f"Fetch of {topic}-{partition} from {offset} answered records of magic "
                                         f"{data[16]}; this client reads record batches v2 (magic 2) only")
        return FetchedBatches(topic, partition, offset, p.high_watermark, p.log_start_offset,
                              p.last_stable_offset, data, batches)

    def _out_of_range(self, topic: str, partition: int, offset: int, p) -> OffsetOutOfRangeError:
        try:
            start = self.list_offsets(topic, partition, EARLIEST).offset
            end = self.list_offsets(topic, partition, LATEST).offset
            where = f"the log holds offsets [{start}, {end})"
        except IngestError as exc:
            start, end = p.log_start_offset, p.high_watermark
            where = f"the broker named log start {start} and high watermark {end} ({exc})"
        return OffsetOutOfRangeError(f"offset {offset} of {topic}-{partition} is out of range: {where}; "
                                     "fetch from an offset inside it (list_offsets: earliest or latest)")

    # --- ListOffsets -----------------------------------------------------------------------------

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> OffsetAndTimestamp:
        """ListOffsets of one partition: ``timestamp`` -2 earliest, -1 latest (the next offset to be
        written), -3 the record with the largest timestamp, else the first record at or after it
        (offset -1 when there is none).

        Raises:
            UnsupportedVersionError: -3 asked of a broker without ListOffsets v7.
            UnknownTopicError / WrongPartitionError / ...: as :meth:`fetch`.
        """
        lo = MAX_TIMESTAMP_VERSION if timestamp == MAX_TIMESTAMP else MIN_LIST_OFFSETS_VERSION
        request = ListOffsetsRequest(replica_id=-1, topics=(ListOffsetsTopic(topic, (
            ListOffsetsPartition(partition, timestamp=timestamp),)),))
        p = self._call_leader(topic, partition, LIST_OFFSETS_API_KEY, lo, None, request,
                              socket_timeout_s=self.timeout_s, what=f"ListOffsets at {timestamp}",
                              find=lambda a: _find(a.topics, "name", "partitions", "partition_index", topic,
                                                   partition))
        return OffsetAndTimestamp(p.offset, p.timestamp)

    def list_offsets_many(self, partitions: Sequence[tuple[str, int]],
                          timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets at ``timestamp`` (-2 earliest or -1 latest) of many partitions: one request per
        leader carrying all its partitions, as Kafka's consumer asks (``OffsetFetcher`` groups the
        partitions by leader). Returns the offset of each partition its leader answered without an error;
        a partition without a known leader, one whose leader answered an error for it, or whose leader
        did not answer at all is missing from the result (ask it alone with :meth:`list_offsets`, which
        retries and raises the error that names it). One pass: no retries here."""
        if timestamp not in (EARLIEST, LATEST):
            raise ValueError(f"timestamp {timestamp}: list_offsets_many asks -2 (earliest) or -1 (latest)")
        deadline = self.clock.monotonic() + self.timeout_s
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            try:
                leader = self.cluster.partition(topic, partition, deadline).leader
            except IngestError as exc:
                if not exc.retriable:
                    raise
                continue
            if leader >= 0:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        out: dict[tuple[str, int], int] = {}
        for leader, topics in by_leader.items():
            request = ListOffsetsRequest(replica_id=-1, topics=tuple(
                ListOffsetsTopic(t, tuple(ListOffsetsPartition(p, timestamp=timestamp) for p in parts))
                for t, parts in topics.items()))
            try:
                conn = self.cluster.connection(leader)
                answer = conn.call(request, conn.version(LIST_OFFSETS_API_KEY, lo=MIN_LIST_OFFSETS_VERSION, hi=None),
                                   timeout_s=self.timeout_s)
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                log.debug("ListOffsets of %d partition(s) from broker %d failed (%s): each is asked alone",
                          sum(map(len, topics.values())), leader, exc)
                self.cluster.invalidate()
                continue
            except IngestError as exc:
                if not exc.retriable:
                    raise
                continue
            if getattr(answer, "error_code", 0):
                continue
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code == KafkaErrorCode.NONE and p.partition_index in topics.get(t.name, ()):
                        out[(t.name, p.partition_index)] = p.offset
        return out

    def earliest(self, topic: str, partition: int) -> int:
        """The log start offset of the partition."""
        return self.list_offsets(topic, partition, EARLIEST).offset

    def latest(self, topic: str, partition: int) -> int:
        """The offset the next record written to the partition gets (its high watermark)."""
        return self.list_offsets(topic, partition, LATEST).offset

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is at or after ``timestamp_ms``; None if no record is."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp {timestamp_ms}: a time in ms since the epoch is >= 0 (-1, -2, -3 are "
                             "list_offsets' special times)")
        found = self.list_offsets(topic, partition, timestamp_ms).offset
        return None if found < 0 else found

    # --- one request to a partition's leader, with retries ------------------------------------

    def _call_leader(self, topic, partition, api_key, lo, hi, request, *, socket_timeout_s, what, find):
        """Send ``request`` to the leader of ``topic``-``partition`` and return its partition's answer
        (``find`` picks it); retriable errors retry until ``request.timeout.ms`` after the first try.
        OFFSET_OUT_OF_RANGE comes back to the caller (a Fetch's own case)."""
        deadline = self.clock.monotonic() + self.timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                info = self.cluster.partition(topic, partition, deadline)
                conn = self.cluster.connection(info.leader)
                answer = conn.call(request, conn.version(api_key, lo=lo, hi=hi), timeout_s=socket_timeout_s)
                top = getattr(answer, "error_code", 0)
                if top:
                    raise kafka_error_for(top, f"{what} of {topic}-{partition} (broker {info.leader})")
                p = find(answer)
                if p is None:
                    raise MalformedResponseError(f"the {what} answer of broker {info.leader} has no "
                                                 f"{topic}-{partition}")
                code = p.error_code
                if code in (KafkaErrorCode.NONE, KafkaErrorCode.OFFSET_OUT_OF_RANGE):
                    return p
                error = kafka_error_for(code, f"{what} of {topic}-{partition} (broker {info.leader})")
                if needs_refresh(code):
                    self.cluster.invalidate(topic)
                elif not KAFKA.error_class(code).retriable:
                    raise error
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                self.cluster.invalidate()
                error = exc
            except IngestError as exc:
                if not exc.retriable:
                    raise
                error = exc
            now = self.clock.monotonic()
            if now >= deadline:
                raise error
            log.debug("%s of %s-%d failed (%s); retry %d", what, topic, partition, error, attempt)
            self.clock.sleep(min(self.backoff.delay_s(attempt), deadline - now))


def _find(topics, name_field: str, parts_field: str, index_field: str, topic: str, partition: int):
    for t in topics:
        if getattr(t, name_field) == topic:
            for p in getattr(t, parts_field):
                if getattr(p, index_field) == partition:
                    return p
    return None
