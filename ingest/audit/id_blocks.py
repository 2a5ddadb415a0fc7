"""Loaded ids as blocks of 64 consecutive seqs: distinct counts and missing seqs without one group per id.

An id is ``(session, seq)``. A block is ``(session, seq >> 6)`` with a 64-bit mask, bit
``seq & 63`` set for each seq loaded: the set bits are the block's distinct ids. Producers number
their messages consecutively per session (and header-less rows take the partition's offsets), so
a block holds up to 64 ids and a distinct count groups about 64 times fewer keys than one group
per id would; the missing seqs of a range are the clear bits of its blocks (an absent block is 64
missing seqs).

A null seq is one id of its session, as a group by ``(session, seq)`` counts it: its block is
null and its mask 1. Shifts are arithmetic (floor division by 64) in Spark and Python alike,
so negative seqs have blocks too.
"""
from __future__ import annotations

from typing import Iterable

BLOCK_BITS = 6
BLOCK_SIZE = 1 << BLOCK_BITS
FULL = (1 << BLOCK_SIZE) - 1
Masks = dict[str, dict[int, int]]
"""Per session, per block number, the mask of loaded seqs (unsigned)."""


def block_columns(seq: str):
    """Spark columns ``block`` and ``bit`` of the seq column named ``seq`` (null seq: null block, bit 1)."""
    from pyspark.sql import functions as F

    bit = F.expr(f"CASE WHEN `{seq}` IS NULL THEN 1L ELSE shiftleft(1L, CAST(`{seq}` & {BLOCK_SIZE - 1} AS INT)) END")
    return F.shiftright(F.col(seq), BLOCK_BITS).alias("block"), bit.alias("bit")


def add_blocks(masks: Masks, sessions: Iterable[str], blocks: Iterable[int], bits: Iterable[int]) -> Masks:
    """OR the (session, block, mask) rows into ``masks`` (signed 64-bit masks, as Spark gives longs, taken unsigned)."""
    for session, block, mask in zip(sessions, blocks, bits):
        of = masks.setdefault(session, {})
        of[block] = of.get(block, 0) | (mask & FULL)
    return masks


def add_seqs(masks: Masks, sessions: Iterable[str], seqs: Iterable[int]) -> Masks:
    """Set the bits of the (session, seq) ids in ``masks``; null sessions and seqs are left out."""
    for session, seq in zip(sessions, seqs):
        if session is not None and seq is not None:
            of = masks.setdefault(session, {})
            block = seq >> BLOCK_BITS
            of[block] = of.get(block, 0) | (1 << (seq & (BLOCK_SIZE - 1)))
    return masks


def first_missing(blocks: dict[int, int], lo: int, hi: int, limit: int) -> list[int]:
    """The first ``limit`` seqs of ``[lo, hi]`` whose bit is clear in ``blocks`` (one session's masks), ascending."""
    out: list[int] = []
    if limit <= 0 or lo > hi:
        return out
    first, last = lo >> BLOCK_BITS, hi >> BLOCK_BITS
    for block in range(first, last + 1):
        clear = ~blocks.get(block, 0) & FULL
        if block == first:
            clear &= FULL << (lo & (BLOCK_SIZE - 1)) & FULL
        if block == last:
            clear &= FULL >> (BLOCK_SIZE - 1 - (hi & (BLOCK_SIZE - 1)))
        base = block << BLOCK_BITS
        while clear:
            low = clear & -clear
            out.append(base + low.bit_length() - 1)
            if len(out) == limit:
                return out
            clear ^= low
    return out
