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
the position after it; ``encode(value)`` returns the body as a list of byte strings (one join, no
copy of a message set until then). ``Codec.source`` is the generated source: print it to see what runs.

The layouts themselves are not written here: each type of :mod:`ingest.wire.types` writes the lines
that read and write it, and :mod:`ingest.wire.schema` says which fields a version has.
"""
from __future__ import annotations

import contextlib
import struct
import uuid
from dataclasses import MISSING
from typing import Callable, Iterator, NamedTuple

from ingest.errors import InvalidRecordError, MalformedRequestError
from ingest.records.varint import encode_uvarint, encode_varint, read_uvarint, read_varint, read_varlong
from ingest.wire.types import REST, Array

_LITERALS = (int, float, str, bytes, bool, type(None))


class Codec(NamedTuple):
    decode: Callable
    decode_from: Callable
    encode: Callable
    source: str


class Gen:
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

    def min_size(self, cls: type) -> int:
        """The fewest bytes a value of ``cls`` takes (its fixed widths and prefixes)."""
        total = 0
        schema = cls.SCHEMA
        for f in schema.regular(self.version):
            compact = f.compact(self.version, schema.is_flexible(self.version))
            if self.is_struct(f.type):
                total += self.min_size(f.type)
            else:
                fmt = f.type.fixed(compact, False) or f.type.prefix(compact, False)
                total += self.size_of(fmt) if fmt else 0
            if f.may_end:
                break
        return total

    # --- decoding --------------------------------------------------------------------------

    def _unpack(self, run: list, posts: list, prefix: str, end: str) -> None:
        if not run:
            return
        st, size = self.struct("".join(r[0] for r in run))
        with self.block(f"if pos + {size} > {end}:"):
            self.underrun(prefix + "+".join(r[2] for r in run), size, end)
        self.line(f"{', '.join(r[1] for r in run)}, = {st}.unpack_from(buf, pos)")
        self.line(f"pos += {size}")
        for var, expr in posts:
            self.line(f"{var} = {expr}")
        run.clear()
        posts.clear()

    def decode_value(self, t, label: str, target: str, end: str, flexible: bool, nullable: bool,
                     append_to: str | None = None) -> None:
        """Read one value of type ``t`` into ``target`` (and append it to the list ``append_to``)."""
        if self.is_struct(t):
            self.decode_struct(t, label, target, end, flexible)
        else:
            fmt = t.fixed(flexible, nullable)
            n = None if fmt else (self.var("n") if t.prefix(flexible, nullable) else None)
            run = [(fmt, target, "")] if fmt else [(t.prefix(flexible, nullable), n, f".{t.prefix_name}")] if n else []
            posts = [(target, t.post(target))] if fmt and t.post(target) else []
            self._unpack(run, posts, label, end)
            if not fmt:
                t.decode(self, label, target, n, end, flexible, nullable)
        if append_to:
            self.line(f"{append_to}.append({target})")

    def decode_struct(self, cls: type, label: str, target: str, end: str, flexible: bool) -> None:
        """Read the fields of ``cls`` at this version, then build the value into ``target``."""
        schema, v = cls.SCHEMA, self.version
        prefix = f"{label}." if label else ""
        present = schema.regular(v) + schema.tagged(v)
        values = {f.name: self.var(f.name) for f in present}
        run: list = []
        posts: list = []
        opened = 0
        regular = schema.regular(v)
        for k, f in enumerate(regular):
            t, var = f.type, values[f.name]
            compact, nullable = f.compact(v, flexible), v in f.nullable
            fmt = self.fixed_of(t, compact)
            if fmt:
                run.append((fmt, var, f.name))
                if t.post(var):
                    posts.append((var, t.post(var)))
            else:
                n = None
                if not self.is_struct(t) and t.prefix(compact, nullable):
                    n = self.var("n")
                    run.append((t.prefix(compact, nullable), n, f"{f.name}.{t.prefix_name}"))
                self._unpack(run, posts, prefix, end)
                if self.is_struct(t):
                    self.decode_struct(t, prefix + f.name, var, end, compact)
                else:
                    t.decode(self, prefix + f.name, var, n, end, compact, nullable)
            if f.may_end:
                self._unpack(run, posts, prefix, end)
                for later in regular[k + 1:] + schema.tagged(v):
                    self.line(f"{values[later.name]} = {self.default(later)}")
                cond = f"pos != {end}" + (f" or not {var}" if f.may_end == "if_set" else "")
                self.line(f"if {cond}:")
                self.depth += 1
                opened += 1
        self._unpack(run, posts, prefix, end)
        if flexible:
            self.decode_tags(schema, prefix, values, end)
        self.depth -= opened
        args = [values[f.name] if f.name in values else self.default(f) for f in schema.fields]
        self.line(f"{target} = {self.const(cls, cls.__name__)}({', '.join(args)})")

    def decode_tags(self, schema, prefix: str, values: dict, end: str) -> None:
        v = self.version
        tagged = schema.tagged(v)
        for f in tagged:
            self.line(f"{values[f.name]} = {self.default(f)}")
        count, tag, size, e = self.var("tags"), self.var("tag"), self.var("size"), self.var("end")
        self.uvarint(count, f"{prefix}tagged_fields.count", end)
        with self.block(f"for _ in range({count}):"):
            self.uvarint(tag, f"{prefix}tagged_fields.tag", end)
            self.uvarint(size, f"{prefix}tagged_fields.size", end)
            self.line(f"{e} = pos + {size}")
            with self.block(f"if {e} > {end}:"):
                self.underrun(f"{prefix}tagged_fields[{{{tag}}}]", size, end)
            for k, f in enumerate(tagged):
                with self.block(f"{'if' if k == 0 else 'elif'} {tag} == {f.tag}:"):
                    self.decode_value(f.type, prefix + f.name, values[f.name], e, True, v in f.nullable)
                    with self.block(f"if pos != {e}:"):
                        self.bad(f"{prefix}{f.name}: tagged field of {{{size}}} bytes holds {{pos - {e} + {size}}}")
            with self.block("else:") if tagged else self.same():
                self.line(f"pos = {e}   # a tag this version does not know: skipped")

    def default(self, f) -> str:
        d = f.default
        if d is MISSING:       # REQUIRED: only absent from a version of a versioned schema
            d = f.type_default() if not self.is_struct(f.type) else None
        return self.const(d, "D")

    # --- encoding --------------------------------------------------------------------------

    def _pack(self, run: list, out: str) -> None:
        if run:
            st, _size = self.struct("".join(r[0] for r in run))
            self.line(f"{out}.append({st}.pack({', '.join(r[1] for r in run)}))")
            run.clear()

    def encode_value(self, t, expr: str, label: str, out: str, flexible: bool, nullable: bool) -> None:
        """Append the bytes of ``expr``, a value of type ``t``, to the list ``out``."""
        if self.is_struct(t):
            self.encode_struct(t, expr, label, out, flexible)
            return
        fmt = t.fixed(flexible, nullable)
        if fmt:
            self._pack([(fmt, t.pre(expr))], out)
            return
        size, body = t.encode(self, expr, label, flexible, nullable)
        pf = t.prefix(flexible, nullable)
        self._pack([(pf, size)] if pf else [], out)
        body(out)

    def encode_struct(self, cls: type, expr: str, label: str, out: str, flexible: bool) -> None:
        schema, v = cls.SCHEMA, self.version
        prefix = f"{label}." if label else ""
        if issubclass(cls, tuple):       # a Record (or a plain tuple given for one): unpack it
            names = [self.var(f.name) for f in schema.fields]
            self.line(f"{', '.join(names)}, = {expr}")
            exprs = dict(zip((f.name for f in schema.fields), names))
        else:
            exprs = {f.name: f"{expr}.{f.name}" for f in schema.fields}
        run: list = []
        for f in schema.regular(v):
            t, e = f.type, exprs[f.name]
            compact, nullable = f.compact(v, flexible), v in f.nullable
            fmt = self.fixed_of(t, compact)
            if fmt:
                run.append((fmt, t.pre(e)))
                continue
            if self.is_struct(t):
                self._pack(run, out)
                self.encode_struct(t, e, prefix + f.name, out, compact)
                continue
            size, body = t.encode(self, e, prefix + f.name, compact, nullable)
            pf = t.prefix(compact, nullable)
            if pf:
                run.append((pf, size))
            self._pack(run, out)
            body(out)
        self._pack(run, out)
        if flexible:
            self.encode_tags(schema, prefix, exprs, out)

    def encode_tags(self, schema, prefix: str, exprs: dict, out: str) -> None:
        tagged = schema.tagged(self.version)
        if not tagged:
            self.line(f"{out}.append(b'\\x00')   # no tagged fields")
            return
        tags = self.var("tags")
        self.line(f"{tags} = []")
        for f in tagged:
            e = exprs[f.name]
            is_default = (f"{e}" if isinstance(f.type, Array) and self.default(f) == "()"
                          else f"{e} != {self.default(f)}")
            with self.block(f"if {is_default}:"):
                sub = self.var("sub")
                self.line(f"{sub} = []")
                self.encode_value(f.type, e, prefix + f.name, sub, True, self.version in f.nullable)
                self.line(f"{tags}.append(({f.tag}, {sub}))")
        self.line(f"{out}.append(_uvarint(len({tags})))")
        with self.block(f"for _tag, _sub in {tags}:"):
            self.line(f"{out}.append(_uvarint(_tag))")
            self.line(f"{out}.append(_uvarint(sum(map(len, _sub))))")
            self.line(f"{out}.extend(_sub)")


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
        g.line("out = []")
        g.encode_struct(cls, "o", "", "out", flexible)
        g.line("return out")
    source = "\n".join(g.lines) + "\n"
    namespace = dict(g.names)
    exec(compile(source, f"<codec of {cls.__name__} v{version}>", "exec"), namespace)   # noqa: S102
    return Codec(namespace["decode"], namespace["decode_from"], namespace["encode"], source)


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
    """Give an unversioned class its codec: ``decode``, ``decode_from`` and ``_encode``."""
    cls.decode = staticmethod(codec.decode)
    cls.decode_from = staticmethod(codec.decode_from)
    cls._encode = staticmethod(codec.encode)

