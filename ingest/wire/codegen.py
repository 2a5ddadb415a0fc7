"""The compiler of declared schemas: one schema at one version becomes plain Python functions.

Reading a body field by field through type objects costs a call or two per field, and the hot paths
(a produce, a fetch, a follower's fetch) would be slower than hand-written codecs. So, as Kafka
generates its message classes from its JSON specs and kafka-python 3 generates its codecs, a schema
is compiled once per version: consecutive fixed-width fields, with the length or count that starts
the next field, are read and written by one precomputed ``struct.Struct``; nested structs and arrays
are inlined; an array of numbers is one unpack. Every check names the field it failed on::

    buffer underrun decoding FetchRequest.partition+offset+max_size: need 16 bytes at position 3, only 15 left

The functions of a :class:`Codec`: ``decode(buf)`` reads a whole body (trailing bytes are malformed
unless the schema ignores them); ``decode_from(buf, pos, end)`` reads one value and returns it with
the position after it; ``encode(value)`` returns the body, ``frame(value)`` (for a class with a
``frame_head``) the whole frame, its ``size`` and head fields packed with the first fixed-width
fields; both join their pieces once (a message set is copied once). ``parts(value)`` returns the
body's pieces in order without joining them: a RECORDS value may then be any sized object (a file
region a broker sends with ``sendfile``), which stays a piece of its own. ``Codec.source`` is the
generated source: print it to see what runs.

The layouts themselves are not written here: each type of :mod:`ingest.wire.types` writes the lines
that read and write it, and :mod:`ingest.wire.schema` says which fields a version has. This module
holds the source text, the names it refers to and the checks; the lines that read a struct are
:mod:`ingest.wire.codegen_decode`'s, those that write one :mod:`ingest.wire.codegen_encode`'s.
"""
from __future__ import annotations

import contextlib
import struct
import uuid
from dataclasses import MISSING
from typing import Callable, Iterator, NamedTuple

from ingest.errors import InvalidRecordError, MalformedRequestError
from ingest.records.varint import encode_uvarint, encode_varint, read_uvarint, read_varint, read_varlong
from ingest.wire.codegen_decode import Decoding
from ingest.wire.codegen_encode import Encoding, Out
from ingest.wire.types import REST

_LITERALS = (int, float, str, bytes, bool, type(None))


class Codec(NamedTuple):
    decode: Callable
    decode_from: Callable
    encode: Callable
    frame: Callable | None
    source: str
    parts: Callable | None = None


class Gen(Decoding, Encoding):
    """The source being generated for one class at one version, and the names it refers to."""

    def __init__(self, cls: type, version: int) -> None:
        self.cls, self.version = cls, version
        self.lines: list[str] = []
        self.depth = 0
        self.count = 0
        self.loops = 0
        self.names: dict[str, object] = {
            "_W": cls.__name__, "_bad": cls.MALFORMED, "_too_long": MalformedRequestError,
            "_unpack_from": struct.unpack_from, "_pack": struct.pack, "_UUID": uuid.UUID,
            "_VarintError": InvalidRecordError, "_uvarint": encode_uvarint, "_varint": encode_varint,
            "_read_uvarint": read_uvarint, "_read_varint": read_varint, "_read_varlong": read_varlong,
        }

    # --- source text -----------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(header)
        self.depth += 1
        yield
        self.depth -= 1

    @contextlib.contextmanager
    def same(self) -> Iterator[None]:
        yield

    def var(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def loop_index(self) -> str:
        self.loops += 1
        return f"i{self.loops}"

    def const(self, value: object, hint: str) -> str:
        if isinstance(value, _LITERALS) or value == ():
            return repr(value)
        for name, known in self.names.items():
            if known is value:
                return name
        name = f"_{hint}{len(self.names)}"
        self.names[name] = value
        return name

    def struct(self, fmt: str) -> tuple[str, int]:
        """The name of the precomputed ``struct.Struct`` of ``fmt`` (big-endian), and its size."""
        name = f"_S_{fmt.replace('?', 'B_')}"
        if name not in self.names:
            self.names[name] = struct.Struct(">" + fmt)
        return name, self.names[name].size

    # --- checks ----------------------------------------------------------------------------

    def underrun(self, label: str, need: object, end: str) -> None:
        need = need if isinstance(need, int) else "{" + str(need) + "}"
        self.line(f'raise _bad(f"buffer underrun decoding {{_W}}.{label}: need {need} bytes at position '
                  f'{{pos}}, only {{{end} - pos}} left")')

    def bad(self, text: str, cause: str | None = None) -> None:
        self.line(f'raise _bad(f"{{_W}}.{text}")' + (f" from {cause}" if cause else ""))

    def too_long(self, text: str) -> None:
        self.line(f'raise _too_long(f"{{_W}}.{text}")')

    def varint(self, reader: str, target: str, label: str, end: str) -> None:
        with self.block("try:"):
            self.line(f"{target}, pos = {reader}(buf, pos)")
        with self.block("except _VarintError as exc:"):
            self.bad(f"{label}: {{exc}}", cause="exc")
        with self.block(f"if pos > {end}:"):
            self.bad(f"{label}: the varint runs past the end of its field")

    def uvarint(self, target: str, label: str, end: str) -> None:
        self.varint("_read_uvarint", target, label, end)

    @contextlib.contextmanager
    def counted(self, n: str | None, label: str, kind: str, target: str, end: str, flexible: bool,
                nullable: bool) -> Iterator[str]:
        """The checks of a length or count (``kind``) read as ``n`` (flexible: read here, as
        ``uvarint - 1``), then the block that reads the value (it gets the name of ``n``): -1 is
        None when nullable, any other negative value is malformed."""
        if flexible:
            n = self.var("n")
            self.uvarint(n, f"{label}.{kind}", end)
            self.line(f"{n} -= 1")
        with self.block(f"if {n} < 0:"):
            if nullable:
                with self.block(f"if {n} != -1:"):
                    self.bad(f"{label}.{kind}: negative {kind} {{{n}}}")
                self.line(f"{target} = None")
            elif flexible:
                self.bad(f"{label}: null, but not nullable")
            else:
                self.bad(f"{label}.{kind}: negative {kind} {{{n}}}")
        with self.block("else:"):
            yield n

    # --- what the types ask ----------------------------------------------------------------

    @staticmethod
    def is_struct(t: object) -> bool:
        return isinstance(t, type) and hasattr(t, "SCHEMA")

    def fixed_of(self, t: object, flexible: bool) -> str | None:
        return None if self.is_struct(t) else t.fixed(flexible, False)

    def post_of(self, t: object) -> Callable | None:
        return None if self.is_struct(t) or t.post("x") is None else t.post

    @staticmethod
    def size_of(fmt: str) -> int:
        return struct.calcsize(">" + fmt)

    def default(self, f) -> str:
        """The expression of field ``f``'s default (its type's zero value when it declares none)."""
        d = f.default
        if d is MISSING:       # REQUIRED: only absent from a version of a versioned schema
            d = f.type_default() if not self.is_struct(f.type) else None
        return self.const(d, "D")


def compile_codec(cls: type, version: int) -> Codec:
    """The codec of ``cls`` (a declared class) at ``version``."""
    schema = cls.SCHEMA
    flexible = schema.is_flexible(version)
    g = Gen(cls, version)
    with g.block("def decode_from(buf, pos, end):"):
        g.decode_struct(cls, "", "value", "end", flexible)
        g.line("return value, pos")
    with g.block("def decode(buf):"):
        with g.block("if type(buf) is bytearray:"):
            g.line("buf = memoryview(buf)")
        g.line("pos = 0")
        g.line("end = len(buf)")
        g.decode_struct(cls, "", "value", "end", flexible)
        if schema.trailing == "refuse":
            with g.block("if pos != end:"):
                g.line('raise _bad(f"{_W}: {end - pos} unexpected trailing bytes after the body")')
        g.line("return value")
    with g.block("def encode(o):"):
        out = Out(g)
        g.encode_struct(cls, "o", "", out, flexible)
        g.line(f"return {out.render()}")
    with g.block("def parts(o):"):
        out = Out(g)
        g.encode_struct(cls, "o", "", out, flexible)
        g.line(f"return {out.render_parts()}")
    head = cls.frame_head() if hasattr(cls, "frame_head") else None
    if head is not None:
        with g.block("def frame(o):"):
            out = Out(g)
            g.encode_struct(cls, "o", "", out, flexible)
            g.line(f"return {out.render(head)}")
    source = "\n".join(g.lines) + "\n"
    namespace = dict(g.names)
    exec(compile(source, f"<codec of {cls.__name__} v{version}>", "exec"), namespace)   # noqa: S102
    return Codec(namespace["decode"], namespace["decode_from"], namespace["encode"], namespace.get("frame"), source,
                 namespace["parts"])


def compile_head(cls: type, size_fmt: str = "i") -> Callable:
    """``head(field, ..., rest_length)``: the ``size`` and fixed-width fields of a body that ends in
    REST, for a body whose REST is written separately (sent with sendfile). The 0.7 port's frames."""
    fields = cls.SCHEMA.regular(0)
    if not fields or fields[-1].type is not REST or any(f.type.fixed(False, False) is None for f in fields[:-1]):
        raise TypeError(f"{cls.__name__}: a head needs fixed-width fields followed by one REST field")
    fmt = "".join(f.type.fixed(False, False) for f in fields[:-1])
    st = struct.Struct(">" + size_fmt + fmt)
    fixed = struct.calcsize(">" + fmt)
    names = [f.name for f in fields[:-1]]
    source = (f"def head({', '.join(names)}, rest_length):\n"
              f"    return _S.pack({fixed} + rest_length, {', '.join(names)})\n")
    namespace = {"_S": st}
    exec(compile(source, f"<head of {cls.__name__}>", "exec"), namespace)   # noqa: S102
    return namespace["head"]


def bind(cls: type, codec: Codec) -> None:
    """Give an unversioned class its codec: ``decode``, ``decode_from``, ``_encode`` (the body) and,
    for a class with a ``frame_head``, ``encode`` (the whole frame)."""
    cls.decode = staticmethod(codec.decode)
    cls.decode_from = staticmethod(codec.decode_from)
    cls._encode = staticmethod(codec.encode)
    if codec.frame is not None:
        cls.encode = codec.frame

