"""A task's fetch loop over a Kafka-format partition: every record of ``[start, end)``, a damaged batch
set aside instead of failing the task.

The task fetches with the product's Kafka client
(:meth:`~ingest.client.kafka.fetcher.KafkaFetcher.fetch`: whole record batches of the partition's
current leader, leader changes retried) and checks each batch once here, framing and CRC-32C over
the whole batch (:func:`~ingest.records.validation.check_batch`, every codec), before reading its
records (:func:`~ingest.records.record.iter_records`, which checks every record's fields and inflates
a compressed batch within a bound, so a decompression bomb is refused). Records before ``start``
(a batch holding ``start`` is sent whole) and control batches are skipped; the loop ends at ``end``
(the high watermark the plan saw).

A batch that fails its check (a flipped bit on a disk, or a batch that inflates past the bound) is
yielded as one :class:`~ingest.loader.fetch.Corrupt` over its offset range, and quarantined with its
raw bytes; the loop goes on after it. Its range comes from its header, which the CRC does not
wholly cover: a range that does not move forward or runs past ``end`` is not trusted, and the task
fails naming the offset (as the 0.7 loop does for a message whose length is unusable), as it does
for a fetch answer holding no whole batch.

A replicated partition's high watermark can lag the planned ``end`` for a moment after a leader
change: an answer without records before ``end`` is retried (doubling back-off) for ``wait_s``.
"""
from __future__ import annotations

import logging
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterator

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import CorruptRecordError, InvalidMessageError, OffsetOutOfRangeError, RecordTooLargeError
from ingest.loader.fetch import Corrupt
from ingest.records.compiled_records import RecordColumns, read_columns
from ingest.records.record import iter_records
from ingest.records.validation import check_batch

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One record of a Kafka-format partition: ``payload`` is its value (b"" when null)."""

    offset: int
    payload: bytes
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    @property
    def next_offset(self) -> int:
        return self.offset + 1


class KafkaBatch:
    """The records of one batch with ``start <= offset < end``, as columns
    (:class:`~ingest.records.compiled_records.RecordColumns`): the loader's batch path; :meth:`message`
    gives one record as a :class:`KafkaMessage` for the per-message path."""

    __slots__ = ("offsets", "timestamps", "keys", "values", "headers")

    def __init__(self, columns: RecordColumns, lo: int, hi: int) -> None:
        whole = lo == 0 and hi == len(columns.offsets)
        cut = (lambda c: c) if whole else (lambda c: c[lo:hi])
        self.offsets, self.timestamps = cut(columns.offsets), cut(columns.timestamps)
        self.keys, self.values = cut(columns.keys), cut(columns.values)
        self.headers = None if columns.headers is None else cut(columns.headers)

    @property
    def offset(self) -> int:
        return self.offsets[0]

    @property
    def next_offset(self) -> int:
        return self.offsets[-1] + 1

    def __len__(self) -> int:
        return len(self.offsets)

    def count_before(self, boundary: int) -> int:
        """How many of the records lie before offset ``boundary``."""
        return bisect_left(self.offsets, boundary)

    def message(self, i: int) -> KafkaMessage:
        return KafkaMessage(self.offsets[i], self.values[i], self.keys[i],
                            () if self.headers is None else self.headers[i], self.timestamps[i])

    def messages(self) -> Iterator[KafkaMessage]:
        return map(self.message, range(len(self.offsets)))


def iter_kafka_range(fetcher, topic: str, partition: int, start: int, end: int, *, wait_s: float = 0.0,
                     clock: Clock = SYSTEM_CLOCK, batches: bool = False) -> Iterator[KafkaMessage | KafkaBatch | Corrupt]:
    """Every record with ``start <= offset < end`` in order; a damaged batch as :class:`Corrupt`.

    With ``batches``, a batch whose records the compiled reader reads
    (:func:`~ingest.records.compiled_records.read_columns`) comes as one :class:`KafkaBatch` of its
    records in the range; any other batch record by record, as without it.

    Raises:
        OffsetOutOfRangeError: the log starts after ``start`` (retention moved it during the run), or
            ends before ``end`` (still, ``wait_s`` after the first empty answer).
        InvalidMessageError: a damaged batch whose offset range cannot be trusted, or an answer with no
            whole batch.
    """
    offset = start
    empty_since: float | None = None
    delay = 0.05
    while offset < end:
        fetched = fetcher.fetch(topic, partition, offset)
        data = fetched.data
        moved = False
        for pos, h in fetched.batches:
            if h.base_offset >= end:
                return
            try:
                check_batch(data, pos, pos + h.size)
                columns = read_columns(data, pos) if batches and not h.is_control else None
                records = [] if h.is_control or columns is not None else list(iter_records(data, pos))
            except (CorruptRecordError, InvalidMessageError, RecordTooLargeError) as exc:
                if not offset < h.next_offset <= end:
                    raise InvalidMessageError(
                        f"{topic}/{partition}: damaged record batch at offset {offset} whose header claims offsets "
                        f"[{h.base_offset}, {h.next_offset}), outside [{offset}, {end}): cannot skip it safely "
                        f"({exc})") from exc
                log.warning("%s/%d: quarantining the record batch at offsets [%d, %d): %s", topic, partition,
                            h.base_offset, h.next_offset, exc)
                yield Corrupt(max(offset, h.base_offset), h.next_offset, bytes(data[pos:pos + h.size]),
                              f"record batch [{h.base_offset}, {h.next_offset}): {exc}")
                offset, moved = h.next_offset, True
                continue
            if columns is not None:
                lo, hi = bisect_left(columns.offsets, offset), bisect_left(columns.offsets, end)
                if lo < hi:
                    yield KafkaBatch(columns, lo, hi)
                if hi < len(columns.offsets):
                    return
            for r in records:
                if r.offset < offset:
                    continue
                if r.offset >= end:
                    return
                yield KafkaMessage(r.offset, bytes(r.value) if r.value is not None else b"",
                                   None if r.key is None else bytes(r.key),
                                   tuple((k, None if v is None else bytes(v)) for k, v in r.headers), r.timestamp)
            if h.next_offset > offset:
                offset, moved = h.next_offset, True
        if moved:
            empty_since, delay = None, 0.05
            continue
        if len(data):
            raise InvalidMessageError(f"{topic}/{partition}: the answer to a fetch at offset {offset} holds "
                                      f"{len(data)} bytes but no whole record batch from that offset")
        now = clock.monotonic()
        empty_since = now if empty_since is None else empty_since
        if now + delay - empty_since <= wait_s:
            log.info("%s/%d: nothing at offset %d yet (end %d, high watermark %d); waiting %.2f s", topic, partition,
                     offset, end, fetched.high_watermark, delay)
            clock.sleep(delay)
            delay = min(1.0, delay * 2)
            continue
        waited = f" (waited {now - empty_since:.1f} s for it)" if wait_s else ""
        raise OffsetOutOfRangeError(f"{topic}/{partition}: the log ends at offset {offset} (high watermark "
                                    f"{fetched.high_watermark}), before the planned end {end}{waited}")
