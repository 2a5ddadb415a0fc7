"""Compressed wrappers are opened within bounds: real gzip and snappy bombs against a real broker.

A wrapper's inner messages are held to ``max.message.size`` like outer ones, and
its inflated inner set to a bound (``max_inflated_size``, by default what one
uncompressed request may carry). Decompression streams and stops at the bound,
so a small bomb costs the broker a chunk of memory, not what it inflates to.
"""
from __future__ import annotations

import tracemalloc
import zlib
from functools import lru_cache
from pathlib import Path

import pytest

from ingest.wire import protocol as p
from ingest.errors import InvalidMessageError, MessageTooLargeError
from ingest.wire.errors import ErrorCode
from ingest.records.message import (
    ATTRIBUTES_OFFSET,
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    CRC_SEED,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    OVERHEAD,
    encode_message,
)
from ingest.records.message_batch import MessageBatch, iter_messages
from ingest.records.message_codecs import GZIP_WBITS, snappy_available
from ingest.records.message_set import encode_message_set, inner_messages
from tests.harness.brokers import RawClient, broker_factory  # noqa: F401

BOMB_PAYLOAD = 200 * 1024 * 1024   # one inner message of 200 MiB of zeros
MiB = 1024 * 1024
_ZEROS = bytes(MiB)


def _zero_message_header(size: int) -> bytes:
    """Header of a plain message whose payload is ``size`` zero bytes (CRC computed by streaming)."""
    crc = CRC_SEED[CODEC_NONE]
    for _ in range(size // MiB):
        crc = zlib.crc32(_ZEROS, crc)
    crc = zlib.crc32(bytes(size % MiB), crc)
    return HEADER.pack(OVERHEAD + size, MAGIC, CODEC_NONE, crc)


@lru_cache(maxsize=None)
def gzip_bomb(size: int = BOMB_PAYLOAD) -> bytes:
    """A gzip wrapper message (~200 KB) whose inner set is one message of ``size`` zero bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, GZIP_WBITS)
    parts = [c.compress(_zero_message_header(size))]
    for _ in range(size // MiB):
        parts.append(c.compress(_ZEROS))
    parts.append(c.compress(bytes(size % MiB)))
    parts.append(c.flush())
    return encode_message(b"".join(parts), CODEC_GZIP)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@lru_cache(maxsize=None)
def snappy_bomb(size: int = BOMB_PAYLOAD) -> bytes:
    """A snappy wrapper whose inner set is one message of ``size`` zero bytes, written by hand.

    A raw snappy block at its densest: a literal of the message header and 64 zeros, then
    copy-2 elements (tag 0xfe: 64 bytes from 64 back, 3 bytes each) -- 21x expansion, so
    200 MiB is ~9.4 MB, built without ever holding the 200 MiB.
    """
    assert size % 64 == 0 and size >= 64
    header = _zero_message_header(size)
    literal = header + bytes(64)
    # literal tag 60<<2: its length - 1 follows in one byte (literals over 60 bytes)
    block = (_varint(len(header) + size) + bytes([60 << 2, len(literal) - 1]) + literal
             + b"\xfe\x40\x00" * ((size - 64) // 64))
    return encode_message(block, CODEC_SNAPPY)


# --- in-process bounds ------------------------------------------------------------------------


def test_the_handmade_bombs_are_real():
    """The bombs decompress (unbounded) to exactly one message of the promised size."""
    for bomb in (gzip_bomb(4 * MiB), snappy_bomb(4 * MiB)):
        inner, positions = inner_messages(bomb[ATTRIBUTES_OFFSET], memoryview(bomb)[HEADER_SIZE:],
                                          max_inflated_size=1 << 40)
        assert positions == [0] and len(inner) == 10 + 4 * MiB
        assert [len(m.payload) for m in iter_messages(bomb)] == [4 * MiB]


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_an_inner_message_above_max_message_size_is_refused_like_an_outer_one(codec):
    if codec == CODEC_SNAPPY and not snappy_available():
        pytest.skip("cramjam missing")
    small = encode_message_set([b"a" * 100, b"b" * 600, b"c" * 10], codec)
    assert MessageBatch.for_append(small, max_message_size=600).count == 1
    with pytest.raises(MessageTooLargeError, match="inner set: message at 110: payload of 600 bytes exceeds "
                                                   "max.message.size 599"):
        MessageBatch.for_append(small, max_message_size=599, destination="t-0")


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_an_inner_set_above_the_inflated_bound_is_refused_naming_the_key(codec):
    if codec == CODEC_SNAPPY and not snappy_available():
        pytest.skip("cramjam missing")
    data = encode_message_set([b"x" * 1000] * 100, codec)   # inflates to 101,000 bytes
    assert MessageBatch.for_append(data, max_inflated_size=101_000).count == 1
    with pytest.raises(MessageTooLargeError, match=r"100999.*max\.socket\.request\.bytes"):
        MessageBatch.for_append(data, max_inflated_size=100_999)
    with pytest.raises(MessageTooLargeError, match=r"compressed message at offset 7: .*100999"):
        list(iter_messages(data, 7, max_inflated_size=100_999))


def test_validating_a_gzip_bomb_stops_at_the_first_chunk():
    """Validation keeps one message and one chunk: a 200 MiB bomb peaks below 2 MiB of allocations."""
    bomb = gzip_bomb()
    tracemalloc.start()
    try:
        with pytest.raises(MessageTooLargeError, match=f"payload of {BOMB_PAYLOAD} bytes exceeds max.message.size"):
            MessageBatch.for_append(bomb, max_message_size=1_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MiB, peak


def test_reading_a_fetched_bomb_fails_clearly_at_the_ceiling():
    """A consumer (no max.message.size of its own) stops at its ceiling, with the wrapper's offset."""
    tracemalloc.start()
    try:
        with pytest.raises(MessageTooLargeError, match="compressed message at offset 500: .*8388608"):
            list(iter_messages(gzip_bomb(), 500, max_inflated_size=8 * MiB))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * MiB, peak


def test_a_snappy_block_lying_about_its_length_is_refused_before_allocating():
    lie = _varint(50 * MiB) + b"\x00a"       # 3 bytes claiming 50 MiB: more than 64/3 expansion
    with pytest.raises(InvalidMessageError, match="more than a raw snappy block can expand to"):
        MessageBatch.for_append(encode_message(lie, CODEC_SNAPPY))
    with pytest.raises(MessageTooLargeError, match="declares 52428800 uncompressed bytes; allowed is at most 1000"):
        MessageBatch.for_append(encode_message(lie, CODEC_SNAPPY), max_inflated_size=1000)


# --- a real broker ------------------------------------------------------------------------------


def _rss(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS of a process in bytes, from /proc."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _produce_ack(b, topic: str, message_set: bytes) -> p.ProduceAckResponse:
    with RawClient(b.host, b.port, timeout=60) as c:
        return p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest(topic, 0, message_set)))


def _still_serving(b, topic: str) -> None:
    """Another client produces and fetches as usual."""
    resp = _produce_ack(b, topic, encode_message_set([b"after-the-bomb"], CODEC_GZIP))
    assert resp.error == 0, resp
    with RawClient(b.host, b.port) as c:
        fetched = p.FetchResponse.decode(c.request(p.FetchRequest(topic, 0, resp.offset, 1 << 20)))
    assert fetched.error == 0 and [m.payload for m in iter_messages(fetched.message_set)] == [b"after-the-bomb"]


@pytest.mark.slow
def test_a_real_gzip_bomb_is_refused_by_a_real_broker_without_inflating_it(broker_factory):
    """Before the fix the ~200 KB wrapper was accepted every time, at ~400 MB of broker memory each."""
    (b,) = broker_factory(n=1)
    bomb = gzip_bomb()
    assert len(bomb) < 300_000
    for _ in range(3):
        resp = _produce_ack(b, "bombed", bomb)
        assert resp.error == ErrorCode.MESSAGE_TOO_LARGE, resp
    rss = _rss(b.pid)
    assert rss["VmHWM"] < 150 * MiB, rss   # the bomb inflates to 200 MiB
    _still_serving(b, "bombed")


@pytest.mark.slow
def test_a_real_snappy_bomb_is_refused_by_a_real_broker_without_inflating_it(broker_factory):
    """A 9.4 MB snappy wrapper (under a 16 MB max.message.size) declaring a 200 MiB inner set."""
    if not snappy_available():
        pytest.skip("cramjam missing")
    (b,) = broker_factory(n=1, max_message_size=16 * MiB)
    bomb = snappy_bomb()
    assert len(bomb) < 10 * MiB
    for _ in range(2):
        resp = _produce_ack(b, "bombed", bomb)
        assert resp.error == ErrorCode.MESSAGE_TOO_LARGE, resp
    rss = _rss(b.pid)
    assert rss["VmHWM"] < 150 * MiB, rss
    _still_serving(b, "bombed")
