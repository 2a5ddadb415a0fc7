"""The decoding half of the schema compiler: the lines that read a struct, its arrays and tagged fields.

A mixin of :class:`ingest.wire.codegen.Gen` (which holds the source text, the names and the checks);
the lines are written into a function whose locals are ``buf``, ``pos`` and an end position. Each
read is bounds-checked against that end and names the field it failed on; consecutive fixed-width
fields (with the length or count that starts the next field) are one unpack.
"""
from __future__ import annotations


class Decoding:
    """Writes decoding lines; mixed into :class:`ingest.wire.codegen.Gen`."""

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
