"""One Spark input partition of ``format("ingest")``: fetch a range, decode each event, yield rows.

Runs on an executor. Fetching is the loader's fetch loop
(:func:`ingest.loader.fetch.iter_range`: growing fetches for big messages,
compressed sets decompressed, a replicated partition read through its current
leader and never above the high watermark). Decoding is the event
deserializer's (:class:`ingest.events.serde.EventDeserializer`): each message is
decoded with its writer schema and resolved into the reader schema (the one the
columns were made of), by Avro's rules.

A Kafka-format partition is read with the loader's Kafka fetch loop
(:func:`ingest.loader.kafka_fetch.iter_kafka_range`: whole record batches from the
partition's current leader through the product's Kafka client, each checked once,
framing and CRC-32C, every codec inflated within a bound, records before the start
skipped, nothing at or above the end); each row gets the record's key, headers and
timestamp (:mod:`ingest.loader.record_columns`) and its own offset. A batch that fails
its check fails the read like a 0.7 message failing its CRC (``failOnDataLoss=false``:
skipped with a WARNING).

Nothing is written and nothing is committed: a read opens broker connections
only, and fetches (FETCH requests are reads; no consumer group, no offsets znode).

A message that fails its CRC, a damaged range of the broker's log, or a payload
that does not decode fails the read, naming the partition, the offset and why
(as Spark's Kafka source fails on data it cannot deliver, ``failOnDataLoss``).
With ``failOnDataLoss=false`` the first two are skipped with a WARNING (the
fetch loop goes on at the broker's next valid offset), so every intact message
is read; a payload that does not decode still fails the read.
"""
from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from ingest.client.fetch_settings import FetchSettings
from ingest.client.partition_reader import open_consumer, open_kafka_fetcher
from ingest.errors import EventDecodeError, InvalidMessageError, OffsetOutOfRangeError
from ingest.events.envelope import PREFIX, PREFIX_SIZE
from ingest.explore.offsets import ReadRange, partition_name
from ingest.loader.fetch import Corrupt, Damaged, iter_range
from ingest.loader.kafka_fetch import iter_kafka_range
from ingest.loader.record_columns import record_values
from ingest.registry_client_config import NO_AUTH, RegistryAuth

log = logging.getLogger(__name__)

META_COLUMNS = (("topic", "string", False), ("partition", "int", False), ("broker_id", "int", True),
                ("offset", "long", False), ("event_time", "timestamp", True))
"""The columns after the event's own (name, Spark type, nullable); ``broker_id`` is null for a replicated topic."""

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """Everything an executor needs besides its range; small and picklable."""

    registry_url: str
    reader_schema: dict
    reader_schema_id: int
    fetch: FetchSettings
    start_strategy: str = "error"   # startingOffsetsByTimestampStrategy
    fail_on_data_loss: bool = True  # failOnDataLoss
    registry_auth: RegistryAuth = NO_AUTH  # basic.auth.* / schema.registry.ssl.* (repr hides secrets)


def event_time(ms: int | None) -> _dt.datetime | None:
    """``header.time`` (ms since the epoch) as an aware UTC datetime (what Spark stores as a timestamp)."""
    return None if ms is None else _EPOCH + _dt.timedelta(milliseconds=ms)


class _Decoder:
    """Writer schema per id, resolved into the reader schema (skipped when they are the same schema id)."""

    def __init__(self, settings: ReadSettings) -> None:
        from ingest.events.registry_client import RegistryClient  # deferred: imports fastavro
        from ingest.events.serde import EventDeserializer  # deferred: imports fastavro

        registry = RegistryClient(settings.registry_url, auth=settings.registry_auth)
        self.same = EventDeserializer(registry)
        self.resolving = EventDeserializer(registry, reader_schema=settings.reader_schema)
        self.reader_id = settings.reader_schema_id

    def decode(self, payload: bytes, topic: str, offset: int) -> dict:
        same = len(payload) >= PREFIX_SIZE and PREFIX.unpack_from(payload)[1] == self.reader_id
        return (self.same if same else self.resolving).deserialize(payload, topic=topic, offset=offset)


def _time_of(record: dict) -> int | None:
    header = record.get("header")
    return header.get("time") if isinstance(header, dict) else None


def _named(items: Iterator, topic: str, name: str, start: int) -> Iterator:
    """``items``, with an OFFSET_OUT_OF_RANGE answer explained (the broker names the partition by number only)."""
    try:
        yield from items
    except OffsetOutOfRangeError as exc:
        raise OffsetOutOfRangeError(
            f"{topic} partition {name}: reading from offset {start}: {exc}; an offset must be a message boundary "
            f"between the partition's earliest and latest offsets (a JSON offset inside a message is refused)") from exc


def _skip_damaged(settings: ReadSettings, topic: str, name: str, what: str) -> None:
    """Skip the damaged ``what`` of a partition with a warning, or raise when ``failOnDataLoss`` is true.

    Raises:
        InvalidMessageError: ``failOnDataLoss`` is true (the default).
    """
    if settings.fail_on_data_loss:
        raise InvalidMessageError(f"{topic} partition {name}: {what}; nothing after it is read "
                                  "(failOnDataLoss=false skips it and reads on)")
    log.warning("%s partition %s: %s; skipped (failOnDataLoss=false)", topic, name, what)


def _decoded(decoder: _Decoder, item, topic: str, name: str) -> dict:
    """The event of ``item``'s payload, or EventDecodeError naming the partition."""
    try:
        return decoder.decode(item.payload, topic, item.offset)
    except EventDecodeError as exc:
        raise EventDecodeError(f"{topic} partition {name}: {exc}") from exc


def records(r: ReadRange, settings: ReadSettings, consumer) -> Iterator[tuple[int, dict, int | None]]:
    """(offset, record, event time ms) of every message of the range, cut by its event times.

    Raises:
        InvalidMessageError: a message failed its CRC, or the broker's log is damaged in the range.
        EventDecodeError: a payload does not decode (wrong framing, unknown schema id, bad Avro).
        OffsetOutOfRangeError: no message at or after the starting timestamp, with strategy ``error``.
    """
    topic, name = r.part.topic, partition_name(r.part)
    decoder = _Decoder(settings)
    started = r.start_time is None
    fetch = settings.fetch
    items = iter_range(consumer, topic, r.part.partition, r.start, r.end, fetch_size=fetch.fetch_size,
                       max_fetch_size=fetch.max_fetch_size, wait_s=fetch.leader_wait_s if r.part.replicated else 0.0)
    for item in _named(items, topic, name, r.start):
        if isinstance(item, (Corrupt, Damaged)):
            what = (f"message at offset {item.offset} is corrupt ({item.reason})" if isinstance(item, Corrupt)
                    else f"the broker's log is damaged at offsets {item.offset}..{item.next_offset} ({item.reason})")
            _skip_damaged(settings, topic, name, what)
            continue
        record = _decoded(decoder, item, topic, name)
        t = _time_of(record)
        if not started:
            if t is None or t < r.start_time:
                continue
            started = True
        if r.end_time is not None and t is not None and t >= r.end_time:
            return
        yield item.offset, record, t
    if not started and settings.start_strategy == "error" and r.start < r.end:
        raise OffsetOutOfRangeError(
            f"{topic} partition {name}: no message in [{r.start}, {r.end}) has an event time at or after the "
            f"starting timestamp {r.start_time}; set startingOffsetsByTimestampStrategy=latest to read nothing "
            f"from such a partition")


def kafka_records(r: ReadRange, settings: ReadSettings, fetcher) -> Iterator[tuple[int, dict, int]]:
    """(offset, record with its record columns, event time ms) of every record of a Kafka-format range.

    The event time is ``header.time`` when the event has the product's header, else the record's
    timestamp (as the loader buckets it).

    Raises:
        InvalidMessageError: a record batch failed its check (CRC-32C, framing, a record that lies, a
            decompression bomb), unless ``failOnDataLoss=false``; or one that cannot be skipped safely.
        EventDecodeError: a value does not decode (no Confluent framing, unknown schema id, bad Avro).
        OffsetOutOfRangeError: the log no longer holds the range (retention moved its start meanwhile).
    """
    topic, name = r.part.topic, partition_name(r.part)
    decoder = _Decoder(settings)
    for item in _named(iter_kafka_range(fetcher, topic, r.part.partition, r.start, r.end,
                                        wait_s=settings.fetch.leader_wait_s), topic, name, r.start):
        if isinstance(item, Corrupt):
            what = f"record batch at offsets {item.offset}..{item.next_offset} is damaged ({item.reason})"
            _skip_damaged(settings, topic, name, what)
            continue
        record = _decoded(decoder, item, topic, name)
        t = _time_of(record)
        record.update(record_values(item.key, item.headers, item.timestamp))
        yield item.offset, record, item.timestamp if t is None else t


def rows(r: ReadRange, settings: ReadSettings, convert) -> Iterator[tuple[Any, ...]]:
    """Spark rows of the range: the event's columns (``convert``; on a Kafka-format topic with the record
    columns), then :data:`META_COLUMNS`."""
    part = r.part
    broker_id = None if part.replicated else part.broker_id   # a replicated partition is on no one broker
    if part.kafka:
        with open_kafka_fetcher(part, settings.fetch) as fetcher:
            for offset, record, t in kafka_records(r, settings, fetcher):
                yield convert(record) + (part.topic, part.partition, None, offset, event_time(t))
        return
    consumer = open_consumer(part, settings.fetch)
    try:
        for offset, record, t in records(r, settings, consumer):
            yield convert(record) + (part.topic, part.partition, broker_id, offset, event_time(t))
    finally:
        consumer.close()
