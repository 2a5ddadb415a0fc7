"""Decoding payloads in a task: framing check, writer schema per id (cached), Avro body.

Thin over :class:`ingest.events.serde.EventDeserializer` (which owns the registry
lookups and the error messages) with two additions the writers need:

- the Avro body bytes of a valid payload. They are exactly the binary encoding of
  the record under its writer schema, so Avro output appends them to container
  blocks instead of re-encoding the decoded record;
- rows: for writer schemas made of records, primitives, enums and ``["null", T]``
  unions (the usual event shape), a decoder generated per schema id reads the
  body straight into a flat tuple of leaf values (depth-first field order; nested
  records flattened), which Parquet output transposes into columns. That skips
  fastavro's per-record dicts: measured on the 200-byte bench event, 6.5 us per
  record for ``schemaless_reader`` + 1.7 us for ``Table.from_pylist`` against
  3.3 us + 1.2 us for generated decoder + ``pa.array`` per column. The same code
  also comes as ``decode_columns``: a whole chunk of payloads into one list per
  leaf, strings left as bytes for :func:`ingest.loader.writers.column_arrays` to
  check per column (the Parquet chunk path of :mod:`ingest.loader.staging`).

A payload the generated decoder does not accept (truncated, bytes left over,
invalid UTF-8, out-of-range union/enum index, ...) is handed to the deserializer,
which raises the precise :class:`EventDecodeError`; if the deserializer accepts
it after all, its record is flattened into the same row, so the generated
decoder can only be faster, never stricter. Other schemas (arrays, maps, fixed,
logical types, unions of records, named references) keep the dict path.

Framing (magic byte + schema id, then the Avro body) is :mod:`ingest.events.envelope`'s.
"""
from __future__ import annotations

import io
import struct
from typing import Any, Callable

import fastavro

from ingest.events.envelope import MAGIC_BYTE, PREFIX, PREFIX_SIZE
from ingest.loader import cdecode

_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)
# 1 + the length of a string/bytes whose zigzag varint length is this one byte; 0 otherwise
# the value of a one-byte zigzag varint (bytes 0..127)
_ONE_BYTE_VALUE = tuple((b >> 1) ^ -(b & 1) for b in range(128))
_ONE_BYTE_LENGTH = tuple(1 + (b >> 1) if b < 128 and not b & 1 else 0 for b in range(256))


class RowLayout:
    """A generated row decoder for one writer schema.

    ``decode(payload)`` returns the flat tuple of leaf values (raises any exception
    on a payload it does not accept); ``from_record(record)`` flattens a decoded
    dict into the same tuple; ``time_index`` is the position of ``header.time``.
    """

    __slots__ = ("decode", "decode_columns", "raw_strings", "arrow_types", "time_index", "width", "schema")

    def __init__(self, decode: Callable[[bytes], tuple], time_index: int, width: int, schema: dict,
                 decode_columns: Callable[[Any], list] | None = None, raw_strings: frozenset = frozenset()) -> None:
        self.decode = decode
        self.decode_columns = decode_columns
        """``decode_columns(payloads)``: the leaf values of every payload as ``width`` lists (one per
        leaf, in :meth:`decode`'s order), no tuple per row; raises on the first payload :meth:`decode`
        would refuse (the lists are then dropped). Strings are left as their bytes, UTF-8 not yet
        checked: :func:`ingest.loader.writers.column_arrays` checks a whole column at once and
        raises on an invalid one, so a chunk counts as decoded only after it. The compiled decoder
        gives a bytes or string leaf as one tuple of Arrow buffers instead of a list (validity,
        offsets, data: no Python object per value); ``column_arrays`` takes both."""
        self.raw_strings = raw_strings
        """Positions of the leaves that ``decode_columns`` leaves as bytes (string leaves)."""
        self.arrow_types = None  # the leaves' Arrow types, set by the first column_arrays call
        self.time_index = time_index
        self.width = width
        self.schema = schema

    def from_record(self, record: dict) -> tuple:
        out: list = []
        _flatten(self.schema, record, out)
        return tuple(out)


class _Unsupported(Exception):
    pass


def _flatten(schema: dict, record: dict, out: list) -> None:
    for f in schema["fields"]:
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "record":
            _flatten(t, record[f["name"]], out)
        else:
            out.append(record[f["name"]])


def _prim(t: Any) -> str | None:
    """The primitive/enum kind of a leaf type, or None when not a plain one."""
    if isinstance(t, str):
        return t if t in ("null", "boolean", "int", "long", "float", "double", "bytes", "string") else None
    if isinstance(t, dict) and "logicalType" not in t:
        kind = t.get("type")
        if kind == "enum":
            return "enum"
        if isinstance(kind, str) and kind in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
            return kind
    return None


class _Gen:
    def __init__(self, raw_strings: bool = False) -> None:
        self.raw_strings = raw_strings  # strings left as their UTF-8 bytes (checked later, per column)
        self.raw_targets: set[str] = set()  # the variables that then hold bytes
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {"_F": _FLOAT, "_D": _DOUBLE}
        self.n = 0

    def var(self) -> str:
        self.n += 1
        return f"v{self.n - 1}"

    def varint(self, ind: str, target: str) -> None:
        # zigzag varint of up to 9 bytes (63 bits), unrolled (no loop: 5% fewer instructions
        # per row than a loop after two bytes, measured with cachegrind on the bench event);
        # a 10-byte one (huge magnitudes, where fastavro wraps to 64 bits) is left to the
        # deserializer
        # A one-byte varint (|value| < 64: union and enum indexes, small numbers) is decoded by
        # the table _Z (zigzag already undone), the others by shifts.
        self.consts["_Z"] = _ONE_BYTE_VALUE
        L = self.lines
        L += [f"{ind}b = p[pos]", f"{ind}if b < 128:", f"{ind}    {target} = _Z[b]; pos += 1", f"{ind}else:",
              f"{ind}    n = b & 127; b = p[pos + 1]; n |= (b & 127) << 7"]
        depth = ind + "    "
        for k in range(2, 9):
            L += [f"{depth}if b < 128:", f"{depth}    pos += {k}", f"{depth}else:"]
            depth += "    "
            L.append(f"{depth}b = p[pos + {k}]; n |= (b & 127) << {7 * k}")
        L += [f"{depth}if b > 127: raise ValueError('10-byte varint')", f"{depth}pos += 9",
              f"{ind}    {target} = (n >> 1) ^ -(n & 1)"]

    def leaf(self, kind: str, t: Any, ind: str, target: str) -> None:
        L = self.lines
        if kind == "null":
            L.append(f"{ind}{target} = None")
        elif kind == "boolean":
            L += [f"{ind}b = p[pos]; pos += 1",
                  f"{ind}if b > 1: raise ValueError('boolean byte')",
                  f"{ind}{target} = b == 1"]
        elif kind == "int":
            self.varint(ind, target)
            L.append(f"{ind}if not {_INT_RANGE[0]} <= {target} <= {_INT_RANGE[1]}: raise ValueError('int range')")
        elif kind == "long":
            self.varint(ind, target)
        elif kind == "float":
            L.append(f"{ind}{target} = _F.unpack_from(p, pos)[0]; pos += 4")
        elif kind == "double":
            L.append(f"{ind}{target} = _D.unpack_from(p, pos)[0]; pos += 8")
        elif kind in ("string", "bytes"):
            conv = ".decode()" if kind == "string" and not self.raw_strings else ""
            if kind == "string" and self.raw_strings:
                self.raw_targets.add(target)
            # one-byte non-negative length (< 64 bytes, the usual case) without the general
            # varint: _L maps that byte to 1 + length (0 for any other byte)
            self.consts["_L"] = _ONE_BYTE_LENGTH
            L += [f"{ind}e = _L[p[pos]]",
                  f"{ind}if e:",
                  f"{ind}    e += pos",
                  f"{ind}    {target} = p[pos + 1:e]{conv}; pos = e",
                  f"{ind}else:"]
            self.varint(ind + "    ", "n")
            L += [f"{ind}    if n < 0: raise ValueError('negative length')",
                  f"{ind}    e = pos + n",
                  f"{ind}    {target} = p[pos:e]{conv}; pos = e"]
        elif kind == "enum":
            name = f"_S{len(self.consts)}"
            self.consts[name] = tuple(t["symbols"])
            self.varint(ind, "n")
            L += [f"{ind}if n < 0: raise ValueError('enum index')", f"{ind}{target} = {name}[n]"]
        else:  # pragma: no cover - _prim filters
            raise _Unsupported(kind)

    def record(self, schema: dict, path: tuple[str, ...], paths: list[tuple[str, ...]]) -> None:
        if not isinstance(schema.get("fields"), list):
            raise _Unsupported("record without fields")
        for f in schema["fields"]:
            t = f["type"]
            p = path + (f["name"],)
            if isinstance(t, dict) and t.get("type") == "record" and "logicalType" not in t:
                self.record(t, p, paths)
                continue
            target = self.var()
            paths.append(p)
            kind = _prim(t)
            if kind is not None:
                self.leaf(kind, t, "    ", target)
                continue
            if isinstance(t, list) and len(t) == 2 and "null" in t:
                other = t[1 - t.index("null")]
                okind = _prim(other)
                if okind is None or okind == "null":
                    raise _Unsupported(f"union {t}")
                # the branch index is one byte, 0 or 2 (zigzag 0 or 1); any other byte, including
                # a longer encoding of 0 or 1 that fastavro would take, is left to the deserializer
                self.lines += ["    b = p[pos]; pos += 1",
                               f"    if b == {2 * t.index('null')}:", f"        {target} = None",
                               f"    elif b == {2 * t.index(other)}:"]
                self.leaf(okind, other, "        ", target)
                self.lines.append("    else: raise ValueError('union index')")
                continue
            raise _Unsupported(f"field {'.'.join(p)} of type {t!r}")


def compile_row_layout(schema: Any, prefix: bytes | None = None, decoder: str = "compiled") -> RowLayout | None:
    """The generated row decoder of a writer schema, or None when the schema needs the dict path.

    Also None when the schema has no plain ``header.time`` (int or long): those
    records keep the dict path, so the task's quarantine message stays the same.
    With ``prefix`` (the 5 framing bytes of one schema id) the decoder also refuses a
    payload framed otherwise, so a whole fetch can be decoded with one layout
    (:func:`decode_all`) without looking at each payload's schema id first. ``decoder``
    (:data:`ingest.loader.cdecode.DECODERS`) picks who runs ``decode_columns``: ``compiled`` the C
    extension's schema program (the Python one when the extension is not importable), ``python`` the
    generated code; ``decode`` (one row tuple) is the generated code either way.
    """
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    gen = _Gen()
    paths: list[tuple[str, ...]] = []
    try:
        gen.record(schema, (), paths)
    except _Unsupported:
        return None
    columns_gen = _Gen(raw_strings=True)
    columns_gen.record(schema, (), [])
    try:
        time_index = paths.index(("header", "time"))
    except ValueError:
        return None
    header = next(f["type"] for f in schema["fields"] if f["name"] == "header")
    time_type = next(f["type"] for f in header["fields"] if f["name"] == "time")
    if _prim(time_type) not in ("int", "long"):
        return None
    names = [f"v{i}" for i in range(gen.n)]
    check = [f"    if p[:{PREFIX_SIZE}] != _PFX: raise ValueError('framing')"] if prefix is not None else []
    body = [*check, f"    pos = {PREFIX_SIZE}", *gen.lines, "    if pos != len(p): raise ValueError('bytes left over')"]
    columns_body = [*check, f"    pos = {PREFIX_SIZE}", *columns_gen.lines,
                    "    if pos != len(p): raise ValueError('bytes left over')"]
    ret = f"    return ({', '.join(names)}{',' if len(names) == 1 else ''})"
    # The columns form: the same datum code inside one loop over the payloads, strings kept as
    # their bytes; a datum's values are appended only after its last byte is checked (a refused
    # chunk is dropped as a whole anyway).
    cols = [f"c{i}" for i in range(gen.n)]
    columns_src = [
        "def decode_columns(payloads):",
        *(f"    {c} = []; a{i} = {c}.append" for i, c in enumerate(cols)),
        "    for p in payloads:",
        *("    " + line for line in columns_body),
        "        " + "; ".join(f"a{i}(v{i})" for i in range(gen.n)),
        f"    return [{', '.join(cols)}]",
    ]
    src = "\n".join(["def decode(p):", *body, ret, "", *columns_src])
    ns = {**gen.consts, **columns_gen.consts}
    ns["_PFX"] = prefix
    exec(compile(src, f"<row decoder {schema.get('name')}>", "exec"), ns)  # noqa: S102 - generated from a schema
    raw = frozenset(i for i in range(gen.n) if f"v{i}" in columns_gen.raw_targets)
    decode_columns = ns["decode_columns"]
    if cdecode.choose(decoder) == "compiled":
        decode_columns = cdecode.compiled_columns(schema, prefix, _prim)
    return RowLayout(ns["decode"], time_index, gen.n, schema, decode_columns, raw)


class PayloadDecoder:
    """Decodes framed payloads; not thread-safe (one per task)."""

    def __init__(self, deserializer, decoder: str = "compiled") -> None:
        self._deser = deserializer
        self.decoder = cdecode.choose(decoder)
        """Who decodes a Parquet chunk's columns: ``compiled`` or ``python`` (after the fallback)."""
        self._schemas: dict[int, dict] = {}
        self._parsed: dict[int, Any] = {}
        self._layouts: dict[int, RowLayout | None] = {}

    def decode(self, payload: bytes, *, topic: str, offset: int) -> tuple[int, dict[str, Any]]:
        """(schema id, record). Raises ``EventDecodeError`` naming topic, offset and schema id.

        A valid payload of a known schema is decoded here directly (one
        ``schemaless_reader`` call); anything unusual goes through the
        deserializer, which owns the registry lookup and the exact error messages.
        """
        if len(payload) > PREFIX_SIZE and payload[0] == MAGIC_BYTE:
            schema_id = PREFIX.unpack_from(payload)[1]
            parsed = self._parsed.get(schema_id)
            if parsed is not None:
                body = memoryview(payload)[PREFIX_SIZE:]
                buf = io.BytesIO(body)
                try:
                    record = fastavro.schemaless_reader(buf, parsed, None)
                except Exception:
                    record = None
                if record is not None and buf.tell() == len(body):
                    return schema_id, record
        record = self._deser.deserialize(payload, topic=topic, offset=offset)  # raises the precise error
        schema_id = PREFIX.unpack_from(payload)[1]
        if schema_id not in self._parsed:
            self._parsed[schema_id] = fastavro.parse_schema(self.writer_schema(schema_id, payload, topic=topic,
                                                                                offset=offset))
        return schema_id, record

    def decode_row(self, payload: bytes, *, topic: str, offset: int) -> tuple[int, Any, RowLayout | None]:
        """(schema id, value, layout): a row tuple when the schema has a :class:`RowLayout`, else the dict.

        The hot loop of a task. Raises ``EventDecodeError`` like :meth:`decode`.
        """
        if len(payload) > PREFIX_SIZE and payload[0] == MAGIC_BYTE:
            schema_id = PREFIX.unpack_from(payload)[1]
            layout = self._layouts.get(schema_id)
            if layout is not None:
                try:
                    return schema_id, layout.decode(payload), layout
                except Exception:
                    pass  # the deserializer below decides, with the precise message
        schema_id, record = self.decode(payload, topic=topic, offset=offset)
        if schema_id not in self._layouts:
            self._layouts[schema_id] = compile_row_layout(
                self.writer_schema(schema_id, payload, topic=topic, offset=offset), PREFIX.pack(MAGIC_BYTE, schema_id),
                self.decoder)
        layout = self._layouts[schema_id]
        if layout is None:
            return schema_id, record, None
        return schema_id, layout.from_record(record), layout

    def writer_schema(self, schema_id: int, payload: bytes, *, topic: str, offset: int) -> dict:
        schema = self._schemas.get(schema_id)
        if schema is None:
            schema = self._schemas[schema_id] = self._deser.writer_schema(payload, topic=topic, offset=offset)[1]
        return schema

    @staticmethod
    def body(payload: bytes) -> memoryview:
        """The Avro body of a payload already decoded successfully."""
        return memoryview(payload)[PREFIX_SIZE:]
