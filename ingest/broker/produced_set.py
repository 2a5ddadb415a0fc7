"""Validation of a message set for append (produce, follower): magic-2 fast paths, then ``scan``.

A producer of this product sends magic-2 uncompressed messages (its default
``message.format``); validating them is most of the broker's CPU per produced
message. :func:`validate_produced` returns exactly what
:meth:`ValidatedMessageSet.of <ingest.broker.message_set.ValidatedMessageSet.of>`
returns for the same arguments, or raises exactly what it raises (same class,
same text): tests/broker/test_produced_set.py compares the two on valid sets of
every magic, compressed wrappers and corrupted, cut-off and oversized input.

How, for the two shapes a producer sends:

* equal-length messages (fixed-size records, up to 1,024 per set): one
  cached ``struct.Struct`` reads every header and payload of the set, and the
  checks (lengths, magic + attributes, CRCs) run as C-level loops over the
  fields: no Python bytecode per message.
* otherwise, a loop that accepts only the common message (magic 2, codec
  none, length within ``max.message.size`` and inside the set, CRC over
  attributes + payload) with one comparison per check and none of the general
  loop's other branches.

At the first message neither accepts (another magic, a wrapper, or a bad
message) :func:`~ingest.broker.message_set.scan` takes over from that
position; it applies every check there (``deep``: wrappers are inflated
within bounds) and names the precise error, with the same positions in its
text, since positions are relative to the same buffer. So the checks applied
to each message are those of ``scan``; only their order for an accepted
magic-2 message differs, and for such a message all of them pass.
"""
from __future__ import annotations

import logging
import struct
from itertools import repeat

from ingest.broker.compression import MAX_INFLATED_SIZE
from ingest.broker.crc import crc32 as _crc32
from ingest.broker.message import CRC_SEED_MA, HEADER_MA, HEADER_SIZE, LENGTH_SIZE, MA_MIN, OVERHEAD
from ingest.broker.message_set import ValidatedMessageSet, scan
from ingest.errors import InvalidMessageError, MessageTooLargeError

log = logging.getLogger(__name__)

__all__ = ["validate_produced"]

_UNLIMITED = 1 << 62
_SEED = CRC_SEED_MA[MA_MIN]
"""CRC seed of magic 2 with attributes 0 (codec none)."""


_UNIFORM: dict[tuple[int, int], struct.Struct] = {}
"""(length, count) -> the Struct reading a whole set of equal-length magic-2 messages (bounded cache)."""
_UNIFORM_MAX = 64
_UNIFORM_MAX_COUNT = 1024
"""Sets of more messages take the loop (the Struct's tuple holds 4 objects per message)."""


def validate_produced(buf: bytes | memoryview, *, max_message_size: int = _UNLIMITED,
                      max_inflated_size: int = MAX_INFLATED_SIZE, destination: str = "") -> ValidatedMessageSet:
    """Validate a whole produced set for append: what ``ValidatedMessageSet.of`` returns or raises.

    Raises:
        MessageTooLargeError: a message's payload (outer or inner) exceeds
            ``max_message_size``, or a wrapper inflates past ``max_inflated_size``.
        InvalidMessageError: any bad or cut-off message (names the position).
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)   # bytes slices are cheaper than memoryview ones
    top = max_message_size + OVERHEAD
    uniform = _uniform(data, top)
    if uniform is not None:
        return ValidatedMessageSet(buf, len(uniform), uniform, max_message_size)  # type: ignore[arg-type]
    end = len(data)
    positions: list[int] = []
    add = positions.append
    unpack = HEADER_MA.unpack_from
    crc32 = _crc32
    seed = _SEED
    ma_plain = MA_MIN
    limit = end - HEADER_SIZE
    pos = 0
    while pos <= limit:
        length, ma, crc = unpack(data, pos)
        nxt = pos + LENGTH_SIZE + length
        if ma != ma_plain or nxt > end or not OVERHEAD <= length <= top \
                or crc32(data[pos + HEADER_SIZE:nxt], seed) != crc:
            break
        add(pos)
        pos = nxt
    count = len(positions)
    if pos < end:   # another magic, a wrapper, or a bad message: scan checks the rest from here
        r = scan(data, pos, max_message_size=max_message_size, deep=True, index=positions, index_interval=0,
                 max_inflated_size=max_inflated_size)
        if r.error:
            kind = MessageTooLargeError if r.too_large else InvalidMessageError
            where = f"{destination}: " if destination else ""
            raise kind(f"{where}rejected message set of {len(buf)} bytes: {r.error}")
        count += r.count
    return ValidatedMessageSet(buf, count, positions, max_message_size)


def _uniform(data: bytes, top: int) -> range | None:
    """The positions of a set of equal-length, valid magic-2 uncompressed messages, else None.

    One ``Struct`` reads every header and payload; the checks (every length equal and within
    ``[OVERHEAD, top]``, every magic+attributes ``0x0200``, every CRC) run as C-level loops.
    If every header has the first one's length L, the messages sit at multiples of 4 + L and
    end exactly at the set's end: the fast loop would accept all of them. Anything else: None.
    """
    end = len(data)
    if end < HEADER_SIZE:
        return None
    length, ma, _crc = HEADER_MA.unpack_from(data, 0)
    step = LENGTH_SIZE + length
    if ma != MA_MIN or not OVERHEAD <= length <= top or end % step:
        return None
    n = end // step
    if n > _UNIFORM_MAX_COUNT:
        return None
    if n > 1 and HEADER_MA.unpack_from(data, end - step)[:2] != (length, ma):
        return None   # cheap check before building a Struct: the last header must agree
    key = (length, n)
    whole = _UNIFORM.get(key)
    if whole is None:
        if len(_UNIFORM) >= _UNIFORM_MAX:
            _UNIFORM.clear()
        whole = _UNIFORM[key] = struct.Struct(">" + "iHI%ds" % (length - OVERHEAD) * n)
    fields = whole.unpack(data)
    if fields[0::4].count(length) != n or fields[1::4].count(MA_MIN) != n \
            or list(map(_crc32, fields[3::4], repeat(_SEED, n))) != list(fields[2::4]):
        return None
    return range(0, end, step)   # a sequence like scan's list (len, [-1], bisect), without 1 int per message
