"""The compiled record reader (ingest/records/_crecords.c) against iter_records, the Python reader.

On valid batches of every shape both give the same records. On randomized corruptions of the records
section (bytes flipped, cut, inserted; the record count changed) the compiled reader may only accept
what iter_records accepts, with the same records, and refuses only where iter_records refuses (or where
offsets do not increase, which it leaves to iter_records by design). Each comparison runs in a forked
child with a deadline, so a hang or a crash of the C code fails the test instead of pytest.
"""
from __future__ import annotations

import random
import struct

import pytest

from ingest.errors import IngestError
from ingest.records import compiled_records
from ingest.records.batch import RECORDS_OFFSET
from ingest.records.builder import LOG_APPEND_TIME, SimpleRecord, build_batch
from ingest.records.compression import CODECS_BY_NAME, NONE
from ingest.records.record import iter_records
from tests.harness.time_bound import in_child

pytestmark = [pytest.mark.processes,  # each comparison in a forked child
              pytest.mark.skipif(not compiled_records.available(), reason="ingest.records._crecords is not built")]

CHILD_BOUND_S = 20.0
COUNT_AT = RECORDS_OFFSET - 4   # records_count, the header's last field


def python_columns(buf):
    """iter_records' records as the compiled reader's columns, or the exception it raised."""
    try:
        records = list(iter_records(buf, 0))
    except IngestError as exc:
        return exc
    headers = [tuple((k, None if v is None else bytes(v)) for k, v in r.headers) for r in records]
    return ([r.offset for r in records], [r.timestamp for r in records],
            [None if r.key is None else bytes(r.key) for r in records],
            [b"" if r.value is None else bytes(r.value) for r in records],
            headers if any(headers) else None)


def compiled_columns(buf):
    try:
        got = compiled_records.read_columns(buf, 0)
    except IngestError as exc:
        return exc
    return None if got is None else tuple(got)


def shapes():
    rnd = random.Random(7)
    plain = [b"v%d" % i for i in range(50)]
    keyed = [SimpleRecord(b"value-%d" % i, b"k%d" % (i % 7) if i % 3 else None, timestamp=1_700_000_000_000 + i)
             for i in range(200)]
    headed = [SimpleRecord(bytes(rnd.randrange(256) for _ in range(rnd.randrange(300))),
                           None, [("h", b"x"), ("null", None), ("é", b"")] if i % 2 else [], 1_700_000_000_000 - i)
              for i in range(40)]
    nulls = [SimpleRecord(None if i % 4 == 0 else b"v", b"k") for i in range(20)]
    big = [SimpleRecord(bytes(20_000), b"key" * 100)]
    return {"plain": plain, "keyed": keyed, "headed": headed, "nulls": nulls, "big": big}


@pytest.mark.parametrize("codec", sorted(CODECS_BY_NAME))
@pytest.mark.parametrize("shape", sorted(shapes()))
def test_valid_batches_read_the_same_as_iter_records(shape, codec):
    buf = build_batch(shapes()[shape], codec=CODECS_BY_NAME[codec], base_offset=1_000, now_ms=1_700_000_000_000)
    expected = python_columns(buf)
    assert not isinstance(expected, Exception)
    assert in_child(CHILD_BOUND_S, compiled_columns, buf) == expected


def test_log_append_time_stamps_every_record_with_the_batch_time():
    buf = build_batch([SimpleRecord(b"a", timestamp=5), SimpleRecord(b"b", timestamp=6)],
                      timestamp_type=LOG_APPEND_TIME, now_ms=1_700_000_000_123)
    got = in_child(CHILD_BOUND_S, compiled_columns, buf)
    assert got == python_columns(buf) and got[1] == [1_700_000_000_123] * 2


def _mutations(buf: bytearray, rnd: random.Random):
    """Corrupted copies of an uncompressed batch: its records section changed (the header left valid)."""
    n = len(buf)
    for _ in range(150):
        b = bytearray(buf)
        kind = rnd.randrange(5)
        if kind == 0:                                   # bytes flipped
            for _ in range(rnd.randrange(1, 4)):
                b[rnd.randrange(RECORDS_OFFSET, n)] = rnd.randrange(256)
        elif kind == 1:                                 # cut
            b = b[:rnd.randrange(RECORDS_OFFSET, n)]
        elif kind == 2:                                 # bytes inserted
            at = rnd.randrange(RECORDS_OFFSET, n)
            b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 6)))
        elif kind == 3:                                 # the record count
            struct.pack_into(">i", b, COUNT_AT, rnd.choice([0, -1, 1, 2 ** 31 - 1, rnd.randrange(1, 200)]))
        else:                                           # a varint made long: 0xFF runs
            at = rnd.randrange(RECORDS_OFFSET, n)
            b[at:at + 1] = b"\xff" * rnd.randrange(1, 12)
        struct.pack_into(">i", b, 8, len(b) - 12)     # the batch length follows the bytes, as a fetch frames it
        yield bytes(b)


def _compare_all(batches):
    """(accepted where Python refused, refused where Python accepted with increasing offsets, accepted)."""
    wrong_accepts, wrong_refusals, accepted = [], [], 0
    for i, buf in enumerate(batches):
        expected, got = python_columns(buf), compiled_columns(buf)
        if isinstance(expected, Exception):
            if got is not None and not isinstance(got, Exception):
                wrong_accepts.append(i)
        elif got is None:
            offsets = expected[0]
            if all(a < b for a, b in zip(offsets, offsets[1:])) and offsets and offsets[0] >= 0:
                wrong_refusals.append(i)
        elif got != expected:
            wrong_accepts.append(i)
        else:
            accepted += 1
    return wrong_accepts, wrong_refusals, accepted


@pytest.mark.parametrize("shape", ["plain", "keyed", "headed", "nulls"])
def test_corrupted_records_are_refused_exactly_where_iter_records_refuses(shape):
    rnd = random.Random(hash(shape) & 0xFFFF)
    buf = build_batch(shapes()[shape], codec=NONE, base_offset=0, now_ms=1_700_000_000_000)
    batches = list(_mutations(buf, rnd))
    wrong_accepts, wrong_refusals, accepted = in_child(CHILD_BOUND_S, _compare_all, batches)
    assert (wrong_accepts, wrong_refusals) == ([], [])
    assert accepted < len(batches)          # the corruptions reached the reader's checks


def test_every_cut_of_a_batch_is_refused():
    buf = build_batch(shapes()["keyed"][:5], codec=NONE)
    cuts = []
    for n in range(RECORDS_OFFSET, len(buf)):
        b = bytearray(buf[:n])
        struct.pack_into(">i", b, 8, n - 12)
        cuts.append(bytes(b))
    assert in_child(CHILD_BOUND_S, lambda: [compiled_columns(b) for b in cuts]) == [None] * len(cuts)


def test_a_record_count_beyond_the_bytes_is_refused_without_allocating_for_it():
    b = bytearray(build_batch([b"x"], codec=NONE))
    struct.pack_into(">i", b, COUNT_AT, 2 ** 31 - 1)
    assert in_child(CHILD_BOUND_S, compiled_columns, bytes(b)) is None


def _batch_of(record: bytes) -> bytes:
    """A one-record uncompressed batch whose records section is ``record`` after its length varint."""
    b = bytearray(build_batch([b"x"], codec=NONE))
    section = bytes([len(record) * 2]) + record      # zigzag length, one byte (records under 64 bytes)
    b[RECORDS_OFFSET:] = section
    struct.pack_into(">i", b, 8, len(b) - 12)
    return bytes(b)


# attributes, timestamp delta, offset delta, key, value, header count: each case changes one field
VALID = b"\x00" + b"\x00" + b"\x00" + b"\x01" + b"\x04ab" + b"\x00"
HAND_MADE = {
    "valid": VALID,
    "key length -2": b"\x00\x00\x00" + b"\x03" + b"\x04ab\x00",
    "offset delta in 6 varint bytes": b"\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + b"\x01\x04ab\x00",
    "offset delta beyond 32 bits": b"\x00\x00" + b"\x80\x80\x80\x80\x10" + b"\x01\x04ab\x00",
    "timestamp delta beyond 64 bits": b"\x00" + b"\x80" * 9 + b"\x02" + b"\x00\x01\x04ab\x00",
    "timestamp delta in 11 varint bytes": b"\x00" + b"\x80" * 10 + b"\x00" + b"\x00\x01\x04ab\x00",
    "value past the record": b"\x00\x00\x00\x01" + b"\x08ab\x00",
    "header count past the record": b"\x00\x00\x00\x01\x04ab" + b"\x08",
    "header key not UTF-8": b"\x00\x00\x00\x01\x04ab" + b"\x02" + b"\x02\xff" + b"\x01",
    "negative header count": b"\x00\x00\x00\x01\x04ab" + b"\x01",
    "2^30 headers in 5 bytes": b"\x00\x00\x00\x01\x04ab" + b"\x80\x80\x80\x80\x08",
}


@pytest.mark.parametrize("case", sorted(HAND_MADE))
def test_hand_made_records_are_read_or_refused_as_iter_records_does(case):
    buf = _batch_of(HAND_MADE[case])
    expected, got = python_columns(buf), in_child(CHILD_BOUND_S, compiled_columns, buf)
    if case == "valid":
        assert got == expected == ([0], [expected[1][0]], [None], [b"ab"], None)
    else:
        assert isinstance(expected, Exception) and got is None, (expected, got)
