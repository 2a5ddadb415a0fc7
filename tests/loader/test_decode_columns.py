"""The columns path of a Parquet chunk (RowLayout.decode_columns, then writers.column_arrays, which
checks the strings' UTF-8) on good and malformed input.

A chunk of payloads becomes one Arrow array per leaf column only when every payload is one the row
decoder (and so fastavro) accepts; a chunk with any malformed payload (truncated, bytes left over,
byte flipped, invalid UTF-8, out-of-range union or enum index, huge or negative lengths, other
framing) raises and the task hands each of its messages to the per-message path. Randomized over the RICH schema of
test_perf_rows and the real event schemas (nested header, unions, enums); every decode runs under a
time bound, so a decoder caught in a loop fails the test instead of hanging it.
"""
from __future__ import annotations

import io
import random
import struct

import fastavro
import pytest

from ingest.events.envelope import HeaderFactory, ProducerIdentity
from ingest.events.loadgen import EventGenerator
from ingest.events.schemas import CLICK, PAGE_VIEW, load_schema
from ingest.loader.decode import compile_row_layout
from ingest.loader.writers import column_arrays
from tests.harness.time_bound import within
from tests.loader.test_perf_rows import RICH, _record

PREFIX = b"\x00" + struct.pack(">i", 9)
BOUND_S = 10.0  # a chunk of ~20 payloads decodes in microseconds: only a hang reaches this


def _payload(parsed, record) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    return PREFIX + buf.getvalue()


def _fastavro_accepts(parsed, payload: bytes) -> bool:
    if payload[:5] != PREFIX:
        return False
    buf = io.BytesIO(payload[5:])
    try:
        fastavro.schemaless_reader(buf, parsed, None)
    except Exception:
        return False
    return buf.tell() == len(payload) - 5


def _columns(layout, payloads: list[bytes]) -> list[list]:
    """What a task makes of a chunk: the leaf arrays (as Python lists, to compare)."""
    return [a.to_pylist() for a in column_arrays(layout, layout.decode_columns(payloads))]


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _spoiled(rng: random.Random, p: bytes) -> bytes:
    kind = rng.randrange(7)
    if kind == 0:
        return p[:rng.randrange(len(p))]  # truncated (also inside the framing)
    if kind == 1:
        return p + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))  # bytes left over
    if kind == 2:
        i = rng.randrange(5, len(p))
        return p[:i] + bytes([rng.randrange(256)]) + p[i + 1:]  # one byte flipped
    if kind == 3:
        i = rng.randrange(5, len(p))  # a huge or negative varint (a length, index or number) spliced in
        return p[:i] + _varint(rng.choice([1 << 40, (1 << 62) - 1, -1, -(1 << 40), 3, 255])) + p[i:]
    if kind == 4:
        return b"\x00" + struct.pack(">i", 10) + p[5:]  # framed with another schema id
    if kind == 5:
        return p[:5] + bytes([0xFF] * rng.randrange(1, 12))  # varint continuation bytes only
    return p[:5]  # framing only


def _check(schema: dict, records: list[dict], seed: int) -> tuple[int, int]:
    layout = compile_row_layout(schema, PREFIX)
    assert layout is not None
    parsed = fastavro.parse_schema(schema)
    payloads = [_payload(parsed, r) for r in records]
    rows = [layout.decode(p) for p in payloads]
    columns = within(BOUND_S, _columns, layout, payloads)
    assert columns == [list(c) for c in zip(*rows)], "columns are not the rows transposed"
    rng = random.Random(seed)
    accepted = refused = 0
    for _ in range(300):
        chunk = rng.sample(payloads, min(len(payloads), rng.randrange(1, 20)))
        k = rng.randrange(len(chunk))
        chunk[k] = _spoiled(rng, chunk[k])
        try:
            got = within(BOUND_S, _columns, layout, chunk)
        except AssertionError:
            raise
        except Exception:
            refused += 1  # the task hands every message of the chunk to the per-message path
            continue
        accepted += 1  # a spoiled payload that is still a valid datum (e.g. a flipped string byte)
        assert all(_fastavro_accepts(parsed, p) for p in chunk), f"accepted what fastavro refuses: {chunk[k]!r}"
        assert got == [list(c) for c in zip(*(layout.decode(p) for p in chunk))]
    return accepted, refused


def test_columns_of_the_rich_schema_are_the_rows_transposed_and_malformed_chunks_are_refused():
    rng = random.Random(11)
    accepted, refused = _check(RICH, [_record(rng) for _ in range(200)], seed=12)
    assert refused > 200 and accepted + refused == 300


@pytest.mark.parametrize("name", [PAGE_VIEW, CLICK])
def test_columns_of_the_real_event_schemas_on_malformed_chunks(name):
    schema = load_schema(name)
    hf = HeaderFactory(ProducerIdentity.new("svc"))
    records = EventGenerator(name, seed=5).batch(200)
    for i, record in enumerate(records):
        record["header"] = hf.next(time_ms=1_795_000_000_000 + i * 7)
    accepted, refused = _check(schema, records, seed=13)
    assert refused > 200 and accepted + refused == 300


def test_out_of_range_union_and_enum_indexes_are_refused():
    layout = compile_row_layout(RICH, PREFIX)
    parsed = fastavro.parse_schema(RICH)
    good = _payload(parsed, _record(random.Random(1)))
    assert within(BOUND_S, _columns, layout, [good])
    # rebuild the body field by field with one bad index at a time
    rec = _record(random.Random(1))
    rec.update(maybe=None, later=None, kind="A", inner={"x": None})
    body = _payload(parsed, rec)
    # the tail of the body: kind (enum 0), maybe (union 0), later (union 1: null), nothing, inner.x (union 0)
    tail = _varint(0) + _varint(0) + _varint(1) + _varint(0)
    assert body.endswith(tail)
    head = body[:-len(tail)]
    for bad in (_varint(3) + _varint(0) + _varint(1) + _varint(0),    # enum index 3 of 3 symbols
                _varint(-1) + _varint(0) + _varint(1) + _varint(0),   # negative enum index
                _varint(0) + _varint(2) + _varint(1) + _varint(0),    # union index 2 of 2 branches
                _varint(0) + _varint(0) + _varint(-1) + _varint(0),   # negative union index
                _varint(0) + _varint(0) + _varint(1) + _varint(2)):   # nested union index 2
        with pytest.raises(Exception) as info:
            within(BOUND_S, _columns, layout, [good, head + bad])
        assert not isinstance(info.value, AssertionError)


def test_huge_lengths_are_refused_without_allocating_them():
    schema = {"type": "record", "name": "S", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
        {"name": "s", "type": "string"}]}
    layout = compile_row_layout(schema, PREFIX)
    for length in (1 << 40, (1 << 62) - 1, -5):
        payload = PREFIX + _varint(1_795_000_000_000) + _varint(length) + b"abc"
        with pytest.raises(ValueError):
            within(BOUND_S, _columns, layout, [payload])


def test_a_longer_encoding_of_a_branch_index_is_left_to_the_deserializer():
    """fastavro reads ``80 00`` as branch 0 (a two-byte varint 0); the generated decoder takes only
    the one-byte form and refuses the chunk, so such a payload goes the per-message way, where the
    deserializer decodes it (the row is then built from its record)."""
    layout = compile_row_layout(RICH, PREFIX)
    parsed = fastavro.parse_schema(RICH)
    rec = dict(_record(random.Random(2)), inner={"x": None})
    payload = _payload(parsed, rec)
    assert payload.endswith(b"\x00")
    longer = payload[:-1] + b"\x80\x00"
    assert _fastavro_accepts(parsed, longer)
    with pytest.raises(ValueError):
        within(BOUND_S, _columns, layout, [payload, longer])
    assert within(BOUND_S, _columns, layout, [payload]) == [[v] for v in layout.from_record(rec)]


SURROGATE, OVERLONG, ABOVE_MAX, FIVE_BYTES, CUT, LONE = (b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80",
                                                         b"\xf8\x88\x80\x80\x80", b"\xc3", b"\xff")


@pytest.mark.parametrize("bad", [SURROGATE, OVERLONG, ABOVE_MAX, FIVE_BYTES, CUT, LONE])
def test_strings_of_invalid_utf8_are_refused_as_python_refuses_them(bad):
    """Strings reach column_arrays as bytes: its check must refuse what ``bytes.decode`` (and so
    fastavro) refuses, else a payload the deserializer would quarantine is loaded."""
    schema = {"type": "record", "name": "S", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
        {"name": "s", "type": "string"}, {"name": "t", "type": ["null", "string"]}]}
    layout = compile_row_layout(schema, PREFIX)
    parsed = fastavro.parse_schema(schema)
    good = [_payload(parsed, {"header": {"time": 1}, "s": v, "t": w})
            for v, w in (("plain", None), ("é ü 字 😀", "x"), ("", ""))]
    assert within(BOUND_S, _columns, layout, good) == [[1, 1, 1], ["plain", "é ü 字 😀", ""], [None, "x", ""]]
    for value in (b"ok" + bad, bad + b"ok"):
        for spoiled in (PREFIX + _varint(1) + _varint(len(value)) + value + b"\x00",
                        PREFIX + _varint(1) + _varint(0) + b"\x02" + _varint(len(value)) + value):
            assert not _fastavro_accepts(parsed, spoiled)
            with pytest.raises(Exception) as info:
                within(BOUND_S, _columns, layout, [*good, spoiled])
            assert not isinstance(info.value, AssertionError)
