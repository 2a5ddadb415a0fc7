"""The types a schema's fields are declared with: Kafka's primitive types and the 0.7 port's shapes.

Every integer is big-endian. The layouts, each written here and nowhere else::

    INT8 INT16 INT32 INT64 UINT16 UINT32 FLOAT64   fixed width (struct b h i q H I d)
    BOOL            int8, 0 false, anything else true
    UUID            16 bytes (a uuid.UUID; the nil UUID by default)
    STRING          length:int16 + UTF-8            flexible: length+1:uvarint + UTF-8
    BYTES           length:int32 + bytes            flexible: length+1:uvarint + bytes
    RECORDS         as BYTES (a record batch or message set; the codec never looks inside)
    Array(T)        count:int32 + count x T         flexible: count+1:uvarint + count x T
    Array(T, count=INT16)      the 0.7 port's request lists: count:int16
    Array(T, count=UNTIL_END)  T repeated to the end of the body, no count
    REST            every byte to the end of the body, no length (a message set sent by sendfile)
    Framed(T)       size:int32 + a T of exactly that many bytes
    UVARINT VARINT VARLONG     Kafka's varints (ingest.records.varint)
    a declared class           its schema's fields, inline (ingest.wire.schema)

A nullable field (its ``nullable`` versions) writes None as length or count -1 (flexible: 0); a
field that is not nullable refuses a negative length or count as malformed.

A type knows nothing about classes or versions: :mod:`ingest.wire.codegen` asks it, for one
form (flexible or not, nullable or not), for its fixed width or its fixed-width prefix, and has
it write the lines of the generated codec that read it and the pieces that write it.
"""
from __future__ import annotations

import uuid

INT16_MAX = (1 << 15) - 1
NIL_UUID = uuid.UUID(int=0)


class WireType:
    """One type. ``default`` is the value of a field of this type that declares none."""

    name = "?"
    default: object = None

    def fixed(self, flexible: bool, nullable: bool) -> str | None:
        """The struct format of a fixed-width form, None for a variable one."""
        return None

    def prefix(self, flexible: bool, nullable: bool) -> str | None:
        """The struct format of a fixed-width length or count that comes first, if any."""
        return None

    def post(self, var: str) -> str | None:
        """An expression turning an unpacked fixed-width value into the field's value, if needed."""
        return None

    def pre(self, expr: str) -> str:
        """The expression a fixed-width value is packed from."""
        return expr

    def describe(self, flexible: bool = False) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.describe()


class Fixed(WireType):
    def __init__(self, name: str, fmt: str, default: object) -> None:
        self.name, self.fmt, self.default = name, fmt, default

    def fixed(self, flexible, nullable):
        return self.fmt


class Uuid(Fixed):
    def __init__(self) -> None:
        super().__init__("uuid", "16s", NIL_UUID)

    def post(self, var):
        return f"_UUID(bytes={var})"

    def pre(self, expr):
        return f"{expr}.bytes"


INT8 = Fixed("int8", "b", 0)
INT16 = Fixed("int16", "h", 0)
INT32 = Fixed("int32", "i", 0)
INT64 = Fixed("int64", "q", 0)
UINT16 = Fixed("uint16", "H", 0)
UINT32 = Fixed("uint32", "I", 0)
FLOAT64 = Fixed("float64", "d", 0.0)
BOOL = Fixed("bool", "?", False)
UUID = Uuid()


class Sized(WireType):
    """STRING, BYTES and RECORDS: a length, then that many bytes."""

    prefix_name = "length"

    def __init__(self, name: str, length_fmt: str, default: object, text: bool) -> None:
        self.name, self.length_fmt, self.default, self.text = name, length_fmt, default, text

    def prefix(self, flexible, nullable):
        return None if flexible else self.length_fmt

    def describe(self, flexible=False):
        return f"compact_{self.name}" if flexible else self.name

    def decode(self, g, label, target, n, end, flexible, nullable):
        with g.counted(n, label, "length", target, end, flexible, nullable) as n:
            e = g.var("e")
            g.line(f"{e} = pos + {n}")
            with g.block(f"if {e} > {end}:"):
                g.underrun(label, n, end)
            if self.text:
                with g.block("try:"):
                    g.line(f"{target} = str(buf[pos:{e}], 'utf-8')")
                with g.block("except UnicodeDecodeError:"):
                    g.bad(f"{label}: not UTF-8: {{bytes(buf[pos:{e}])[:40]!r}}", cause="None")
            else:
                g.line(f"{target} = bytes(buf[pos:{e}])")
            g.line(f"pos = {e}")

    def encode(self, g, out, expr, label, flexible, nullable):
        x = g.var("x")
        if self.text:
            g.line(f"{x} = None if {expr} is None else {expr}.encode('utf-8')" if nullable
                   else f"{x} = {expr}.encode('utf-8')")
        else:
            g.line(f"{x} = {expr}")
        size = f"(-1 if {x} is None else len({x}))" if nullable else f"len({x})"
        if self.text and not flexible:
            with g.block(f"if {x} is not None and len({x}) > {INT16_MAX}:" if nullable else
                         f"if len({x}) > {INT16_MAX}:"):
                g.too_long(f"{label}: string of {{len({x})}} bytes does not fit an int16 length")
        if flexible:
            out.piece(f"_uvarint({size} + 1)")
        else:
            out.fixed(self.length_fmt, size)
        if nullable:
            out.piece(f"(b'' if {x} is None else {x})", f"(0 if {x} is None else len({x}))")
        else:
            out.piece(x)


STRING = Sized("string", "h", "", text=True)
BYTES = Sized("bytes", "i", b"", text=False)
RECORDS = Sized("records", "i", b"", text=False)


class Rest(WireType):
    """Every byte to the end of the body (or of the framed part): a message set."""

    name = "rest"
    default = b""

    def decode(self, g, label, target, n, end, flexible, nullable):
        g.line(f"{target} = bytes(buf[pos:{end}])")
        g.line(f"pos = {end}")

    def encode(self, g, out, expr, label, flexible, nullable):
        out.piece(expr)


REST = Rest()

UNTIL_END = "until_end"
"""An Array's ``count``: no count, elements repeated to the end of the body."""


class Array(WireType):
    """``count`` elements of ``of`` (a type or a declared class); decoded as a tuple."""

    default = ()
    prefix_name = "count"

    def __init__(self, of, count: WireType | str = INT32) -> None:
        self.of, self.count = of, count

    @property
    def name(self) -> str:
        count = "" if self.count is INT32 else f", count={getattr(self.count, 'name', self.count)}"
        return f"[{getattr(self.of, '__name__', self.of)}{count}]"

    def prefix(self, flexible, nullable):
        return None if flexible or self.count == UNTIL_END else self.count.fmt

    def decode(self, g, label, target, n, end, flexible, nullable):
        if self.count == UNTIL_END and not flexible:
            items, i = g.var("items"), g.loop_index()
            g.line(f"{items} = []")
            g.line(f"{i} = 0")
            with g.block(f"while pos < {end}:"):
                g.decode_value(self.of, f"{label}[{{{i}}}]", g.var("v"), end, flexible, False, append_to=items)
                g.line(f"{i} += 1")
            g.line(f"{target} = tuple({items})")
            return
        with g.counted(n, label, "count", target, end, flexible, nullable) as n:
            fmt = g.fixed_of(self.of, flexible)
            if fmt is not None and g.post_of(self.of) is None:   # a run of numbers: one unpack
                need = g.var("need")
                g.line(f"{need} = {n} * {g.size_of(fmt)}")
                with g.block(f"if pos + {need} > {end}:"):
                    g.underrun(label, need, end)
                g.line(f"{target} = _unpack_from('>%d{fmt}' % {n}, buf, pos)")
                g.line(f"pos += {need}")
                return
            items, i = g.var("items"), g.loop_index()
            g.line(f"{items} = []")
            with g.block(f"for {i} in range({n}):"):
                g.decode_value(self.of, f"{label}[{{{i}}}]", g.var("v"), end, flexible, False, append_to=items)
            g.line(f"{target} = tuple({items})")

    def encode(self, g, out, expr, label, flexible, nullable):
        a = g.var("a")
        g.line(f"{a} = {expr}")
        size = f"(-1 if {a} is None else len({a}))" if nullable else f"len({a})"
        if self.count is INT16 and not flexible:
            with g.block(f"if len({a}) > {INT16_MAX}:"):
                g.too_long(f"{label}: {{len({a})}} elements do not fit an int16 count")
        if flexible:
            out.piece(f"_uvarint({size} + 1)")
        elif self.count != UNTIL_END:
            out.fixed(self.count.fmt, size)
        fmt = g.fixed_of(self.of, flexible)
        if fmt is not None and g.post_of(self.of) is None:      # a run of numbers: one pack
            packed = f"_pack('>%d{fmt}' % len({a}), *{a})"
            out.piece(f"(b'' if {a} is None else {packed})" if nullable else packed)
            return
        parts = g.var("parts")
        g.line(f"{parts} = []")
        with g.block(f"if {a} is not None:") if nullable else g.same():
            e = g.var("e")
            with g.block(f"for {e} in {a}:"):
                inner = type(out)(g, parts)
                g.encode_value(self.of, e, f"{label}[]", inner, flexible, False)
                inner.flush()
        out.pieces(parts)


class Framed(WireType):
    """``size:int32`` then one ``of`` (a declared class) of exactly ``size`` bytes."""

    fmt = "i"
    prefix_name = "size"

    def __init__(self, of) -> None:
        self.of = of

    @property
    def name(self) -> str:
        return f"framed {self.of.__name__}"

    def prefix(self, flexible, nullable):
        return self.fmt

    def decode(self, g, label, target, n, end, flexible, nullable):
        least = g.min_size(self.of)
        with g.block(f"if {n} < {least}:"):
            g.bad(f"{label}.size: {{{n}}} < {least}")
        inner = g.var("end")
        g.line(f"{inner} = pos + {n}")
        with g.block(f"if {inner} > {end}:"):
            g.underrun(label, n, end)
        g.decode_value(self.of, label, target, inner, flexible, False)
        with g.block(f"if pos != {inner}:"):
            g.bad(f"{label}: {{{inner} - pos}} unexpected trailing bytes in its frame")

    def encode(self, g, out, expr, label, flexible, nullable):
        parts = g.var("parts")
        g.line(f"{parts} = []")
        inner = type(out)(g, parts)
        g.encode_value(self.of, expr, label, inner, flexible, False)
        inner.flush()
        out.fixed(self.fmt, f"sum(map(len, {parts}))")
        out.pieces(parts)


class Varint(WireType):
    """Kafka's varints: unsigned (lengths, tags), zigzag 32-bit and zigzag 64-bit."""

    default = 0

    def __init__(self, name: str, reader: str, writer: str) -> None:
        self.name, self.reader, self.writer = name, reader, writer

    def decode(self, g, label, target, n, end, flexible, nullable):
        g.varint(self.reader, target, label, end)

    def encode(self, g, out, expr, label, flexible, nullable):
        out.piece(f"{self.writer}({expr})")


UVARINT = Varint("uvarint", "_read_uvarint", "_uvarint")
VARINT = Varint("varint", "_read_varint", "_varint")
VARLONG = Varint("varlong", "_read_varlong", "_varint")
