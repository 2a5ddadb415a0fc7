"""The fast validating loops of a message set: plain magic-2 (and 1) messages, boundaries recorded as they go.

:func:`ingest.records.message_set.scan` is the one loop that validates every kind of
message; these are copies of its hot loop for the sets that dominate, used by
:class:`~ingest.records.message_batch.MessageBatch` and nothing else. Each applies
exactly scan's checks to the messages it accepts and stops at the first message it
does not take (another magic, a wrapper, a bad byte), where the batch hands over to
``scan`` for the precise verdict. tests/broker/test_message_batch.py and
tests/broker/test_produce_fast_paths.py hold them equal to ``scan``.

* :func:`plain_bounds`: a fetched set of magic-2 and magic-1 uncompressed messages,
  its boundaries in one ``array('q')`` (a reader's batch).
* :func:`produced_positions`: a producer's set (magic 2, uncompressed, the broker's
  produce path): equal-length messages read by one cached ``struct.Struct`` with the
  checks as C-level loops, else a loop that accepts only the common message.
"""
from __future__ import annotations

import struct
from array import array
from itertools import repeat

from ingest.records.crc import crc32 as fast_crc32
from ingest.records.message import CRC_SEED_MA, CRC_SEED_MA1, HEADER_MA, HEADER_SIZE, LENGTH_SIZE, MA1_MIN, MA_MIN, OVERHEAD


def plain_bounds(mv: memoryview, end: int) -> tuple[array, int]:
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


# --- a producer's set -----------------------------------------------------

_SEED = CRC_SEED_MA[MA_MIN]
"""CRC seed of magic 2 with attributes 0 (codec none)."""
_UNIFORM: dict[tuple[int, int], struct.Struct] = {}
"""(length, count) -> the Struct reading a whole set of equal-length magic-2 messages (bounded cache)."""
_UNIFORM_MAX = 64
_UNIFORM_MAX_COUNT = 1024
"""Sets of more messages take the loop (the Struct's tuple holds 4 objects per message)."""


def produced_positions(data: bytes, top: int) -> tuple[range | list[int], int]:
    """The positions of the leading plain magic-2 messages of a producer's set (length at most ``top``),
    and where they end.

    A ``range`` when the whole set is equal-length valid messages (one cached ``Struct``, the
    checks as C-level loops: no Python bytecode per message); else a list from a loop that
    accepts only the common message (magic 2, codec none, length within ``top`` and inside the
    set, CRC over attributes + payload), stopping at the first it does not accept: ``scan``
    checks the rest from there with every check, and the same positions in its texts.
    """
    end = len(data)
    uniform = _uniform(data, top)
    if uniform is not None:
        return uniform, end
    positions: list[int] = []
    add = positions.append
    unpack = HEADER_MA.unpack_from
    crc32 = fast_crc32
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
    return positions, pos


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
            or list(map(fast_crc32, fields[3::4], repeat(_SEED, n))) != list(fields[2::4]):
        return None
    return range(0, end, step)   # a sequence like scan's list (len, [-1], bisect), without 1 int per message
