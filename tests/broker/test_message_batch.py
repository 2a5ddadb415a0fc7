"""MessageBatch and the fast iter_messages against the slow path, on valid and bad sets of every magic.

The slow path is ``message_batch._iter_general``: ``scan`` validates the whole
buffer, then a pass cuts payloads and inflates wrappers (what ``iter_messages``
was before MessageBatch). Every case compares the messages AND the error (type and
text) of four readers: the slow path, ``iter_messages``, a non-strict batch
iterated, a strict batch.
"""
from __future__ import annotations

import random
import struct
import zlib

import pytest

from ingest.errors import InvalidMessageError, MessageTooLargeError
from ingest.records.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    HEADER_SIZE,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    encode_message,
)
from ingest.records.message_batch import MessageAndOffset, MessageBatch, _iter_general, iter_messages
from ingest.records.message_codecs import compress
from ingest.records.message_set import encode_message_set, first_message_size, message_bounds


def outcome(it):
    """(messages, (error type, text) or None) of consuming an iterator of MessageAndOffset."""
    out = []
    try:
        for m in it:
            out.append((m.offset, m.next_offset, bytes(m.payload)))
        return out, None
    except (InvalidMessageError, MessageTooLargeError) as exc:
        return out, (type(exc), str(exc))


def strict_outcome(buf, base):
    try:
        batch = MessageBatch.of(buf, base)
    except (InvalidMessageError, MessageTooLargeError) as exc:
        return None, (type(exc), str(exc))
    return [(m.offset, m.next_offset, m.payload) for m in batch], None


def assert_same(buf, base=0):
    """All readers agree with the slow path; returns the slow path's outcome."""
    slow = outcome(_iter_general(memoryview(buf), base, 1 << 26))
    assert outcome(iter_messages(buf, base)) == slow
    batch = MessageBatch.of(buf, base, strict=False)
    assert outcome(iter(batch)) == slow
    assert len(batch.offsets) == len(batch)  # the lazy arrays do not change iteration
    assert outcome(iter(batch)) == slow
    assert (type(batch.error), str(batch.error)) == slow[1] if slow[1] else batch.error is None
    msgs = slow[0]
    assert len(batch) == len(msgs)
    assert [bytes(batch.payload(i)) for i in range(len(batch))] == [p for _, _, p in msgs]
    assert [bytes(v) for v in batch.payloads()] == [p for _, _, p in msgs]
    assert list(batch.offsets) == [o for o, _, _ in msgs]
    assert list(batch.next_offsets) == [n for _, n, _ in msgs]
    assert batch.next_offset == (msgs[-1][1] if msgs else base)
    assert batch.bytes_read == len(buf)
    assert batch.needed == (first_message_size(buf) if not msgs and buf else None)
    assert batch.payloads_arrow().to_pylist() == [p for _, _, p in msgs]
    s_msgs, s_err = strict_outcome(buf, base)
    if slow[1] is None:
        assert s_err is None and s_msgs == msgs
    else:
        assert s_msgs is None and s_err == slow[1]
    return slow


def legacy_v1(payload: bytes, codec: int = CODEC_NONE) -> bytes:
    """magic 1 with the legacy rule: CRC over attributes + payload."""
    return struct.pack(">ibbI", 6 + len(payload), 1, codec, zlib.crc32(bytes([codec]) + payload)) + payload


PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)), b"z" * 1000]

SETS = {
    "magic 2": encode_message_set(PAYLOADS, magic=MAGIC_V2),
    "magic 1": encode_message_set(PAYLOADS, magic=MAGIC_V1),
    "magic 0": encode_message_set(PAYLOADS, magic=MAGIC_V0),
    "magic 1 legacy crc": b"".join(legacy_v1(p) for p in PAYLOADS),
    "gzip magic 2": encode_message_set(PAYLOADS, CODEC_GZIP, MAGIC_V2),
    "snappy magic 2": encode_message_set(PAYLOADS, CODEC_SNAPPY, MAGIC_V2),
    "gzip magic 1": encode_message_set(PAYLOADS, CODEC_GZIP, MAGIC_V1),
    "mixed": (encode_message_set(PAYLOADS[:2]) + encode_message_set(PAYLOADS[2:], CODEC_GZIP)
              + encode_message(b"v0", magic=MAGIC_V0) + encode_message_set([b"after"], CODEC_SNAPPY, MAGIC_V1)
              + encode_message_set(PAYLOADS[:3], magic=MAGIC_V1) + encode_message(b"", magic=MAGIC_V0)),
    "plain then magic 0": encode_message_set(PAYLOADS) + encode_message(b"", magic=MAGIC_V0),
    "empty": b"",
}


@pytest.mark.parametrize("name", SETS)
def test_valid_sets_read_the_same_on_every_path(name):
    buf = SETS[name]
    msgs, err = assert_same(buf, base=1000)
    assert err is None
    if name != "empty":
        assert [p for _, _, p in msgs][:2] == PAYLOADS[:2]


def test_plain_sets_are_kept_whole_and_compressed_ones_compact():
    plain = MessageBatch.of(SETS["magic 2"])
    assert plain.data is SETS["magic 2"] and plain.header_size == HEADER_SIZE
    assert plain.payload(3).obj is SETS["magic 2"]  # a view, no copy
    packed = MessageBatch.of(SETS["gzip magic 2"], 50)
    assert packed.header_size == 0 and bytes(packed.data) == b"".join(PAYLOADS)
    assert set(packed.offsets) == {50} and set(packed.next_offsets) == {50 + len(SETS["gzip magic 2"])}
    with pytest.raises(IndexError, match="message index 5 outside a batch of 5"):
        plain.payload(5)


@pytest.mark.parametrize("name", ["magic 2", "magic 1", "mixed", "gzip magic 2"])
def test_every_cut_off_tail_stops_quietly_at_the_same_place(name):
    buf = SETS[name]
    for cut in range(len(buf) + 1):
        msgs, err = assert_same(buf[:cut], base=7)
        assert err is None


@pytest.mark.parametrize("name", list(SETS)[:-1])
def test_random_byte_flips_raise_or_stop_identically(name):
    rng = random.Random(f"batch-{name}")
    buf = SETS[name] * 2
    for _ in range(150):
        bad = bytearray(buf)
        for _ in range(rng.choice((1, 1, 2, 3))):
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        cut = rng.choice((len(bad), rng.randrange(len(bad) + 1)))
        assert_same(bytes(bad[:cut]), base=rng.randrange(0, 10_000))


def test_a_bad_crc_after_good_messages_keeps_them_in_a_lenient_batch_and_raises_in_a_strict_one():
    good = encode_message_set([b"one", b"two"])
    bad = bytearray(encode_message(b"three"))
    bad[-1] ^= 0xFF
    buf = good + bytes(bad) + encode_message(b"four")
    batch = MessageBatch.of(buf, 100, strict=False)
    assert [bytes(batch.payload(i)) for i in range(len(batch))] == [b"one", b"two"]
    assert isinstance(batch.error, InvalidMessageError) and f"message at {100 + len(good)}" in str(batch.error)
    with pytest.raises(InvalidMessageError, match=f"message at {100 + len(good)}"):
        batch.check()
    with pytest.raises(InvalidMessageError, match="CRC"):
        MessageBatch.of(buf, 100)


def test_a_wrapper_that_does_not_inflate_is_refused_like_iter_messages():
    wrapper = bytearray(encode_message(compress(CODEC_GZIP, encode_message_set([b"x"])), CODEC_GZIP))
    body = encode_message(b"not gzip", CODEC_GZIP)
    msgs, err = assert_same(encode_message_set([b"before"]) + body)
    assert [p for _, _, p in msgs] == [b"before"] and err[0] is InvalidMessageError
    assert "compressed message at offset" in err[1]
    assert assert_same(bytes(wrapper))[1] is None


def test_an_inflation_bomb_stops_at_max_inflated_size():
    bomb = encode_message_set([b"\0" * 100_000] * 4, CODEC_GZIP)
    with pytest.raises(MessageTooLargeError, match="compressed message at offset 0"):
        MessageBatch.of(bomb, max_inflated_size=200_000)
    assert len(MessageBatch.of(bomb, max_inflated_size=500_000)) == 4


def test_iteration_yields_message_and_offset_tuples_with_bytes_payloads():
    buf = bytearray(SETS["magic 2"])  # a received buffer is a bytearray
    msgs = list(MessageBatch.of(memoryview(buf)[:], 0))
    assert all(type(m) is MessageAndOffset and type(m.payload) is bytes for m in msgs)
    assert [m.payload for m in msgs] == PAYLOADS


# --- one batch for appending and reading ------------------------------------------------------

def _messages(batch):
    return [(m.offset, m.next_offset, bytes(m.payload)) for m in batch]


@pytest.mark.parametrize("name", SETS)
def test_a_batch_made_for_append_reads_like_a_batch_made_for_reading(name):
    buf = SETS[name]
    appended, read = MessageBatch.for_append(buf), MessageBatch.of(buf, 0)
    assert appended.max_message_size is not None and read.max_message_size is None  # only one is trusted by a log
    assert len(appended) == len(read) and _messages(appended) == _messages(read)
    assert [bytes(p) for p in appended.payloads()] == [bytes(p) for p in read.payloads()]
    assert list(appended.offsets) == list(read.offsets) and appended.next_offset == read.next_offset == len(buf)
    # outer messages: what the log stores and indexes (a wrapper is one)
    assert list(appended.positions) == list(read.positions) == [s for s, _ in message_bounds(buf)[0]]
    assert appended.count == read.count and appended.raw is buf
    assert appended.last_message == read.last_message


@pytest.mark.parametrize("name", ["magic 2", "magic 0", "mixed", "gzip magic 2"])
def test_message_i_count_before_and_before_agree_with_iteration(name):
    buf = SETS[name]
    batch = MessageBatch.of(buf, 1000)
    msgs = _messages(batch)
    assert [tuple(batch.message(i)) for i in range(len(batch))] == msgs
    for cut in sorted({o for o, _, _ in msgs} | {1000, 1000 + len(buf), 1001, 1000 + len(buf) - 1}):
        expected = [m for m in msgs if m[0] < cut]
        assert batch.count_before(cut) == len(expected)
        part = batch.before(cut)
        assert _messages(part) == expected
        assert part.next_offset == (expected[-1][1] if expected else 1000)
        assert [bytes(p) for p in part.payloads()] == [p for _, _, p in expected]


def test_a_lenient_batch_cut_before_its_bad_message_has_no_error():
    good = encode_message_set([b"a", b"b"])
    bad = bytearray(encode_message_set([b"c"]))
    bad[-1] ^= 1
    batch = MessageBatch.of(good + bytes(bad), 0, strict=False)
    assert len(batch) == 2 and isinstance(batch.error, InvalidMessageError)
    assert batch.before(len(good)) is batch       # every message starts before the bad one
    first = batch.before(batch.offsets[1])
    assert len(first) == 1 and first.error is None
