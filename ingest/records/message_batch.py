"""Message batches: a validated message set as ONE object, for the broker's appends and for every reader.

A :class:`MessageBatch` is a message set (:mod:`ingest.records.message_set`) that
passed validation, kept whole (no copy of a plain set), with its boundaries in
compact form and per message only what is asked for. Two ways in:

* :meth:`MessageBatch.of`: a fetched set, read by the clients, the loader and the
  mirror. The batch ends where :func:`iter_messages` stops: a cut-off last message
  quietly, any other bad message with the same exception and text, after the
  messages before it (kept in a non-strict batch; raised at once by a strict one).
* :meth:`MessageBatch.for_append`: a set the broker appends (a produce, a
  follower's or the mirror's copy). Deep: every check of ``scan`` with wrappers
  inflated within ``max_inflated_size`` and each message, outer or inner, held to
  ``max_message_size``; any bad or cut-off message raises. The log appends such a
  batch without scanning it again when it was checked against a limit no larger
  than its own.

Two views of the same bytes. The *outer* messages are what the log stores and
indexes (:attr:`~MessageBatch.positions`, :attr:`~MessageBatch.count`,
:meth:`~MessageBatch.index_entries`); the *messages* are what a consumer reads,
wrappers opened (``len()``, :meth:`~MessageBatch.payload`,
:meth:`~MessageBatch.payloads`, :attr:`~MessageBatch.offsets`, iteration as
:class:`MessageAndOffset` tuples, :meth:`~MessageBatch.payloads_arrow`). For a
plain set of 10-byte-header messages (magic 1 and 2, no wrapper) both are the
same boundaries.

Paths. A plain magic-2/1 set is walked by a copy of ``scan``'s hot loop that
records each boundary as it validates (one pass, no per-message object kept); a
producer's magic-2 set has two faster ones still (:mod:`ingest.records.message_fast`).
Anything else (magic 0, a compressed wrapper, a bad byte) goes
to ``scan`` from the position where the fast loop stopped, which gives the
precise verdict; a reading batch then copies the payloads into one compact
buffer (header size 0), wrappers inflated. tests/broker/test_message_batch.py
and tests/broker/test_produce_fast_paths.py hold the paths equal.
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import islice
from typing import Iterator, NamedTuple, Sequence

from ingest.errors import IngestError, InvalidMessageError, MessageTooLargeError
from ingest.records.message import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CODEC_NONE,
    HEADER_SIZE,
    HEADER_SIZE_V0,
    MAGIC_OFFSET,
    MAGIC_V0,
    OVERHEAD,
)
from ingest.records.message_codecs import MAX_INFLATED_SIZE
from ingest.records.message_fast import plain_bounds, produced_positions
from ingest.records.message_set import UNLIMITED, first_message_size, inner_messages, scan

__all__ = ["MAX_INFLATED_SIZE", "MessageAndOffset", "MessageBatch", "iter_messages"]


class MessageAndOffset(NamedTuple):
    """One application message and where it sits in the partition log.

    ``offset`` is the byte position of the (outer) message; ``next_offset``
    the offset after it. Messages inside a compressed wrapper at O of size S
    all carry O and O+S: a compressed set is consumed as a unit.
    """

    offset: int
    next_offset: int
    payload: bytes


class MessageBatch:
    """The validated messages of one set; make one with :meth:`of` (reading) or :meth:`for_append`.

    Message ``i``'s payload is ``data[bounds[i] + header_size:bounds[i + 1]]``. A
    plain set keeps the set itself as ``data`` and ``header_size`` 10; a set
    read through the general path (magic 0, compressed wrappers) keeps its
    payloads in one compact buffer, ``header_size`` 0, and its log offsets in
    arrays.

    Attributes:
        raw: the set as given (what the log appends).
        base_offset: log offset of the set's first byte (0 for a batch made for append).
        next_offset: offset after the last whole valid (outer) message (``base_offset`` when none).
        bytes_read: size of the set, including a cut-off tail.
        needed: the size of the first message when not one fitted (else None).
        error: the error that ended a reading batch before the set's end (None for a
            complete set or a quietly cut-off tail); :meth:`check` raises it.
        max_message_size: the limit a batch made for append was checked against;
            None for a batch made for reading (the log validates such a set again).

    Not thread-safe while its lazy parts (offsets, outer positions, the message view
    of a batch made for append) are first computed; do not change ``raw`` while it lives.
    """

    __slots__ = ("raw", "base_offset", "next_offset", "bytes_read", "needed", "error", "max_message_size",
                 "_data", "_bounds", "_hs", "_view", "_offsets", "_next_offsets", "_positions", "_max_inflated")

    def __init__(self, raw, data, bounds, header_size: int, base_offset: int, bytes_read: int,
                 error: IngestError | None = None, offsets: array | None = None,
                 next_offsets: array | None = None, needed: int | None = None, *,
                 positions: Sequence[int] | None = None, end: int | None = None,
                 max_message_size: int | None = None, max_inflated_size: int = MAX_INFLATED_SIZE) -> None:
        self.raw = raw
        self._data = data
        self._view = None if data is None else data if isinstance(data, memoryview) else memoryview(data)
        self._bounds = bounds
        self._hs = header_size
        self.base_offset = base_offset
        self.bytes_read = bytes_read
        self.error = error
        self._offsets = offsets
        self._next_offsets = next_offsets
        self._positions = positions
        self._max_inflated = max_inflated_size
        self.max_message_size = max_message_size
        self.needed = needed
        if end is not None:
            self.next_offset = base_offset + end
        elif len(bounds) == 1:
            self.next_offset = base_offset
        elif next_offsets is not None:
            self.next_offset = next_offsets[-1]
        else:
            self.next_offset = base_offset + bounds[-1]

    # --- reading ------------------------------------------------------------------------

    @classmethod
    def of(cls, buf: bytes | bytearray | memoryview, base_offset: int = 0, *, strict: bool = True,
           max_inflated_size: int = MAX_INFLATED_SIZE) -> "MessageBatch":
        """Validate a fetched set (log offset ``base_offset`` at its first byte) into a batch.

        ``buf`` is kept, not copied (do not change it while the batch lives).

        Args:
            strict: raise the error that ends the batch (what ``list(iter_messages(...))``
                raises); False keeps the messages before it and the error in :attr:`error`.

        Raises (strict only):
            MessageTooLargeError: a wrapper inflates past ``max_inflated_size`` (names the offset).
            InvalidMessageError: naming the offset, on bad length, magic, codec or CRC, or an
                undecompressable / nested compressed set.
        """
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        fast = _fast(mv, base_offset)
        if fast is not None:
            bounds, error = fast
            batch = cls(buf, buf, bounds, HEADER_SIZE, base_offset, len(mv), error,
                        max_inflated_size=max_inflated_size)
        else:
            batch = cls._general(buf, mv, base_offset, max_inflated_size)
        if not len(batch) and len(mv):
            batch.needed = first_message_size(mv)
        if strict and batch.error is not None:
            raise batch.error
        return batch

    @classmethod
    def _general(cls, buf, mv: memoryview, base_offset: int, max_inflated_size: int) -> "MessageBatch":
        data = bytearray()
        bounds = array("q", [0])
        offsets = array("q")
        nexts = array("q")
        error = None
        try:
            for m in _iter_general(mv, base_offset, max_inflated_size):
                data += m.payload
                bounds.append(len(data))
                offsets.append(m.offset)
                nexts.append(m.next_offset)
        except (InvalidMessageError, MessageTooLargeError) as exc:
            error = exc
        return cls(buf, bytes(data), bounds, 0, base_offset, len(mv), error, offsets, nexts,
                   max_inflated_size=max_inflated_size)

    # --- appending ----------------------------------------------------------------------

    @classmethod
    def for_append(cls, buf: bytes | memoryview, *, max_message_size: int = UNLIMITED,
                   max_inflated_size: int = MAX_INFLATED_SIZE, destination: str = "") -> "MessageBatch":
        """Validate a whole set as received for append; ``destination`` (a log's name) prefixes errors.

        Raises:
            MessageTooLargeError: a message's payload (outer or inner) exceeds
                ``max_message_size``, or a wrapper inflates past ``max_inflated_size``.
            InvalidMessageError: any bad or cut-off message (names the position).
        """
        data = buf if isinstance(buf, bytes) else bytes(buf)   # bytes slices are cheaper than memoryview ones
        positions, pos = produced_positions(data, max_message_size + OVERHEAD)
        if pos < len(data):
            # another magic, a wrapper, or a bad message: scan checks the rest from here
            r = scan(data, pos, max_message_size=max_message_size, deep=True, index=positions, index_interval=0,
                     max_inflated_size=max_inflated_size)
            if r.error:
                raise _refused(r, len(buf), destination)
        return cls(buf, None, None, HEADER_SIZE, 0, len(buf), positions=positions, end=len(buf),
                   max_message_size=max_message_size, max_inflated_size=max_inflated_size)

    @property
    def positions(self) -> Sequence[int]:
        """The start of every outer message, relative to the set (a wrapper is one message)."""
        positions = self._positions
        if positions is not None:
            return positions
        if self._offsets is None:   # a plain set: its messages are its outer messages
            positions = self._bounds[:-1]
        else:
            base, seen = self.base_offset, -1
            positions = []
            for o in self._offsets:
                if o != seen:
                    positions.append(o - base)
                    seen = o
        self._positions = positions
        return positions

    @property
    def count(self) -> int:
        """Outer messages (what the log stores; a compressed wrapper counts once)."""
        positions = self._positions
        return len(positions if positions is not None else self.positions)

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def last_message(self) -> tuple[int, int]:
        """(start, end) of the last outer message, relative to the set; (0, 0) for an empty set."""
        pos = self.positions
        return (pos[-1], self.next_offset - self.base_offset) if len(pos) else (0, 0)

    def index_entries(self, base: int, mark: int, interval: int) -> list[int]:
        """Sparse index entries for the set written at file position ``base``.

        The rule of :func:`~ingest.records.message_set.scan`'s ``index``: the first
        message at or after ``mark``, then the first at or after each entry + ``interval``.
        """
        out: list[int] = []
        pos = self.positions
        i = bisect_left(pos, mark - base)
        while i < len(pos):
            p = base + pos[i]
            out.append(p)
            i = bisect_left(pos, p + interval - base, i + 1)
        return out

    # --- per message --------------------------------------------------------------------

    def _expand(self) -> None:
        """The message view of a batch made for append (computed once, when first asked for)."""
        raw = self.raw
        mv = raw if isinstance(raw, memoryview) else memoryview(raw)
        fast = _fast(mv, 0)
        if fast is not None and fast[1] is None:
            self._data, self._view, self._bounds, self._hs = raw, mv, fast[0], HEADER_SIZE
            return
        general = MessageBatch._general(raw, mv, 0, self._max_inflated)
        self._data, self._view, self._bounds, self._hs = general._data, general._view, general._bounds, 0
        self._offsets, self._next_offsets = general._offsets, general._next_offsets

    @property
    def data(self):
        """The buffer the payloads are in: the set itself when plain, else one compact buffer."""
        if self._bounds is None:
            self._expand()
        return self._data

    @property
    def bounds(self) -> array:
        """``array('q')`` of ``len(batch) + 1`` positions in :attr:`data`."""
        if self._bounds is None:
            self._expand()
        return self._bounds

    @property
    def header_size(self) -> int:
        """Bytes between ``bounds[i]`` and message ``i``'s payload (10, or 0 for a compact buffer)."""
        if self._bounds is None:
            self._expand()
        return self._hs

    def __len__(self) -> int:
        if self._bounds is None:
            self._expand()
        return len(self._bounds) - 1

    def __repr__(self) -> str:
        return (f"MessageBatch({len(self)} messages at offset {self.base_offset}, next {self.next_offset}, "
                f"{self.bytes_read} bytes{', error' if self.error is not None else ''})")

    def payload(self, i: int) -> memoryview:
        """Message ``i``'s payload, a view into :attr:`data` (no copy)."""
        b = self._bounds if self._bounds is not None else self.bounds
        if not 0 <= i < len(b) - 1:
            raise IndexError(f"message index {i} outside a batch of {len(self)}")
        return self._view[b[i] + self._hs:b[i + 1]]

    def payloads(self) -> list[memoryview]:
        """Every payload as a memoryview into :attr:`data` (no copy), in order."""
        b = self._bounds if self._bounds is not None else self.bounds
        mv, hs = self._view, self._hs
        return [mv[s + hs:e] for s, e in zip(b, islice(b, 1, None))]

    def message(self, i: int) -> MessageAndOffset:
        """Message ``i`` as a :class:`MessageAndOffset` (a ``bytes`` payload)."""
        b = self._bounds if self._bounds is not None else self.bounds
        if self._offsets is None and self._hs:
            s, e = b[i], b[i + 1]
            return MessageAndOffset(self.base_offset + s, self.base_offset + e, bytes(self._view[s + self._hs:e]))
        return MessageAndOffset(self.offsets[i], self.next_offsets[i], bytes(self._view[b[i] + self._hs:b[i + 1]]))

    @property
    def offsets(self) -> array:
        """``array('q')``: the log offset of each message (a wrapper's inner messages share its offset)."""
        if self._offsets is None:
            b = self.bounds
            base = self.base_offset
            self._offsets = array("q", [base + p for p in islice(b, 0, len(b) - 1)])
        return self._offsets

    @property
    def next_offsets(self) -> array:
        """``array('q')``: the log offset after each message."""
        if self._next_offsets is None:
            base = self.base_offset
            self._next_offsets = array("q", [base + p for p in islice(self.bounds, 1, None)])
        return self._next_offsets

    def count_before(self, offset: int) -> int:
        """How many of its messages start before log offset ``offset``."""
        b = self._bounds if self._bounds is not None else self.bounds
        if self._offsets is None and self._hs:   # a plain set: offsets are base + bounds
            return bisect_left(b, offset - self.base_offset, 0, len(b) - 1)
        return bisect_left(self.offsets, offset)

    def before(self, offset: int) -> "MessageBatch":
        """The batch of its messages that start before log offset ``offset`` (itself when all do);
        an empty batch keeps :attr:`needed` unset and no error."""
        n = self.count_before(offset)
        if n == len(self):
            return self
        b = self.bounds
        if self._offsets is None and self._hs:
            return MessageBatch(self.raw, self._data, b[:n + 1], self._hs, self.base_offset, self.bytes_read,
                                max_inflated_size=self._max_inflated)
        return MessageBatch(self.raw, self._data, b[:n + 1], self._hs, self.base_offset, self.bytes_read,
                            offsets=self.offsets[:n], next_offsets=self.next_offsets[:n],
                            max_inflated_size=self._max_inflated)

    def check(self) -> "MessageBatch":
        """Raise :attr:`error` when the batch ended at a bad message; else return the batch."""
        if self.error is not None:
            raise self.error
        return self

    def __iter__(self) -> Iterator[MessageAndOffset]:
        """Every message as a :class:`MessageAndOffset` (``bytes`` payload); then raise :attr:`error`."""
        b = self._bounds if self._bounds is not None else self.bounds
        data, hs = self._data, self._hs
        if not isinstance(data, bytes):
            data = self._view[:b[-1]].tobytes()  # one copy, then a bytes slice per message
        make = tuple.__new__  # MessageAndOffset without the Python-level __new__ call
        cls = MessageAndOffset
        if self._offsets is None and hs:  # a plain set: offsets are base + bounds
            base = self.base_offset
            prev = b[0]
            for nxt in islice(b, 1, None):
                yield make(cls, (base + prev, base + nxt, data[prev + hs:nxt]))
                prev = nxt
        else:
            for i, (o, no) in enumerate(zip(self.offsets, self.next_offsets)):
                yield make(cls, (o, no, data[b[i] + hs:b[i + 1]]))
        if self.error is not None:
            raise self.error

    # --- columns --------------------------------------------------------------------------

    def payloads_arrow(self):
        """The payloads as one ``pyarrow.LargeBinaryArray`` (int64 offsets).

        A compact batch (header size 0) is a zero-copy view of :attr:`data`
        and :attr:`bounds`. A plain fetched set has a 10-byte header between
        payloads, which Arrow's binary layout cannot skip: the array of whole
        messages is a zero-copy view, and the payloads are cut from it by one
        C gather (``pyarrow.compute.binary_slice``), no Python per message.
        """
        import pyarrow as pa  # deferred: heavy, and only column consumers need it
        arr = pa.Array.from_buffers(pa.large_binary(), len(self),
                                    [None, pa.py_buffer(self.bounds), pa.py_buffer(self.data)])
        if not self.header_size:
            return arr
        import pyarrow.compute as pc  # deferred with pyarrow
        # an explicit stop: pyarrow 26 fails "Negative buffer resize" without one
        return pc.binary_slice(arr, self.header_size, (1 << 31) - 1)


def iter_messages(buf: bytes | memoryview, base_offset: int = 0, *,
                  max_inflated_size: int = MAX_INFLATED_SIZE) -> Iterator[MessageAndOffset]:
    """Every message of ``buf`` (decompressing wrappers), with log offsets.

    Stops quietly at a cut-off last message (a fetch cut by max bytes).
    A wrapper's inner set is held in memory whole (it is consumed as a unit),
    so it is bounded by ``max_inflated_size``.

    Raises:
        MessageTooLargeError: a wrapper inflates past ``max_inflated_size``
            (decompression stops there; names the offset).
        InvalidMessageError: naming the offset, on bad length, magic, codec or
            CRC, or an undecompressable / nested compressed set (after the
            messages before it were yielded).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    fast = _fast(mv, base_offset)
    if fast is None:
        yield from _iter_general(mv, base_offset, max_inflated_size)
        return
    bounds, error = fast
    yield from MessageBatch(buf, buf, bounds, HEADER_SIZE, base_offset, len(mv), error)


# --- the reading paths ----------------------------------------------------------------------

def _fast(mv: memoryview, base_offset: int) -> tuple[array, IngestError | None] | None:
    """The fast path's boundaries and the error that ends them, or None when the set needs the general path."""
    end = len(mv)
    bounds, pos = plain_bounds(mv, end)
    if pos >= end:
        return bounds, None
    r = scan(mv, pos, origin=base_offset)  # the precise verdict on what stopped the loop
    if r.end > pos:
        return None  # a valid message the fast loop does not take (magic 0, a wrapper)
    if r.cut_off:
        return bounds, None
    return bounds, InvalidMessageError(r.error)


def _iter_general(mv: memoryview, base_offset: int, max_inflated_size: int) -> Iterator[MessageAndOffset]:
    """:func:`iter_messages` for any set: ``scan`` validates, then a pass cuts (and inflates wrappers)."""
    starts: list[int] = []
    wrappers: list[int] = []
    short: list[int] = []
    r = scan(mv, index=starts, index_interval=0, origin=base_offset, wrappers=wrappers, short=short)
    data = mv[:r.end].tobytes()
    ends = starts[1:] + [r.end]
    make = tuple.__new__
    cls = MessageAndOffset
    for pos, nxt in zip(starts, ends):
        if data[pos + MAGIC_OFFSET] == MAGIC_V0:
            yield make(cls, (base_offset + pos, base_offset + nxt, data[pos + HEADER_SIZE_V0:nxt]))
            continue
        codec = data[pos + ATTRIBUTES_OFFSET] & CODEC_MASK
        if codec == CODEC_NONE:
            yield make(cls, (base_offset + pos, base_offset + nxt, data[pos + HEADER_SIZE:nxt]))
        else:
            yield from _iter_wrapper(codec, mv[pos + HEADER_SIZE:nxt], base_offset + pos, base_offset + nxt,
                                     max_inflated_size)
    if r.error is not None and not r.cut_off:
        raise InvalidMessageError(r.error)


def _iter_wrapper(codec: int, payload: memoryview, offset: int, next_offset: int,
                  max_inflated_size: int) -> Iterator[MessageAndOffset]:
    try:
        inner, positions = inner_messages(codec, payload, max_inflated_size=max_inflated_size)
    except (InvalidMessageError, MessageTooLargeError) as exc:
        raise type(exc)(f"compressed message at offset {offset}: {exc}") from exc
    mv = memoryview(inner)
    for pos, nxt in zip(positions, positions[1:] + [len(inner)]):
        hs = HEADER_SIZE_V0 if inner[pos + MAGIC_OFFSET] == MAGIC_V0 else HEADER_SIZE
        yield MessageAndOffset(offset, next_offset, mv[pos + hs:nxt].tobytes())


def _refused(r, size: int, destination: str) -> IngestError:
    """The error a produced set of ``size`` bytes is refused with, from the failed scan ``r``."""
    kind = MessageTooLargeError if r.too_large else InvalidMessageError
    where = f"{destination}: " if destination else ""
    return kind(f"{where}rejected message set of {size} bytes: {r.error}")


def validated_by_scan(buf: bytes | memoryview, *, max_message_size: int = UNLIMITED,
                      max_inflated_size: int = MAX_INFLATED_SIZE, destination: str = "") -> MessageBatch:
    """:meth:`MessageBatch.for_append` by :func:`~ingest.records.message_set.scan` alone (no fast path):
    the reference the fast paths are held equal to (tests/broker/test_produce_fast_paths.py)."""
    positions: list[int] = []
    r = scan(buf, max_message_size=max_message_size, deep=True, index=positions, index_interval=0,
             max_inflated_size=max_inflated_size)
    if r.error:
        raise _refused(r, len(buf), destination)
    return MessageBatch(buf, None, None, HEADER_SIZE, 0, len(buf), positions=positions, end=len(buf),
                        max_message_size=max_message_size, max_inflated_size=max_inflated_size)
