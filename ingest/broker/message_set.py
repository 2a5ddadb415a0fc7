"""Message sets: encode (optionally compressed), validate for append, valid prefix, bounds.

A message set is messages (see :mod:`ingest.broker.message`) back to back,
nothing else. A compressed set is ONE wrapper message whose attributes name
the codec and whose payload is the compressed bytes of a plain message set;
nested compression is invalid.

Validation is :func:`ingest.broker.message_scan.scan` (the one loop; wrappers
opened within bounds by :func:`~ingest.broker.message_scan.inner_messages`).
Reading messages out of a fetched set is
:mod:`ingest.broker.message_batch` (:class:`~ingest.broker.message_batch.MessageBatch`,
:func:`~ingest.broker.message_batch.iter_messages`). Their names are importable
from here too, as before the split.

:class:`ValidatedMessageSet` is a set that passed validation, so the broker
validates a produced set once, before taking the log lock, and the log appends
it without scanning again.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Sequence

from ingest.broker import compression
from ingest.broker.compression import MAX_INFLATED_SIZE
from ingest.broker.message import (
    CODEC_NONE,
    MAGIC,
    MAGIC_V0,
    encode_message,
)
from ingest.broker.message_batch import MessageAndOffset, MessageBatch, iter_messages
from ingest.broker.message_scan import ScanResult, first_message_size, inner_messages, scan
from ingest.broker.message_scan import UNLIMITED as _UNLIMITED
from ingest.errors import InvalidMessageError, MessageTooLargeError

__all__ = [  # the read side lives in message_scan / message_batch; importable from here as before
    "MAX_INFLATED_SIZE", "MessageAndOffset", "MessageBatch", "ScanResult", "ValidatedMessageSet",
    "encode_message_set", "first_message_size", "inner_messages", "iter_messages", "message_bounds",
    "scan", "valid_prefix", "validate_message_set",
]


def encode_message_set(payloads: Sequence[bytes], codec: int = CODEC_NONE, magic: int = MAGIC) -> bytes:
    """Encode payloads as a set of messages of ``magic``; with a codec, as one compressed
    wrapper message of ``magic`` holding messages of ``magic`` (what Kafka 0.7's producer
    does with magic 1).

    Raises:
        InvalidMessageError: unknown magic or codec, or a codec with magic 0.
    """
    if codec != CODEC_NONE and magic == MAGIC_V0:
        encode_message(b"", codec, magic)  # raises: magic 0 has no attributes
    plain = b"".join([encode_message(p, CODEC_NONE, magic) for p in payloads])
    if codec == CODEC_NONE:
        return plain
    return encode_message(compression.compress(codec, plain), codec, magic)


@dataclass(frozen=True, slots=True)
class ValidatedMessageSet:
    """A message set that passed the deep validation of an append; make one with :meth:`of`.

    ``positions`` holds the start of every (outer) message relative to the
    set, ``max_message_size`` the limit the set was checked against: a log
    with a lower limit validates again instead of trusting it.
    """

    data: bytes | memoryview
    count: int
    positions: list[int]
    max_message_size: int

    @classmethod
    def of(cls, buf: bytes | memoryview, *, max_message_size: int = _UNLIMITED,
           max_inflated_size: int = MAX_INFLATED_SIZE, destination: str = "") -> "ValidatedMessageSet":
        """Validate a whole set as received for append; ``destination`` (a log's name) prefixes errors.

        Wrappers are opened within bounds: each inner message is held to
        ``max_message_size`` too, the inflated inner set to ``max_inflated_size``.

        Raises:
            MessageTooLargeError: a message's payload (outer or inner) exceeds
                ``max_message_size``, or a wrapper inflates past ``max_inflated_size``.
            InvalidMessageError: any bad or cut-off message (names the position).
        """
        positions: list[int] = []
        r = scan(buf, max_message_size=max_message_size, deep=True, index=positions, index_interval=0,
                 max_inflated_size=max_inflated_size)
        if r.error:
            kind = MessageTooLargeError if r.too_large else InvalidMessageError
            where = f"{destination}: " if destination else ""
            raise kind(f"{where}rejected message set of {len(buf)} bytes: {r.error}")
        return cls(buf, r.count, positions, max_message_size)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def last_message(self) -> tuple[int, int]:
        """(start, end) of the last message, relative to the set; (0, 0) for an empty set."""
        return (self.positions[-1], len(self.data)) if self.positions else (0, 0)

    def index_entries(self, base: int, mark: int, interval: int) -> list[int]:
        """Sparse index entries for the set written at file position ``base``.

        The rule of :func:`scan`'s ``index``: the first message at or after
        ``mark``, then the first at or after each entry + ``interval``.
        """
        out: list[int] = []
        pos = self.positions
        i = bisect_left(pos, mark - base)
        while i < len(pos):
            p = base + pos[i]
            out.append(p)
            i = bisect_left(pos, p + interval - base, i + 1)
        return out


def validate_message_set(buf: bytes | memoryview, *, max_message_size: int = _UNLIMITED) -> int:
    """Validate a whole set as received for append; returns its message count.

    Raises:
        MessageTooLargeError: a message's payload exceeds ``max_message_size``.
        InvalidMessageError: any bad or cut-off message (names the position).
    """
    return ValidatedMessageSet.of(buf, max_message_size=max_message_size).count


def valid_prefix(buf: bytes | memoryview) -> int:
    """Bytes of whole valid messages at the start of ``buf``."""
    return scan(buf).end


def message_bounds(buf: bytes | memoryview, pos: int = 0, *, origin: int = 0) -> tuple[list[tuple[int, int]], ScanResult]:
    """(start, end) of each valid message of ``buf`` from ``pos``, and how :func:`scan` stopped.

    Wrappers are CRC-checked but not opened (see :func:`inner_messages`).
    """
    starts: list[int] = []
    r = scan(buf, pos, index=starts, index_interval=0, origin=origin)
    return list(zip(starts, starts[1:] + [r.end])), r
