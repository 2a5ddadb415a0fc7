"""Schema compatibility by Avro's schema-resolution rules.

``can_read(reader, writer)`` lists every reason data written with ``writer``
cannot be read with ``reader`` (empty list: compatible). Rules (Avro 1.11
specification, "Schema Resolution"):

- primitives match by type; promotions int->long/float/double, long->float/double,
  float->double, string<->bytes;
- records match by unqualified name (or a reader alias); a reader field missing
  from the writer needs a default; writer fields the reader lacks are skipped;
  field aliases of the reader match writer field names; field types resolve recursively;
- enums match by name; writer symbols missing from the reader need a reader enum default;
- fixed match by name and size; arrays by items; maps by values;
- a writer union: every branch must be readable; a reader union: some branch must
  read the writer's type.

Compatibility levels (Confluent's names): BACKWARD = the new schema reads data
written with the latest; FORWARD = the latest reads data written with the new;
FULL = both; ``*_TRANSITIVE`` = against every registered version; NONE = no check.
Rule names in messages follow Confluent's (``READER_FIELD_MISSING_DEFAULT_VALUE``,
``TYPE_MISMATCH``, ``MISSING_UNION_BRANCH``, ``MISSING_ENUM_SYMBOLS``,
``NAME_MISMATCH``, ``FIXED_SIZE_MISMATCH``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Sequence

log = logging.getLogger(__name__)

LEVELS = (
    "NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
# (writer type, reader type) pairs the reader may promote.
PROMOTIONS = frozenset({
    ("int", "long"), ("int", "float"), ("int", "double"),
    ("long", "float"), ("long", "double"), ("float", "double"),
    ("string", "bytes"), ("bytes", "string"),
})


@dataclass(frozen=True)
class Incompatibility:
    """One reason a reader cannot read a writer's data: where, which rule, detail."""

    path: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"at '{self.path}': {self.rule}: {self.detail}"


def _full(name: str, ns: str | None) -> str:
    return name if "." in name or not ns else f"{ns}.{name}"


class _Names:
    """Named types of one schema, by full name, with their enclosing namespace."""

    def __init__(self, schema: Any) -> None:
        self.defs: dict[str, tuple[dict, str]] = {}
        self._walk(schema, "")

    def _walk(self, s: Any, ns: str) -> None:
        if isinstance(s, list):
            for b in s:
                self._walk(b, ns)
        elif isinstance(s, dict):
            t = s.get("type")
            if t in NAMED:
                full = _full(s["name"], s.get("namespace", ns))
                inner_ns = full.rpartition(".")[0]
                self.defs[full] = (s, inner_ns)
                for f in s.get("fields", []) if t in ("record", "error") else []:
                    self._walk(f["type"], inner_ns)
            elif t == "array":
                self._walk(s["items"], ns)
            elif t == "map":
                self._walk(s["values"], ns)
            elif isinstance(t, (dict, list)):
                self._walk(t, ns)

    def resolve(self, s: Any, ns: str) -> tuple[Any, str]:
        """Follow references and ``{"type": X}`` wrappers to a concrete schema."""
        for _ in range(64):
            if isinstance(s, str):
                if s in PRIMITIVES:
                    return s, ns
                full = _full(s, ns)
                hit = self.defs.get(full) or self.defs.get(s)
                if hit is None:
                    return s, ns  # unknown reference: compared by name below
                return hit
            if isinstance(s, dict):
                t = s.get("type")
                if isinstance(t, str) and t in PRIMITIVES:
                    return t, ns  # logical types read as their underlying type
                if t in NAMED or t in ("array", "map"):
                    return s, ns
                s = t
                continue
            return s, ns
        raise ValueError("schema references nest too deep")


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    t = s.get("type")
    return "record" if t == "error" else t


def _describe(s: Any, ns: str) -> str:
    if isinstance(s, dict) and s.get("type") in NAMED:
        return f"{s['type']} {_full(s['name'], s.get('namespace', ns))}"
    if isinstance(s, (dict, list)):
        return json.dumps(s)[:80]
    return str(s)


class _Checker:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.rn = _Names(reader)
        self.wn = _Names(writer)
        self.out: list[Incompatibility] = []
        self._memo: dict[tuple[str, str], list[Incompatibility] | None] = {}

    def check(self, r: Any, rns: str, w: Any, wns: str, path: str, out: list[Incompatibility]) -> None:
        r, rns = self.rn.resolve(r, rns)
        w, wns = self.wn.resolve(w, wns)
        rk, wk = _kind(r), _kind(w)
        if wk == "union":
            for branch in w:
                sub: list[Incompatibility] = []
                self.check(r, rns, branch, wns, path, sub)
                if sub:
                    bw, bns = self.wn.resolve(branch, wns)
                    out.append(Incompatibility(
                        path, "MISSING_UNION_BRANCH",
                        f"reader type {_describe(r, rns)} cannot read writer union branch "
                        f"{_describe(bw, bns)} ({sub[0]})"))
            return
        if rk == "union":
            for branch in r:
                sub = []
                self.check(branch, rns, w, wns, path, sub)
                if not sub:
                    return
            out.append(Incompatibility(
                path, "MISSING_UNION_BRANCH",
                f"reader union {_describe(r, rns)} has no branch that reads writer type {_describe(w, wns)}"))
            return
        if rk != wk:
            if (wk, rk) in PROMOTIONS:
                return
            out.append(Incompatibility(
                path, "TYPE_MISMATCH", f"reader type {_describe(r, rns)} cannot read writer type {_describe(w, wns)}"))
            return
        if rk in PRIMITIVES:
            return
        if rk == "array":
            self.check(r["items"], rns, w["items"], wns, f"{path}[]", out)
            return
        if rk == "map":
            self.check(r["values"], rns, w["values"], wns, f"{path}{{}}", out)
            return
        if not self._names_match(r, rns, w, wns):
            out.append(Incompatibility(
                path, "NAME_MISMATCH",
                f"reader {_describe(r, rns)} does not match writer {_describe(w, wns)} (names differ, no alias)"))
            return
        if rk == "fixed":
            if r["size"] != w["size"]:
                out.append(Incompatibility(
                    path, "FIXED_SIZE_MISMATCH", f"reader size {r['size']} != writer size {w['size']}"))
            return
        if rk == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                out.append(Incompatibility(
                    path, "MISSING_ENUM_SYMBOLS",
                    f"writer symbols {missing} are not in reader enum {_describe(r, rns)}, which has no default"))
            return
        self._record(r, rns, w, wns, path, out)

    def _names_match(self, r: dict, rns: str, w: dict, wns: str) -> bool:
        r_full = _full(r["name"], r.get("namespace", rns))
        w_full = _full(w["name"], w.get("namespace", wns))
        if r_full.rpartition(".")[2] == w_full.rpartition(".")[2]:
            return True
        aliases = {_full(a, r_full.rpartition(".")[0]) for a in r.get("aliases", [])}
        return w_full in aliases or w_full.rpartition(".")[2] in {a.rpartition(".")[2] for a in aliases}

    def _record(self, r: dict, rns: str, w: dict, wns: str, path: str, out: list[Incompatibility]) -> None:
        key = (_full(r["name"], r.get("namespace", rns)), _full(w["name"], w.get("namespace", wns)))
        if key in self._memo:
            # checked before (or being checked: a recursive type is assumed to resolve)
            out.extend(self._memo[key] or ())
            return
        self._memo[key] = None
        mine: list[Incompatibility] = []
        self._fields(r, rns, w, wns, path, mine)
        self._memo[key] = mine
        out.extend(mine)

    def _fields(self, r: dict, rns: str, w: dict, wns: str, path: str, out: list[Incompatibility]) -> None:
        rns = _full(r["name"], r.get("namespace", rns)).rpartition(".")[0]
        wns = _full(w["name"], w.get("namespace", wns)).rpartition(".")[0]
        w_fields = {f["name"]: f for f in w.get("fields", [])}
        for rf in r.get("fields", []):
            fpath = f"{path}.{rf['name']}" if path else rf["name"]
            wf = w_fields.get(rf["name"])
            if wf is None:
                for alias in rf.get("aliases", []):
                    if alias in w_fields:
                        wf = w_fields[alias]
                        break
            if wf is not None:
                self.check(rf["type"], rns, wf["type"], wns, fpath, out)
            elif "default" not in rf:
                out.append(Incompatibility(
                    fpath, "READER_FIELD_MISSING_DEFAULT_VALUE",
                    f"field '{rf['name']}' is not in the writer schema and has no default"))


def can_read(reader: Any, writer: Any) -> list[Incompatibility]:
    """Every reason ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    c = _Checker(reader, writer)
    out: list[Incompatibility] = []
    c.check(reader, "", writer, "", "", out)
    return out


def check(new: Any, previous: Sequence[Any], level: str) -> list[str]:
    """Messages for every way ``new`` breaks ``level`` against ``previous`` (oldest first).

    Returns:
        Empty when compatible; otherwise one message per problem, naming the
        direction, the version it breaks, the field path and the rule.

    Raises:
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    if level not in LEVELS:
        raise ValueError(f"compatibility level {level!r} is not one of {', '.join(LEVELS)}")
    if level == "NONE" or not previous:
        return []
    versions = list(enumerate(previous, 1))
    if not level.endswith("_TRANSITIVE"):
        versions = versions[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for number, old in versions:
        if base in ("BACKWARD", "FULL"):
            for p in can_read(new, old):
                problems.append(f"{level}: new schema cannot read data written with version {number}: {p}")
        if base in ("FORWARD", "FULL"):
            for p in can_read(old, new):
                problems.append(f"{level}: version {number} cannot read data written with the new schema: {p}")
    return problems
