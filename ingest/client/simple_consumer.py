"""SimpleConsumer: stateless pulls from one broker (fetch, multifetch, offsets, metadata, deletions).

The consumer keeps no position: callers pass offsets (byte positions in the
partition log) and get back whole messages with their offsets. A fetch returns
at most ``max_bytes`` of the log; the last message may be cut off, which is
detected by size (``iter_messages`` stops before it). When not even one message
fits, :meth:`iter_range` retries with a fetch size large enough for that
message (read from its length field), up to ``max_fetch_size``, and then raises
:class:`~ingest.errors.FetchSizeTooSmallError` naming both sizes.

A fetch at or inside a damaged range of the broker's log (bytes that failed
validation there) raises :class:`~ingest.errors.CorruptRangeError` carrying the
next valid offset (docs/protocol.md, CORRUPT_RANGE); :meth:`iter_range` skips
to it, logs the skipped range at ERROR and adds it to ``skipped``.

Concurrency: one SimpleConsumer holds one connection; its calls are serialised
by that connection's lock, so it may be shared, but threads wanting parallel
fetches should each have their own.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ingest.wire import protocol
from ingest.wire.protocol import DeletedSegmentsRequest, DeletedSegmentsResponse
from ingest.wire.connection import BrokerConnection
from ingest.records.message_batch import MessageAndOffset, MessageBatch
from ingest.client.deleted_segments import DeletedSegment
from ingest.client.fetch_settings import DEFAULT_FETCH, FetchSettings
from ingest.errors import (
    CorruptRangeError,
    FetchSizeTooSmallError,
    InvalidFetchSizeError,
    OffsetOutOfRangeError,
)
from ingest.wire import frames
from ingest.wire.errors import ErrorCode, check

log = logging.getLogger(__name__)

LATEST = protocol.LATEST_TIME
EARLIEST = protocol.EARLIEST_TIME


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole messages of one fetch.

    ``next_offset`` is where the next fetch starts (the request's offset when no
    whole message came back); ``bytes_read`` is the size of the returned set
    including a cut-off tail; ``needed`` is the size of the first message when it
    did not fit (else None).
    """

    messages: list[MessageAndOffset]
    next_offset: int
    bytes_read: int
    needed: int | None = None


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """One broker's answer to METADATA: who it is and its topics' partitions."""

    broker_id: int
    host: str
    port: int
    topics: dict[str, list[protocol.PartitionMetadata]] = field(default_factory=dict)


def check_fetch(resp: protocol.FetchResponse, offset: int, context: str) -> None:
    """Raise the fetch's error; CORRUPT_RANGE as :class:`CorruptRangeError` with its next valid offset."""
    if resp.error == ErrorCode.CORRUPT_RANGE:
        nxt, start, messages = resp.damaged_range()
        held = f" ({messages} message(s) lost)" if messages >= 0 else ""
        raise CorruptRangeError(f"broker answered CORRUPT_RANGE ({int(ErrorCode.CORRUPT_RANGE)}) to {context}: "
                                f"offset {offset} lies in damaged data{held}; the next valid offset is {nxt}",
                                start_offset=start if 0 <= start <= offset else offset, next_offset=nxt,
                                messages=messages)
    check(resp.error, context)


def _result(message_set: bytes | memoryview, offset: int) -> FetchResult:
    batch = MessageBatch.of(message_set, offset)  # raises what list(iter_messages(...)) raised
    return FetchResult(list(batch), batch.next_offset, batch.bytes_read, batch.needed)


def _raw_result(part: protocol.FetchResponse, offset: int) -> FetchResult | None:
    if part.error == ErrorCode.NONE:
        return _result(part.message_set, offset)
    if part.error == ErrorCode.CORRUPT_RANGE:
        return FetchResult([], part.next_valid_offset, len(part.message_set))
    return None


class SimpleConsumer:
    """Pulls from one broker at ``host:port``.

    Args:
        settings: fetch size, its ceiling and the socket timeout
            (:class:`~ingest.client.fetch_settings.FetchSettings`; its defaults when not given).
        timeout_s: socket timeout per request (overrides ``settings``).
        fetch_size: default bytes per fetch (overrides ``settings``).
        max_fetch_size: ceiling to which :meth:`iter_range` grows the fetch size
            to read one message larger than ``fetch_size`` (overrides ``settings``).
    """

    def __init__(self, host: str, port: int, *, timeout_s: float | None = None, fetch_size: int | None = None,
                 max_fetch_size: int | None = None, settings: FetchSettings = DEFAULT_FETCH) -> None:
        timeout_s = settings.socket_timeout_s if timeout_s is None else timeout_s
        fetch_size = settings.fetch_size if fetch_size is None else fetch_size
        max_fetch_size = settings.max_fetch_size if max_fetch_size is None else max_fetch_size
        if fetch_size <= 0 or max_fetch_size < fetch_size:
            raise InvalidFetchSizeError(
                f"fetch_size {fetch_size} must be > 0 and <= max_fetch_size {max_fetch_size}")
        self.host = host
        self.port = port
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self.conn = BrokerConnection(host, port, timeout_s=timeout_s)
        self.skipped: list[tuple[str, int, int, int]] = []
        """(topic, partition, start, next valid offset) of every damaged range :meth:`iter_range` skipped."""

    def __repr__(self) -> str:
        return f"SimpleConsumer({self.host}:{self.port})"

    # --- requests -------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None) -> FetchResult:
        """Whole messages of ``topic``/``partition`` starting at ``offset``.

        Raises:
            OffsetOutOfRangeError: the offset is not a visible message boundary.
            CorruptRangeError: the offset lies in a damaged range; ``next_offset`` is where valid data resumes.
            InvalidMessageError: a returned message fails its CRC (names the offset).
            BrokerUnavailableError: the broker cannot be reached.
        """
        return _result(self._fetch_set(topic, partition, offset, max_bytes), offset)

    def fetch_batch(self, topic: str, partition: int, offset: int, max_bytes: int | None = None, *,
                    strict: bool = True) -> MessageBatch:
        """The messages of one FETCH as ONE validated :class:`~ingest.records.message_batch.MessageBatch`.

        The response is received into one buffer the batch keeps (payloads are
        views into it); validation (CRC, magic, codec, bounds; wrappers
        inflated within bounds) is complete before it returns. ``strict=False``
        keeps the messages before a bad one and the error in ``batch.error``.

        Raises:
            as :meth:`fetch` (InvalidMessageError / MessageTooLargeError only when ``strict``).
        """
        return MessageBatch.of(self._fetch_set(topic, partition, offset, max_bytes), offset, strict=strict)

    def _fetch_set(self, topic: str, partition: int, offset: int, max_bytes: int | None) -> memoryview:
        """One FETCH's message set, a view of the received buffer (no copy); raises its error."""
        size = self.fetch_size if max_bytes is None else max_bytes
        req = protocol.FetchRequest(topic, partition, offset, size)
        body = self.conn.request_buffer(req.encode())
        (error,) = frames.INT16.unpack_from(body, 0)
        if error:
            check_fetch(protocol.FetchResponse.decode(body), offset,
                        f"FETCH {topic}/{partition} at offset {offset} (max {size} bytes) from {self.conn!r}")
        return memoryview(body)[frames.INT16.size:]

    def fetch_raw(self, topic: str, partition: int, offset: int, max_bytes: int | None = None) -> bytes:
        """The raw message set of one FETCH, not validated (callers that quarantine bad messages iterate it).

        Raises:
            CorruptRangeError: ``offset`` lies in a damaged range (``next_offset``: where valid data resumes).
            OffsetOutOfRangeError, BrokerUnavailableError: as :meth:`fetch`.
        """
        return bytes(self._fetch_set(topic, partition, offset, max_bytes))  # one copy (was two)

    def multifetch(self, requests: Sequence[tuple[str, int, int, int]]) -> list[FetchResult]:
        """Several ``(topic, partition, offset, max_bytes)`` fetches in one round trip.

        Raises the error of the first fetch that failed (with its topic, partition and offset).
        """
        reqs = tuple(protocol.FetchRequest(t, p, o, m) for t, p, o, m in requests)
        resp = self.conn.request(protocol.MultiFetchRequest(reqs).encode(), protocol.MultiFetchResponse)
        check(resp.error, f"MULTIFETCH of {len(reqs)} fetches from {self.conn!r}")
        if len(resp.responses) != len(reqs):
            raise OffsetOutOfRangeError(  # protocol violation; never silently misalign results
                f"MULTIFETCH from {self.conn!r}: {len(resp.responses)} answers to {len(reqs)} fetches")
        out = []
        for req, part in zip(reqs, resp.responses):
            check_fetch(part, req.offset, f"FETCH {req.topic}/{req.partition} at offset {req.offset} in MULTIFETCH "
                                          f"from {self.conn!r}")
            out.append(_result(part.message_set, req.offset))
        return out

    def multifetch_raw(self, requests: Sequence[tuple[str, int, int, int]]) -> list[tuple[int, FetchResult | None]]:
        """Like :meth:`multifetch` but returns ``(error_code, result|None)`` per fetch instead of raising.

        A CORRUPT_RANGE part comes with a result holding no messages whose ``next_offset``
        is the next valid offset after the damage, so a caller can skip it.
        """
        reqs = tuple(protocol.FetchRequest(t, p, o, m) for t, p, o, m in requests)
        resp = self.conn.request(protocol.MultiFetchRequest(reqs).encode(), protocol.MultiFetchResponse)
        check(resp.error, f"MULTIFETCH of {len(reqs)} fetches from {self.conn!r}")
        return [(part.error, _raw_result(part, req.offset)) for req, part in zip(reqs, resp.responses)]

    def offsets_before(self, topic: str, partition: int, time_ms: int, max_offsets: int) -> list[int]:
        """Valid offsets before ``time_ms`` (-1 latest, -2 earliest), newest first."""
        req = protocol.OffsetsRequest(topic, partition, time_ms, max_offsets)
        resp = self.conn.request(req.encode(), protocol.OffsetsResponse)
        check(resp.error, f"OFFSETS {topic}/{partition} time {time_ms} from {self.conn!r}")
        return list(resp.offsets)

    def offsets_many(self, questions: Sequence[tuple[str, int, int, int]]) -> list[tuple[int, list[int]]]:
        """OFFSETS of many ``(topic, partition, time_ms, max_offsets)`` on this one connection, pipelined
        (:meth:`~ingest.wire.connection.BrokerConnection.request_pipelined`: OFFSETS carries one partition,
        so the requests share round trips instead of carrying the partitions in one request). Returns, per
        question in order, ``(error code, offsets newest first)``: an error is the caller's to judge,
        partition by partition.

        Raises:
            BrokerUnavailableError, MalformedResponseError: the connection failed (no answer is returned).
        """
        frames = [protocol.OffsetsRequest(t, p, time_ms, n).encode() for t, p, time_ms, n in questions]
        return [(r.error, list(r.offsets)) for r in self.conn.request_pipelined(frames, protocol.OffsetsResponse)]

    def earliest_offset(self, topic: str, partition: int) -> int:
        offs = self.offsets_before(topic, partition, EARLIEST, 1)
        return offs[0] if offs else 0

    def latest_offset(self, topic: str, partition: int) -> int:
        offs = self.offsets_before(topic, partition, LATEST, 1)
        return offs[0] if offs else 0

    def metadata(self, topics: Sequence[str] = ()) -> BrokerMetadata:
        """METADATA: this broker's id and, per topic, partitions with earliest/latest offsets."""
        resp = self.conn.request(protocol.MetadataRequest(tuple(topics)).encode(), protocol.MetadataResponse)
        check(resp.error, f"METADATA {list(topics) or 'all topics'} from {self.conn!r}")
        return BrokerMetadata(
            resp.broker_id, resp.host, resp.port,
            {t.name: list(t.partitions) for t in resp.topics})

    # --- iteration --------------------------------------------------------------------

    def fetch_growing(self, topic: str, partition: int, offset: int, size: int | None = None) -> FetchResult:
        """A fetch that returns at least one message if there is one, growing the size for a big message.

        Raises:
            FetchSizeTooSmallError: the message at ``offset`` is larger than ``max_fetch_size``.
        """
        size = self.fetch_size if size is None else size
        while True:
            result = self.fetch(topic, partition, offset, size)
            if result.messages or result.bytes_read == 0:
                return result
            needed = result.needed or size * 2
            if needed <= size:  # the length field is readable but the set still holds no message
                needed = size * 2
            if needed > self.max_fetch_size:
                raise FetchSizeTooSmallError(
                    f"message at {topic}/{partition} offset {offset} needs a fetch of {needed} bytes, "
                    f"above max fetch size {self.max_fetch_size} (fetch size was {size}); "
                    f"raise max.fetch.size / max_fetch_size")
            log.info("message at %s/%d offset %d is %d bytes: growing fetch size from %d",
                     topic, partition, offset, needed, size)
            size = needed

    def iter_range(self, topic: str, partition: int, start: int, end: int) -> Iterator[MessageAndOffset]:
        """Every message with ``start <= offset < end``, in order.

        ``end`` must be a message boundary at or before the broker's latest offset
        (e.g. taken from :meth:`latest_offset`). A damaged range of the broker's
        log is skipped (logged at ERROR, recorded in :attr:`skipped`).

        Raises:
            OffsetOutOfRangeError: ``start`` is not a visible boundary, or the log ends before ``end``.
            FetchSizeTooSmallError: a message is larger than ``max_fetch_size``.
        """
        offset = start
        while offset < end:
            try:
                result = self.fetch_growing(topic, partition, offset, min(self.fetch_size, max(end - offset, 64)))
            except CorruptRangeError as exc:
                if exc.next_offset <= offset:  # a broker that does not move us on: never loop
                    raise
                log.error("%s/%d: offsets %d..%d of %r are damaged (CORRUPT_RANGE); skipping to %d",
                          topic, partition, offset, exc.next_offset, self.conn, exc.next_offset)
                self.skipped.append((topic, partition, offset, exc.next_offset))
                offset = exc.next_offset
                continue
            if not result.messages:
                raise OffsetOutOfRangeError(
                    f"{topic}/{partition}: the log of {self.conn!r} ends at offset {offset}, "
                    f"before the requested end {end}")
            for m in result.messages:
                if m.offset >= end:
                    return
                yield m
            offset = result.next_offset

    def deleted_segments(self, topic: str, partition: int, start: int, end: int) -> list[DeletedSegment]:
        """The segments this broker's retention deleted from the partition that overlap
        ``[start, end)``, oldest first (DELETED_SEGMENTS; :mod:`ingest.client.deleted_segments`)."""
        resp = self.conn.request(DeletedSegmentsRequest(topic, partition, start, end).encode(),
                                 DeletedSegmentsResponse)
        check(resp.error, f"DELETED_SEGMENTS {topic}/{partition} [{start}, {end}) on {self.conn!r}")
        return [DeletedSegment(*rec) for rec in resp.records]

    def deleted_segments_many(self, questions: Sequence[tuple[str, int, int, int]]
                              ) -> list[tuple[int, list[DeletedSegment]]]:
        """DELETED_SEGMENTS of many ``(topic, partition, start, end)`` on this one connection, pipelined (as
        :meth:`offsets_many`: the request names one partition). Returns, per question in order, ``(error code,
        the deleted segments overlapping [start, end), oldest first)``: an error is the caller's to judge.

        Raises:
            BrokerUnavailableError, MalformedResponseError: the connection failed (no answer is returned).
        """
        frames = [DeletedSegmentsRequest(t, p, start, end).encode() for t, p, start, end in questions]
        return [(r.error, [DeletedSegment(*rec) for rec in r.records])
                for r in self.conn.request_pipelined(frames, DeletedSegmentsResponse)]

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "SimpleConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
