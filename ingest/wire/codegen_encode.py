"""The encoding half of the schema compiler: the pieces that write a struct, its arrays and tagged fields.

A mixin of :class:`ingest.wire.codegen.Gen`, and :class:`Out`, where the pieces go: at the top of a
function they are joined once at the end (a message set is copied once), consecutive fixed-width
fields merged into one pack, a frame's ``size`` and head fields packed with the first of them;
inside a loop they are appended to a list as they come.
"""
from __future__ import annotations

import struct

from ingest.wire.types import Array


class Encoding:
    """Writes encoding lines; mixed into :class:`ingest.wire.codegen.Gen`."""

    def encode_value(self, t, expr: str, label: str, out: "Out", flexible: bool, nullable: bool) -> None:
        """Write ``expr``, a value of type ``t``, to ``out``."""
        if self.is_struct(t):
            self.encode_struct(t, expr, label, out, flexible)
        elif t.fixed(flexible, nullable):
            out.fixed(t.fixed(flexible, nullable), t.pre(expr))
        else:
            t.encode(self, out, expr, label, flexible, nullable)

    def encode_struct(self, cls: type, expr: str, label: str, out: "Out", flexible: bool) -> None:
        schema, v = cls.SCHEMA, self.version
        prefix = f"{label}." if label else ""
        if issubclass(cls, tuple):       # a Record (or a plain tuple given for one): unpack it
            names = [self.var(f.name) for f in schema.fields]
            self.line(f"{', '.join(names)}, = {expr}")
            exprs = dict(zip((f.name for f in schema.fields), names))
        else:
            exprs = {f.name: f"{expr}.{f.name}" for f in schema.fields}
        for f in schema.regular(v):
            self.encode_value(f.type, exprs[f.name], prefix + f.name, out, f.compact(v, flexible), v in f.nullable)
        if flexible:
            self.encode_tags(schema, prefix, exprs, out)

    def encode_tags(self, schema, prefix: str, exprs: dict, out: "Out") -> None:
        tagged = schema.tagged(self.version)
        if not tagged:
            out.fixed("B", "0")      # no tagged fields
            return
        tags, parts = self.var("tags"), self.var("parts")
        self.line(f"{tags} = []")
        for f in tagged:
            e = exprs[f.name]
            is_default = (f"{e}" if isinstance(f.type, Array) and self.default(f) == "()"
                          else f"{e} != {self.default(f)}")
            with self.block(f"if {is_default}:"):
                sub = self.var("sub")
                self.line(f"{sub} = []")
                inner = Out(self, sub)
                self.encode_value(f.type, e, prefix + f.name, inner, True, self.version in f.nullable)
                inner.flush()
                self.line(f"{tags}.append(({f.tag}, {sub}))")
        self.line(f"{parts} = [_uvarint(len({tags}))]")
        with self.block(f"for _tag, _sub in {tags}:"):
            self.line(f"{parts}.append(_uvarint(_tag))")
            self.line(f"{parts}.append(_uvarint(sum(map(len, _sub))))")
            self.line(f"{parts}.extend(_sub)")
        out.pieces(parts)


class Out:
    """Where an encoding's bytes go. At the top of a function the pieces are kept and joined once
    at the end, consecutive fixed-width fields merged into one pack (a frame's own fields too);
    inside a loop (``into``: a list's name) each piece is appended to that list as it comes."""

    def __init__(self, g, into: str | None = None) -> None:
        self.g, self.into = g, into
        self.entries: list[tuple] = []      # ("run", [(fmt, expr)]) or ("piece", expr, size) or ("pieces", name, size)
        self.run: list[tuple[str, str]] = []

    def fixed(self, fmt: str, expr: str) -> None:
        self.run.append((fmt, expr))

    def flush(self) -> None:
        if not self.run:
            return
        if self.into is None:
            self.entries.append(("run", self.run))
        else:
            st, _size = self.g.struct("".join(f for f, _e in self.run))
            self.g.line(f"{self.into}.append({st}.pack({', '.join(e for _f, e in self.run)}))")
        self.run = []

    def piece(self, expr: str, size: str | None = None) -> None:
        """One byte string (``size``: an expression of its length; by default ``len`` of it)."""
        self.flush()
        if self.into is not None:
            self.g.line(f"{self.into}.append({expr})")
            return
        if size is None:
            if not expr.isidentifier():
                name = self.g.var("p")
                self.g.line(f"{name} = {expr}")
                expr = name
            size = f"len({expr})"
        self.entries.append(("piece", expr, size))

    def pieces(self, name: str) -> None:
        """The byte strings of the list ``name``, in order."""
        self.flush()
        if self.into is not None:
            self.g.line(f"{self.into}.extend({name})")
        else:
            self.entries.append(("pieces", name, f"sum(map(len, {name}))"))

    def render_parts(self) -> str:
        """The expression of the list of the encoding's pieces, in order, not joined (sized objects that
        are not bytes, such as a file region given as RECORDS, stay pieces of their own)."""
        self.flush()
        rendered = []
        for e in self.entries:
            if e[0] == "run":
                st, _size = self.g.struct("".join(f for f, _x in e[1]))
                rendered.append(f"{st}.pack({', '.join(x for _f, x in e[1])})")
            else:
                rendered.append(e[1] if e[0] == "piece" else f"*{e[1]}")
        return f"[{', '.join(rendered)}]"

    def render(self, head: tuple[tuple[str, str], ...] | None = None) -> str:
        """The expression of the whole encoding; with ``head``, a frame: ``size:int32`` (the bytes
        that follow), the ``head`` fields, then the body, the size merged into the first pack."""
        self.flush()
        entries = list(self.entries)
        if head is not None:
            fixed = struct.calcsize(">" + "".join(f for f, _e in head)) + sum(
                struct.calcsize(">" + "".join(f for f, _e in e[1])) for e in entries if e[0] == "run")
            size = " + ".join([str(fixed)] + [e[2] for e in entries if e[0] != "run"])
            fields = [("i", size), *head]
            if entries and entries[0][0] == "run":
                entries[0] = ("run", fields + entries[0][1])
            else:
                entries.insert(0, ("run", fields))
        rendered = []
        for e in entries:
            if e[0] == "run":
                st, _size = self.g.struct("".join(f for f, _x in e[1]))
                rendered.append(f"{st}.pack({', '.join(x for _f, x in e[1])})")
            else:
                rendered.append(e[1] if e[0] == "piece" else f"*{e[1]}")
        if len(rendered) == 1 and not rendered[0].startswith("*"):
            return rendered[0] if entries[0][0] == "run" else f"bytes({rendered[0]})"
        return f"b''.join([{', '.join(rendered)}])" if rendered else "b''"
