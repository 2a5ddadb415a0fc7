"""Message batches: a fetched, validated message set as ONE object, and per-message iteration.

A consumer that wants speed takes a fetch as a :class:`MessageBatch`: the
fetched buffer kept whole (no copy for a plain set), the message boundaries as
one compact ``array('q')``, and per message only what it asks for
(:meth:`MessageBatch.payload` is a memoryview; :meth:`MessageBatch.payloads_arrow`
is one pyarrow column). Old callers iterate it (or :func:`iter_messages`) and
get :class:`MessageAndOffset` tuples, as before.

Validation is complete before a batch exists, with the checks of
:func:`ingest.broker.message_scan.scan` (length, bounds, magic, codec and
reserved bits, the magic's CRC rule; wrappers inflated within
``max_inflated_size`` and their inner sets validated). A bad message ends the
batch where :func:`iter_messages` stops: a cut-off last message quietly, any
other bad message with the same exception and text, after the messages
before it (kept in a non-strict batch; raised at once by a strict one).

Two paths. A set of plain magic-2 (and magic-1) messages, every one a 10-byte
header, is walked by this module's own copy of ``scan``'s hot loop, which
records each boundary as it validates (one pass, no per-message object kept).
Anything else it meets (magic 0, a compressed wrapper) sends the whole buffer
to the general path: ``scan`` plus wrapper inflation as before, with the
payloads copied into one compact buffer (header size 0). A bad byte stops the
fast loop, and ``scan`` from that position gives the precise reason.
"""
from __future__ import annotations

import logging
from array import array
from itertools import islice
from typing import Iterator, NamedTuple

from ingest.broker.compression import MAX_INFLATED_SIZE
from ingest.broker.crc import crc32 as fast_crc32
from ingest.broker.message import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CODEC_NONE,
    CRC_SEED_MA,
    CRC_SEED_MA1,
    HEADER_MA,
    HEADER_SIZE,
    HEADER_SIZE_V0,
    LENGTH_SIZE,
    MA1_MIN,
    MA_MIN,
    MAGIC_OFFSET,
    MAGIC_V0,
    OVERHEAD,
)
from ingest.broker.message_scan import first_message_size, inner_messages, scan
from ingest.errors import IngestError, InvalidMessageError, MessageTooLargeError

log = logging.getLogger(__name__)


class MessageAndOffset(NamedTuple):
    """One application message and where it sits in the partition log.

    ``offset`` is the byte position of the (outer) message; ``next_offset``
    the offset after it. Messages inside a compressed wrapper at O of size S
    all carry O and O+S: a compressed set is consumed as a unit.
    """

    offset: int
    next_offset: int
    payload: bytes


def _plain_bounds(mv: memoryview, end: int) -> tuple[array, int]:
    """Validate plain magic-2/1 messages from 0; (boundaries 0, end1, end2, ..., where it stopped).

    The checks of ``scan``'s hot loop for these two formats (length >= 6, the
    message within ``end``, magic and attributes 0x0200 / 0x0100 exactly, the
    CRC rule); it stops at the first message that is anything else.
    """
    bounds = array("q", [0])
    add = bounds.append
    unpack = HEADER_MA.unpack_from
    crc32 = fast_crc32
    seed2 = CRC_SEED_MA[MA_MIN]
    seed1 = CRC_SEED_MA1[MA1_MIN]
    pos = 0
    limit = end - HEADER_SIZE
    while pos <= limit:
        length, ma, crc = unpack(mv, pos)
        nxt = pos + LENGTH_SIZE + length
        if ma == MA_MIN and OVERHEAD <= length and nxt <= end:
            if crc32(mv[pos + HEADER_SIZE:nxt], seed2) != crc:
                break
        elif ma == MA1_MIN and OVERHEAD <= length and nxt <= end:
            payload = mv[pos + HEADER_SIZE:nxt]  # Kafka 0.7's rule (payload), else the legacy one
            if crc32(payload) != crc and crc32(payload, seed1) != crc:
                break
        else:
            break
        add(nxt)
        pos = nxt
    return bounds, pos


def _fast(mv: memoryview, base_offset: int) -> tuple[array, IngestError | None] | None:
    """The fast path's boundaries and the error that ends them, or None when the set needs the general path."""
    end = len(mv)
    bounds, pos = _plain_bounds(mv, end)
    if pos >= end:
        return bounds, None
    r = scan(mv, pos, origin=base_offset)  # the precise verdict on what stopped the loop
    if r.end > pos:
        return None  # a valid message the fast loop does not take (magic 0, a wrapper)
    if r.cut_off:
        return bounds, None
    return bounds, InvalidMessageError(r.error)


class MessageBatch:
    """The validated messages of one fetched set; make one with :meth:`of`.

    Message ``i``'s payload is ``data[bounds[i] + header_size:bounds[i + 1]]``.
    A plain set keeps the fetched buffer as ``data`` and ``header_size`` 10; a
    set that needed the general path (magic 0, compressed wrappers) keeps its
    payloads in one compact buffer, ``header_size`` 0, and its log offsets in
    arrays.

    Attributes:
        data: the buffer the payloads are in (the fetched set itself when plain).
        bounds: ``array('q')`` of ``len(batch) + 1`` positions in ``data``.
        header_size: bytes between ``bounds[i]`` and message ``i``'s payload.
        base_offset: log offset of the set's first byte.
        next_offset: where the next fetch starts (``base_offset`` when no whole message).
        bytes_read: size of the fetched set, including a cut-off tail.
        needed: the size of the first message when not one fitted (else None).
        error: the error that ended the batch before the set's end (None for a
            complete set or a quietly cut-off tail); :meth:`check` raises it.
    """

    __slots__ = ("data", "bounds", "header_size", "base_offset", "next_offset", "bytes_read", "needed",
                 "error", "_offsets", "_next_offsets", "_view")

    def __init__(self, data, bounds: array, header_size: int, base_offset: int, bytes_read: int,
                 error: IngestError | None = None, offsets: array | None = None,
                 next_offsets: array | None = None, needed: int | None = None) -> None:
        self.data = data
        self._view = data if isinstance(data, memoryview) else memoryview(data)
        self.bounds = bounds
        self.header_size = header_size
        self.base_offset = base_offset
        self.bytes_read = bytes_read
        self.error = error
        self._offsets = offsets
        self._next_offsets = next_offsets
        n = len(bounds) - 1
        if not n:
            self.next_offset = base_offset
        elif next_offsets is not None:
            self.next_offset = next_offsets[-1]
        else:
            self.next_offset = base_offset + bounds[-1]
        self.needed = needed

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
            batch = cls(buf, bounds, HEADER_SIZE, base_offset, len(mv), error)
        else:
            batch = cls._general(mv, base_offset, max_inflated_size)
        if not len(batch) and len(mv):
            batch.needed = first_message_size(mv)
        if strict and batch.error is not None:
            raise batch.error
        return batch

    @classmethod
    def _general(cls, mv: memoryview, base_offset: int, max_inflated_size: int) -> "MessageBatch":
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
        return cls(bytes(data), bounds, 0, base_offset, len(mv), error, offsets, nexts)

    # --- per message --------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __repr__(self) -> str:
        return (f"MessageBatch({len(self)} messages at offset {self.base_offset}, next {self.next_offset}, "
                f"{self.bytes_read} bytes{', error' if self.error is not None else ''})")

    def payload(self, i: int) -> memoryview:
        """Message ``i``'s payload, a view into :attr:`data` (no copy)."""
        b = self.bounds
        if not 0 <= i < len(b) - 1:
            raise IndexError(f"message index {i} outside a batch of {len(self)}")
        return self._view[b[i] + self.header_size:b[i + 1]]

    def payloads(self) -> list[memoryview]:
        """Every payload as a memoryview into :attr:`data` (no copy), in order."""
        mv, hs, b = self._view, self.header_size, self.bounds
        return [mv[s + hs:e] for s, e in zip(b, islice(b, 1, None))]

    @property
    def offsets(self) -> array:
        """``array('q')``: the log offset of each message (a wrapper's inner messages share its offset)."""
        if self._offsets is None:
            base = self.base_offset
            self._offsets = array("q", [base + p for p in islice(self.bounds, 0, len(self))])
        return self._offsets

    @property
    def next_offsets(self) -> array:
        """``array('q')``: the log offset after each message."""
        if self._next_offsets is None:
            base = self.base_offset
            self._next_offsets = array("q", [base + p for p in islice(self.bounds, 1, None)])
        return self._next_offsets

    def check(self) -> "MessageBatch":
        """Raise :attr:`error` when the batch ended at a bad message; else return the batch."""
        if self.error is not None:
            raise self.error
        return self

    def __iter__(self) -> Iterator[MessageAndOffset]:
        """Every message as a :class:`MessageAndOffset` (``bytes`` payload); then raise :attr:`error`."""
        data, b, hs = self.data, self.bounds, self.header_size
        if not isinstance(data, bytes):
            data = self._view[:b[-1]].tobytes()  # one copy, then a bytes slice per message
        make = tuple.__new__  # MessageAndOffset without the Python-level __new__ call
        cls = MessageAndOffset
        if hs:  # a plain set: offsets are base + bounds
            base = self.base_offset
            prev = b[0]
            for nxt in islice(b, 1, None):
                yield make(cls, (base + prev, base + nxt, data[prev + hs:nxt]))
                prev = nxt
        else:
            for i, (o, no) in enumerate(zip(self._offsets, self._next_offsets)):
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
    yield from MessageBatch(buf, bounds, HEADER_SIZE, base_offset, len(mv), error)


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
