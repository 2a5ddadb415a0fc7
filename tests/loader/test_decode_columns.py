"""The columns path of a Parquet chunk (RowLayout.decode_columns, then writers.column_arrays, which
checks the strings' UTF-8) on good and malformed input.

A chunk of payloads becomes one Arrow array per leaf column only when every payload is one the row
decoder (and so fastavro) accepts; a chunk with any malformed payload (truncated, bytes left over,
byte flipped, invalid UTF-8, out-of-range union or enum index, huge or negative lengths, other
framing) raises and the task hands each of its messages to the per-message path. Randomized over the RICH schema of
test_perf_rows and the real event schemas (nested header, unions, enums); every decode runs under a
time bound, so a decoder caught in a loop fails the test instead of hanging it.

Every test runs for both decoders (``decoder``): ``python`` (the generated code, bound by a thread)
and ``compiled`` (the C extension ingest.loader._cdecode). The compiled one runs in a forked child
process with a deadline (``in_child``): a loop holding the GIL or a crash (segfault) fails the test
instead of hanging or killing pytest. On every randomized chunk it must give the Python decoder's
columns, or refuse where the Python decoder refuses.
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
from ingest.loader import cdecode
from ingest.loader.decode import compile_row_layout
from ingest.loader.writers import column_arrays
from tests.harness.time_bound import in_child, within
from tests.loader.test_perf_rows import RICH, _record

PREFIX = b"\x00" + struct.pack(">i", 9)
BOUND_S = 10.0  # a chunk of ~20 payloads decodes in microseconds: only a hang reaches this
CHILD_BOUND_S = 120.0  # a whole randomized check (300 chunks, both decoders, fastavro) in the child: ~1-3 s

DECODERS = [pytest.param("python"),
            pytest.param("compiled", marks=[pytest.mark.processes,  # its checks run in a forked child
                                            pytest.mark.skipif(not cdecode.available(),
                                                               reason="ingest.loader._cdecode not built")])]


def _bounded(decoder: str, fn, *args):
    """``fn(*args)`` under the decoder's time bound: a thread for Python code, a child process for
    compiled code (a hang holding the GIL or a crash fails the test)."""
    return in_child(CHILD_BOUND_S, fn, *args) if decoder == "compiled" else within(BOUND_S, fn, *args)


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


def _outcome(layout, chunk: list[bytes]):
    """The chunk's columns, or the refusal (None)."""
    try:
        return _columns(layout, chunk)
    except AssertionError:
        raise
    except Exception:
        return None


def _check(schema: dict, records: list[dict], seed: int, decoder: str) -> tuple[int, int]:
    return _bounded(decoder, _check_here, schema, records, seed, decoder)


def _check_here(schema: dict, records: list[dict], seed: int, decoder: str) -> tuple[int, int]:
    layout = compile_row_layout(schema, PREFIX, decoder)
    assert layout is not None
    assert getattr(layout.decode_columns, "compiled", False) == (decoder == "compiled")
    python = compile_row_layout(schema, PREFIX, "python")  # the reference: same columns, same refusals
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
        got = within(BOUND_S, _outcome, layout, chunk)
        if decoder != "python":
            assert (got is None) == (within(BOUND_S, _outcome, python, chunk) is None), \
                f"{decoder} and python disagree on {chunk[k]!r}"
        if got is None:
            refused += 1  # the task hands every message of the chunk to the per-message path
            continue
        accepted += 1  # a spoiled payload that is still a valid datum (e.g. a flipped string byte)
        assert all(_fastavro_accepts(parsed, p) for p in chunk), f"accepted what fastavro refuses: {chunk[k]!r}"
        assert got == [list(c) for c in zip(*(layout.decode(p) for p in chunk))]
    return accepted, refused


@pytest.mark.parametrize("decoder", DECODERS)
def test_columns_of_the_rich_schema_are_the_rows_transposed_and_malformed_chunks_are_refused(decoder):
    rng = random.Random(11)
    accepted, refused = _check(RICH, [_record(rng) for _ in range(200)], seed=12, decoder=decoder)
    assert refused > 200 and accepted + refused == 300


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("name", [PAGE_VIEW, CLICK])
def test_columns_of_the_real_event_schemas_on_malformed_chunks(name, decoder):
    schema = load_schema(name)
    hf = HeaderFactory(ProducerIdentity.new("svc"))
    records = EventGenerator(name, seed=5).batch(200)
    for i, record in enumerate(records):
        record["header"] = hf.next(time_ms=1_795_000_000_000 + i * 7)
    accepted, refused = _check(schema, records, seed=13, decoder=decoder)
    assert refused > 200 and accepted + refused == 300


@pytest.mark.parametrize("decoder", DECODERS)
def test_out_of_range_union_and_enum_indexes_are_refused(decoder):
    layout = compile_row_layout(RICH, PREFIX, decoder)
    parsed = fastavro.parse_schema(RICH)
    good = _payload(parsed, _record(random.Random(1)))
    assert _bounded(decoder, _columns, layout, [good])
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
            _bounded(decoder, _columns, layout, [good, head + bad])
        assert not isinstance(info.value, AssertionError)


@pytest.mark.parametrize("decoder", DECODERS)
def test_huge_lengths_are_refused_without_allocating_them(decoder):
    schema = {"type": "record", "name": "S", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
        {"name": "s", "type": "string"}]}
    layout = compile_row_layout(schema, PREFIX, decoder)
    for length in (1 << 40, (1 << 62) - 1, -5):
        payload = PREFIX + _varint(1_795_000_000_000) + _varint(length) + b"abc"
        with pytest.raises(ValueError):
            _bounded(decoder, _columns, layout, [payload])


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_longer_encoding_of_a_branch_index_is_left_to_the_deserializer(decoder):
    """fastavro reads ``80 00`` as branch 0 (a two-byte varint 0); the generated decoder takes only
    the one-byte form and refuses the chunk, so such a payload goes the per-message way, where the
    deserializer decodes it (the row is then built from its record)."""
    layout = compile_row_layout(RICH, PREFIX, decoder)
    parsed = fastavro.parse_schema(RICH)
    rec = dict(_record(random.Random(2)), inner={"x": None})
    payload = _payload(parsed, rec)
    assert payload.endswith(b"\x00")
    longer = payload[:-1] + b"\x80\x00"
    assert _fastavro_accepts(parsed, longer)
    with pytest.raises(ValueError):
        _bounded(decoder, _columns, layout, [payload, longer])
    assert _bounded(decoder, _columns, layout, [payload]) == [[v] for v in layout.from_record(rec)]


SURROGATE, OVERLONG, ABOVE_MAX, FIVE_BYTES, CUT, LONE = (b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80",
                                                         b"\xf8\x88\x80\x80\x80", b"\xc3", b"\xff")


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("bad", [SURROGATE, OVERLONG, ABOVE_MAX, FIVE_BYTES, CUT, LONE])
def test_strings_of_invalid_utf8_are_refused_as_python_refuses_them(bad, decoder):
    """Strings reach column_arrays as bytes: its check must refuse what ``bytes.decode`` (and so
    fastavro) refuses, else a payload the deserializer would quarantine is loaded."""
    schema = {"type": "record", "name": "S", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
        {"name": "s", "type": "string"}, {"name": "t", "type": ["null", "string"]}]}
    layout = compile_row_layout(schema, PREFIX, decoder)
    parsed = fastavro.parse_schema(schema)
    good = [_payload(parsed, {"header": {"time": 1}, "s": v, "t": w})
            for v, w in (("plain", None), ("é ü 字 😀", "x"), ("", ""))]
    assert _bounded(decoder, _columns, layout, good) == [[1, 1, 1], ["plain", "é ü 字 😀", ""], [None, "x", ""]]
    for value in (b"ok" + bad, bad + b"ok"):
        for spoiled in (PREFIX + _varint(1) + _varint(len(value)) + value + b"\x00",
                        PREFIX + _varint(1) + _varint(0) + b"\x02" + _varint(len(value)) + value):
            assert not _fastavro_accepts(parsed, spoiled)
            with pytest.raises(Exception) as info:
                _bounded(decoder, _columns, layout, [*good, spoiled])
            assert not isinstance(info.value, AssertionError)


def _every_cut_and_extension(layout, python, payloads: list[bytes]) -> int:
    """Each payload cut after every byte, and with one byte more: the decoder refuses exactly where
    the Python decoder refuses; the number of refusals."""
    refused = 0
    for p in payloads:
        for spoiled in [p[:n] for n in range(len(p))] + [p + b"\x00"]:
            got, want = _outcome(layout, [spoiled]), _outcome(python, [spoiled])
            assert got == want, spoiled
            refused += got is None
    return refused


@pytest.mark.parametrize("decoder", DECODERS)
def test_every_cut_of_a_payload_and_its_last_byte_cut_are_refused(decoder):
    """Cut after any byte (the last one included) or one byte too long: refused, as the Python decoder does."""
    parsed = fastavro.parse_schema(RICH)
    rng = random.Random(3)
    payloads = [_payload(parsed, _record(rng)) for _ in range(5)]
    layout, python = compile_row_layout(RICH, PREFIX, decoder), compile_row_layout(RICH, PREFIX, "python")
    refused = _bounded(decoder, _every_cut_and_extension, layout, python, payloads)
    assert refused == sum(len(p) + 1 for p in payloads)  # not one of them decodes


NUMBERS = {"type": "record", "name": "N", "fields": [
    {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
    {"name": "i", "type": "int"}, {"name": "s", "type": "bytes"}]}


@pytest.mark.parametrize("decoder", DECODERS)
def test_varints_of_nine_bytes_are_read_and_of_ten_bytes_refused(decoder):
    """A long's varint has at most 9 bytes here (63 bits: fastavro's 10-byte forms, which wrap to 64
    bits, are left to the deserializer); an int must fit 32 bits; a length varint is bounded the same way."""
    layout = compile_row_layout(NUMBERS, PREFIX, decoder)
    nine_max = _varint((1 << 62) - 1)  # the largest magnitude of 9 bytes
    nine_min = _varint(-(1 << 62))
    assert len(nine_max) == len(nine_min) == 9
    tail = _varint(-7) + _varint(2) + b"ok"
    got = _bounded(decoder, _columns, layout, [PREFIX + nine_max + tail, PREFIX + nine_min + tail])
    assert got == [[(1 << 62) - 1, -(1 << 62)], [-7, -7], [b"ok", b"ok"]]
    ten = _varint(1 << 62)  # 10 bytes
    padded_zero = b"\x80" * 9 + b"\x00"  # 0 in 10 bytes
    cases = [PREFIX + ten + tail,                                   # a long of 10 bytes
             PREFIX + padded_zero + tail,                           # a zero padded to 10 bytes
             PREFIX + _varint(5) + _varint(1 << 31) + _varint(2) + b"ok",    # int above 2^31 - 1
             PREFIX + _varint(5) + _varint(-(1 << 31) - 1) + _varint(2) + b"ok",  # int below -2^31
             PREFIX + _varint(5) + _varint(1) + padded_zero,            # a length of 10 bytes
             PREFIX + _varint(5) + _varint(1) + b"\xff" * 12,           # continuation bytes to the end
             PREFIX + b"\xff" * 9]                                       # a varint cut after 9 bytes
    python = compile_row_layout(NUMBERS, PREFIX, "python")
    for payload in cases:
        assert _outcome(python, [payload]) is None
        with pytest.raises(ValueError):
            _bounded(decoder, _columns, layout, [PREFIX + nine_max + tail, payload])


def test_schemas_with_arrays_or_maps_get_no_program_so_no_block_loop_exists():
    """Arrays and maps (whose block counts could ask for 2^62 zero-size items) keep the dict path:
    neither decoder has a loop over blocks that input could stretch."""
    for t in ({"type": "array", "items": "null"}, {"type": "map", "values": "long"},
              {"type": "array", "items": {"type": "array", "items": "long"}}):
        schema = {"type": "record", "name": "A", "fields": [
            {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}},
            {"name": "a", "type": t}]}
        assert compile_row_layout(schema, PREFIX, "compiled") is None
        with pytest.raises(ValueError, match="field a of type"):
            cdecode.schema_program(schema, lambda t: "long" if t == "long" else None)


def _run_program(program: bytes, width: int, enums: tuple, payloads):
    from ingest.loader import _cdecode

    return _cdecode.decode_columns(program, width, PREFIX, enums, payloads)


@pytest.mark.processes  # a forked child
@pytest.mark.skipif(not cdecode.available(), reason="ingest.loader._cdecode not built")
def test_the_extension_refuses_a_malformed_program_before_reading_any_payload():
    """The program comes from schema_program, but the C side checks it too: unknown opcodes, columns
    outside the width, a column left unwritten (its list would hold NULLs) or written twice, missing
    symbol tables, an optional without its leaf."""
    from array import array

    ok = array("i", [cdecode.OP_LONG, 0]).tobytes()
    assert in_child(CHILD_BOUND_S, _run_program, ok, 1, (), [PREFIX + _varint(3)]) == [[3]]
    for ops, width, enums in (([99, 0], 1, ()),                                   # unknown opcode
                              ([cdecode.OP_LONG, 1], 1, ()),                      # column 1 of width 1
                              ([cdecode.OP_LONG, -1], 1, ()),                     # negative column
                              ([cdecode.OP_LONG], 1, ()),                         # cut operand
                              ([cdecode.OP_ENUM, 0, 0], 1, ()),                   # no symbol table 0
                              ([cdecode.OP_ENUM, 0, 0], 1, ([],)),                # not a tuple
                              ([cdecode.OP_OPTIONAL, 0, 0, 2], 1, ()),            # optional without its leaf
                              ([cdecode.OP_OPTIONAL, 0, 0, 2, cdecode.OP_LONG, 1], 2, ()),  # leaf of another column
                              ([cdecode.OP_OPTIONAL, 0, 0, 2, cdecode.OP_OPTIONAL, 0, 0, 2], 1, ()),
                              ([cdecode.OP_OPTIONAL, 0, 0, 256, cdecode.OP_LONG, 0], 1, ()),  # branch byte 256
                              ([cdecode.OP_LONG, 0], 2, ()),                      # column 1 never written
                              ([cdecode.OP_LONG, 0, cdecode.OP_STRING, 0], 2, ()),  # column 0 twice
                              ([cdecode.OP_STRING, 1, cdecode.OP_LONG, 0], 2, ())):  # out of order
        with pytest.raises(ValueError, match="schema program"):
            in_child(CHILD_BOUND_S, _run_program, array("i", ops).tobytes(), width, enums, [PREFIX + _varint(3)])


def test_without_the_extension_the_python_decoder_runs_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(cdecode, "_module", None)
    monkeypatch.setattr(cdecode, "_warned", False)
    with caplog.at_level("WARNING", logger="ingest.loader.cdecode"):
        layouts = [compile_row_layout(RICH, PREFIX, "compiled") for _ in range(3)]
    assert not any(getattr(layout.decode_columns, "compiled", False) for layout in layouts)
    assert [r.getMessage() for r in caplog.records if "not importable" in r.getMessage()] != []
    assert len(caplog.records) == 1
    with pytest.raises(ValueError, match="decoder 'fast': allowed compiled, python"):
        cdecode.choose("fast")
