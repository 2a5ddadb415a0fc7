"""A task's fetch loop: every message of ``[start, end)``, corrupt ones reported instead of raised.

:meth:`ingest.client.SimpleConsumer.iter_range` raises on the first message that
fails its CRC, which would stop the whole load on one flipped bit. The loader
instead quarantines such a message and goes on, so it reads raw message sets
(``FetchRequest`` over the consumer's connection) and iterates them itself with
:class:`~ingest.records.message_batch.MessageBatch` (what every reader of a fetch
uses): messages before a bad one are yielded, the bad one is skipped by its length field and yielded as
:class:`Corrupt` (offset range plus raw bytes). When the length field itself is
unusable nothing can be skipped safely and the task fails naming the offset.

A damaged range of the broker's log (the broker answered CORRUPT_RANGE with
the next valid offset, docs/protocol.md) is yielded as :class:`Damaged` and
skipped: the fetch loop goes on at the next valid offset, and the task records
the range (a lost range with cause ``corruption``).

A replicated partition is read through a
:class:`~ingest.client.leader_consumer.LeaderConsumer` (same calls as a
SimpleConsumer, retried on the new leader after a failover, at the same offset).
Its range end is the high watermark the plan saw; a new leader's high watermark
can lag it for a moment (its followers have not fetched yet), and a fetch there
answers nothing ("not yet there"). With ``wait_s`` the loop waits for the data
(doubling back-off) that long before failing; it never reads past the high
watermark, because the broker never serves above it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import CorruptRangeError, FetchSizeTooSmallError, InvalidMessageError, OffsetOutOfRangeError
from ingest.records.message import MIN_MESSAGE_SIZE
from ingest.records.message_batch import MessageAndOffset, MessageBatch, iter_messages
from ingest.records.message_set import first_message_size

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Corrupt:
    """A message that failed validation: ``[offset, next_offset)`` of the log, its raw bytes, why."""

    offset: int
    next_offset: int
    raw: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Damaged:
    """A damaged range ``[offset, next_offset)`` of the broker's log, skipped (CORRUPT_RANGE);
    ``messages``: how many messages it held when the broker counted them exactly for exactly this
    range, else -1."""

    offset: int
    next_offset: int
    reason: str
    messages: int = -1


def raw_fetch(consumer, topic: str, partition: int, offset: int, size: int) -> bytes:
    """The raw message set of one FETCH (no validation); ``consumer`` is a SimpleConsumer or a LeaderConsumer.

    Raises:
        CorruptRangeError: ``offset`` lies in a damaged range (``next_offset``: where valid data resumes).
    """
    return consumer.fetch_raw(topic, partition, offset, size)


def iter_range(consumer, topic: str, partition: int, start: int, end: int, *,
               fetch_size: int, max_fetch_size: int, wait_s: float = 0.0,
               clock: Clock = SYSTEM_CLOCK, chunks: bool = False
               ) -> Iterator[MessageAndOffset | MessageBatch | Corrupt | Damaged]:
    """Every message with ``start <= offset < end`` in order; corrupt ones as :class:`Corrupt`,
    damaged ranges of the broker's log as :class:`Damaged` (cut at ``end``).

    ``chunks``: the valid messages of each fetch come as one
    :class:`~ingest.records.message_batch.MessageBatch` (never empty; cut at ``end``)
    instead of one by one; the order of everything yielded is the same.

    ``wait_s``: how long a fetch that answers nothing before ``end`` is retried (a
    replicated partition whose new leader's high watermark has not reached ``end`` yet);
    0 fails at once.

    Raises:
        OffsetOutOfRangeError: ``start`` is not a boundary or the log ends before ``end``
            (still, ``wait_s`` after the first empty answer).
        FetchSizeTooSmallError: a message is larger than ``max_fetch_size``.
        InvalidMessageError: a corrupt message whose length cannot be trusted.
    """
    offset = start
    size = fetch_size
    empty_since: float | None = None
    delay = 0.05
    while offset < end:
        try:
            buf = raw_fetch(consumer, topic, partition, offset, min(size, max(end - offset, MIN_MESSAGE_SIZE)))
        except CorruptRangeError as exc:
            if exc.next_offset <= offset:  # a broker that does not move us on: never loop
                raise
            nxt = min(exc.next_offset, end)
            # the broker's count is for its whole range: exact here only when we skip exactly that range
            messages = exc.messages if exc.start_offset == offset and nxt == exc.next_offset else -1
            log.error("%s/%d: offsets %d..%d are damaged on %r (CORRUPT_RANGE); skipping them, recorded as a "
                      "corruption loss", topic, partition, offset, nxt, consumer)
            yield Damaged(offset, nxt, str(exc), messages)
            offset = nxt
            size = fetch_size
            continue
        last = offset
        progressed = False
        try:
            if chunks:
                batch = MessageBatch.of(buf if isinstance(buf, bytes) else bytes(buf), offset, strict=False)
                cut = batch.before(end)
                if len(cut):
                    last = cut.next_offset
                    progressed = True
                    yield cut
                if len(cut) < len(batch):
                    return   # a message at or after ``end``
                if batch.error is not None:
                    raise batch.error
            else:
                for m in iter_messages(buf, offset):
                    if m.offset >= end:
                        return
                    yield m
                    last = m.next_offset
                    progressed = True
        except InvalidMessageError as exc:
            rel = last - offset
            n = first_message_size(buf[rel:])
            if n is None or n < MIN_MESSAGE_SIZE or last + n > end:
                raise InvalidMessageError(
                    f"{topic}/{partition}: corrupt message at offset {last} with unusable length; "
                    f"cannot skip it safely ({exc})") from exc
            if rel + n <= len(buf):
                log.warning("%s/%d: quarantining corrupt message at offset %d: %s", topic, partition, last, exc)
                yield Corrupt(last, last + n, bytes(buf[rel:rel + n]), str(exc))
                last += n
                progressed = True
            else:
                size = n  # refetch the whole corrupt message next round
        if progressed:
            offset = last
            size = fetch_size
            empty_since, delay = None, 0.05
            continue
        if not buf:
            now = clock.monotonic()
            empty_since = now if empty_since is None else empty_since
            if now + delay - empty_since <= wait_s:
                log.info("%s/%d: nothing at offset %d yet (end %d) on %r; waiting %.2f s for the high watermark",
                         topic, partition, offset, end, consumer, delay)
                clock.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            waited = f" (waited {now - empty_since:.1f} s for it)" if wait_s else ""
            raise OffsetOutOfRangeError(f"{topic}/{partition}: the log of {consumer!r} ends at offset {offset}, "
                                        f"before the requested end {end}{waited}")
        needed = first_message_size(buf) or size * 2
        needed = max(needed, size + 1)
        if needed > max_fetch_size:
            raise FetchSizeTooSmallError(
                f"message at {topic}/{partition} offset {offset} needs a fetch of {needed} bytes, above "
                f"max.fetch.size {max_fetch_size}; raise max.fetch.size")
        size = needed
