"""The producer's and the broker's fast paths equal the slow paths, on valid and on bad input.

* ``message.encode_messages`` (behind ``encode_message_set``) against ``encode_message`` per
  payload, for every magic, equal and mixed sizes, bytes / bytearray / memoryview payloads.
* ``MessageBatch.for_append`` (the broker's produce path, with its fast paths) against
  ``validated_by_scan`` (``scan`` alone): same result (count, positions, data) or the same exception class
  and text, on sets of every magic, compressed wrappers, mixed sets, and on flipped bytes,
  cut-off sets, oversized messages and nested compression.
"""
from __future__ import annotations

import random

import pytest

from ingest.errors import IngestError, InvalidMessageError
from ingest.records.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    encode_message,
    encode_messages,
)
from ingest.records.message_batch import MessageBatch, validated_by_scan
from ingest.records.message_codecs import compress
from ingest.records.message_set import encode_message_set

MAGICS = (MAGIC_V0, MAGIC_V1, MAGIC_V2)


def _slow_set(payloads, magic):
    return b"".join(encode_message(bytes(p), CODEC_NONE, magic) for p in payloads)


def _payload_sets(rng: random.Random):
    yield []
    yield [b""]
    yield [b"", b"x", b""]
    yield [bytes(rng.getrandbits(8) for _ in range(200))] * 50          # one payload repeated
    yield [rng.randbytes(200) for _ in range(50)]                        # equal sizes
    yield [rng.randbytes(rng.randrange(0, 400)) for _ in range(37)]      # mixed sizes
    yield [rng.randbytes(7) for _ in range(1500)]                        # more than one Struct's worth


@pytest.mark.parametrize("magic", MAGICS)
def test_encode_messages_equals_encode_message_per_payload(magic):
    rng = random.Random(magic)
    for payloads in _payload_sets(rng):
        expected = _slow_set(payloads, magic)
        assert encode_messages(payloads, magic) == expected
        assert encode_message_set(payloads, CODEC_NONE, magic) == expected
        assert encode_messages([bytearray(p) for p in payloads], magic) == expected
        assert encode_messages([memoryview(p) for p in payloads], magic) == expected
        assert encode_messages(tuple(payloads), magic) == expected


def test_encode_messages_refuses_an_unknown_magic_and_encode_message_set_keeps_its_errors():
    with pytest.raises(InvalidMessageError, match="unknown magic 7"):
        encode_messages([b"x"], 7)
    with pytest.raises(InvalidMessageError, match="magic 0"):
        encode_message_set([b"x"], CODEC_GZIP, MAGIC_V0)


@pytest.mark.parametrize("magic", (MAGIC_V1, MAGIC_V2))
@pytest.mark.parametrize("codec", (CODEC_GZIP, CODEC_SNAPPY))
def test_compressed_sets_wrap_the_fast_encoding(magic, codec):
    payloads = [bytes([i]) * (i + 1) for i in range(30)]
    wrapped = encode_message_set(payloads, codec, magic)
    assert wrapped == encode_message(compress(codec, _slow_set(payloads, magic)), codec, magic)


def _outcome(fn, buf, **kw):
    try:
        vs = fn(buf, **kw)
    except IngestError as exc:
        return type(exc), str(exc)
    return bytes(vs.raw), vs.count, list(vs.positions), vs.max_message_size


def _valid_sets(rng: random.Random):
    for magic in MAGICS:
        for payloads in _payload_sets(rng):
            yield _slow_set(payloads, magic)
    equal = [rng.randbytes(120) for _ in range(20)]
    yield encode_message_set(equal, CODEC_GZIP, MAGIC_V2)
    yield encode_message_set(equal, CODEC_SNAPPY, MAGIC_V1)
    # a magic-2 run, then other magics and a wrapper: the fast loop hands over to scan mid-set
    yield (_slow_set(equal, MAGIC_V2) + _slow_set(equal[:3], MAGIC_V0) + encode_message_set(equal, CODEC_GZIP)
           + _slow_set(equal[:2], MAGIC_V1) + _slow_set(equal[:4], MAGIC_V2))
    yield _slow_set(equal, MAGIC_V2) + _slow_set([b""], MAGIC_V0)   # an empty magic-0 message in the last 9 bytes


def _compare(buf, **kw):
    fast = _outcome(MessageBatch.for_append, buf, destination="t-0", **kw)
    slow = _outcome(validated_by_scan, buf, destination="t-0", **kw)
    assert fast == slow, (fast, slow)
    return fast


def test_the_append_fast_paths_equal_scan_on_valid_sets():
    rng = random.Random(16)
    for buf in _valid_sets(rng):
        result = _compare(buf)
        assert isinstance(result[1], int)   # valid: a count, not an error
        assert isinstance(MessageBatch.for_append(memoryview(buf)).raw, memoryview)
        assert _outcome(MessageBatch.for_append, memoryview(buf), destination="t-0") == result


def test_the_append_fast_paths_equal_scan_on_bad_input():
    rng = random.Random(1616)
    bases = list(_valid_sets(rng))
    errors = 0
    for base in bases:
        if not base:
            continue
        for _ in range(40):
            bad = bytearray(base)
            for _ in range(rng.choice((1, 1, 2, 5))):
                bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            if rng.random() < 0.3:
                bad = bad[:rng.randrange(len(bad))]                 # cut off
            result = _compare(bytes(bad))
            errors += isinstance(result[0], type)
        for cut in (1, 5, 9, 10, len(base) // 2):
            _compare(base[:-cut] if cut < len(base) else base[:1])
    assert errors > 100   # the corruption did produce refusals to compare


def test_the_append_fast_paths_equal_scan_on_limits():
    rng = random.Random(7)
    equal = [rng.randbytes(200) for _ in range(50)]
    mixed = [rng.randbytes(rng.randrange(100, 300)) for _ in range(50)]
    for payloads in (equal, mixed):
        buf = _slow_set(payloads, MAGIC_V2)
        for limit in (0, 150, 199, 200, 299, 300):
            _compare(buf, max_message_size=limit)
    gz = encode_message_set(equal, CODEC_GZIP, MAGIC_V2)
    _compare(gz, max_inflated_size=5000)        # the wrapper inflates past the bound
    _compare(gz, max_message_size=100)          # an inner message above the limit
    nested = encode_message(compress(CODEC_GZIP, gz), CODEC_GZIP, MAGIC_V2)   # a wrapper inside a wrapper
    assert _compare(nested)[0] is InvalidMessageError    # nested compression
    # equal lengths but one bad CRC / one bad attributes byte: the Struct path must refuse it too
    buf = bytearray(_slow_set(equal, MAGIC_V2))
    buf[210 * 17 + 40] ^= 0xFF
    assert _compare(bytes(buf))[0] is InvalidMessageError
    buf = bytearray(_slow_set(equal, MAGIC_V2))
    buf[210 * 33 + 5] = 0x04
    assert _compare(bytes(buf))[0] is InvalidMessageError
