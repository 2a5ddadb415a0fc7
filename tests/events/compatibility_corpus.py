"""Reader/writer schema pairs with the verdict of the Avro specification ("Schema Resolution").

Used by ``tests/events/test_compatibility_corpus.py`` (our checker agrees with every
verdict; where the ``avro`` package's checker disagrees, the test names the pairs) and
``bench/bench_compatibility.py`` (agreement and speed of both checkers).

Each case: ``(name, reader, writer, compatible)``. The rules, from the Avro 1.11
specification: primitives match by type with the promotions int->long/float/double,
long->float/double, float->double, string<->bytes; records, enums and fixed match by
unqualified name or a reader alias (aliases are names relative to the type's namespace);
a reader field missing from the writer needs a default; an enum writer symbol missing
from the reader needs a reader enum default; fixed sizes must match; arrays and maps
resolve their items and values; every branch of a writer union must be readable, and a
reader union must have a branch that reads a non-union writer.
"""
from __future__ import annotations

import copy
import itertools
from typing import Any

from ingest.events.schemas import load_schema

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
              ("float", "double"), ("string", "bytes"), ("bytes", "string")}  # (writer, reader)


def rec(*fields: dict, name: str = "R", namespace: str | None = "t", **extra: Any) -> dict:
    out = {"type": "record", "name": name, "fields": list(fields), **extra}
    if namespace:
        out["namespace"] = namespace
    return out


def f(name: str, type_: Any, **extra: Any) -> dict:
    return {"name": name, "type": type_, **extra}


def _primitive_matrix() -> list[tuple]:
    """Every (reader, writer) pair of primitives, as a record field: 64 cases."""
    return [(f"primitive {r} reads {w}", rec(f("x", r)), rec(f("x", w)), r == w or (w, r) in PROMOTIONS)
            for r, w in itertools.product(PRIMITIVES, PRIMITIVES)]


def _page_view_evolutions() -> list[tuple]:
    pv = load_schema("page_view")
    add_default = copy.deepcopy(pv)
    add_default["fields"].append(f("experiment", ["null", "string"], default=None))
    add_plain = copy.deepcopy(pv)
    add_plain["fields"].append(f("experiment", "string"))
    return [
        ("page_view reads itself", pv, copy.deepcopy(pv), True),
        ("page_view + optional field reads page_view", add_default, pv, True),
        ("page_view reads page_view + optional field", pv, add_default, True),
        ("page_view + required field reads page_view", add_plain, pv, False),
    ]


def cases() -> list[tuple[str, Any, Any, bool]]:
    enum3 = {"type": "enum", "name": "K", "symbols": ["A", "B", "C"]}
    enum2 = {"type": "enum", "name": "K", "symbols": ["A", "B"]}
    enum2d = {**enum2, "default": "A"}
    inner1 = {"type": "record", "name": "Inner", "fields": [f("x", "int")]}
    inner2 = {"type": "record", "name": "Inner", "fields": [f("x", "int"), f("y", "int")]}
    node = {"type": "record", "name": "Node", "fields": [f("v", "int"), f("next", ["null", "Node"], default=None)]}
    node2 = copy.deepcopy(node)
    node2["fields"].append(f("w", "int", default=0))
    node3 = copy.deepcopy(node)
    node3["fields"].append(f("w", "int"))
    out = [
        # records: fields added / removed, defaults
        ("field added without default", rec(f("a", "int"), f("b", "string")), rec(f("a", "int")), False),
        ("field added with default", rec(f("a", "int"), f("b", "string", default="x")), rec(f("a", "int")), True),
        ("writer field skipped", rec(f("a", "int")), rec(f("a", "int"), f("b", "string")), True),
        ("empty reader reads anything", rec(), rec(f("a", "int")), True),
        ("field type changed", rec(f("a", "string")), rec(f("a", "int")), False),
        ("field alias reads old name", rec(f("m2", "long", aliases=["m"])), rec(f("m", "long")), True),
        ("old name cannot read aliased field", rec(f("m", "long")), rec(f("m2", "long", aliases=["m"])), False),
        ("record renamed without alias", rec(f("a", "int"), name="New"), rec(f("a", "int"), name="Old"), False),
        ("record renamed with alias", rec(f("a", "int"), name="New", aliases=["Old"]),
         rec(f("a", "int"), name="Old"), True),
        ("record renamed with qualified alias", rec(f("a", "int"), name="New", aliases=["t.Old"]),
         rec(f("a", "int"), name="Old"), True),
        ("record namespace changed", rec(f("a", "int"), namespace="u"), rec(f("a", "int"), namespace="t"), True),
        ("record without namespace reads namespaced", rec(f("a", "int"), namespace=None), rec(f("a", "int")), True),
        ("record with a qualified name reads another namespace", rec(f("a", "int"), name="a.R", namespace=None),
         rec(f("a", "int"), name="R", namespace="b"), True),
        ("missing enum field with an enum default but no field default",
         rec(f("a", "int"), f("k", enum2d)), rec(f("a", "int")), False),
        # nested and recursive
        ("nested record field added", rec(f("in", inner2)), rec(f("in", inner1)), False),
        ("nested record field removed", rec(f("in", inner1)), rec(f("in", inner2)), True),
        ("recursive type with defaulted field", rec(f("n", node2)), rec(f("n", node)), True),
        ("recursive type reads wider", rec(f("n", node)), rec(f("n", node2)), True),
        ("recursive type with required field", rec(f("n", node3)), rec(f("n", node)), False),
        # enums
        ("enum reader knows more symbols", rec(f("k", enum3)), rec(f("k", enum2)), True),
        ("enum writer has unknown symbol", rec(f("k", enum2)), rec(f("k", enum3)), False),
        ("enum unknown symbol read as default", rec(f("k", enum2d)), rec(f("k", enum3)), True),
        ("enum renamed", rec(f("k", {**enum2, "name": "Other"})), rec(f("k", enum2)), False),
        ("enum renamed with alias", rec(f("k", {**enum2, "name": "Other", "aliases": ["K"]})), rec(f("k", enum2)), True),
        # fixed
        ("fixed same size", rec(f("h", {"type": "fixed", "name": "H", "size": 16})),
         rec(f("h", {"type": "fixed", "name": "H", "size": 16})), True),
        ("fixed size differs", rec(f("h", {"type": "fixed", "name": "H", "size": 16})),
         rec(f("h", {"type": "fixed", "name": "H", "size": 32})), False),
        ("fixed renamed", rec(f("h", {"type": "fixed", "name": "G", "size": 16})),
         rec(f("h", {"type": "fixed", "name": "H", "size": 16})), False),
        ("fixed read as bytes", rec(f("h", "bytes")), rec(f("h", {"type": "fixed", "name": "H", "size": 16})), False),
        # arrays and maps
        ("array items promoted", rec(f("a", {"type": "array", "items": "long"})),
         rec(f("a", {"type": "array", "items": "int"})), True),
        ("array items narrowed", rec(f("a", {"type": "array", "items": "int"})),
         rec(f("a", {"type": "array", "items": "long"})), False),
        ("map values promoted", rec(f("m", {"type": "map", "values": "double"})),
         rec(f("m", {"type": "map", "values": "float"})), True),
        ("map values narrowed", rec(f("m", {"type": "map", "values": "float"})),
         rec(f("m", {"type": "map", "values": "double"})), False),
        ("array read as map", rec(f("a", {"type": "map", "values": "int"})),
         rec(f("a", {"type": "array", "items": "int"})), False),
        ("array of records evolves", rec(f("a", {"type": "array", "items": inner1})),
         rec(f("a", {"type": "array", "items": inner2})), True),
        # unions
        ("union widens", rec(f("x", ["null", "string"], default=None)), rec(f("x", "string")), True),
        ("union narrows", rec(f("x", "string")), rec(f("x", ["null", "string"])), False),
        ("union gains a branch", rec(f("x", ["null", "string", "long"])), rec(f("x", ["null", "string"])), True),
        ("union loses a branch", rec(f("x", ["null", "string"])), rec(f("x", ["null", "string", "long"])), False),
        ("union branch promoted", rec(f("x", ["null", "long"])), rec(f("x", ["null", "int"])), True),
        ("union branch narrowed", rec(f("x", ["null", "int"])), rec(f("x", ["null", "long"])), False),
        ("union reordered", rec(f("x", ["string", "null"])), rec(f("x", ["null", "string"])), True),
        ("union with one branch reads its type", rec(f("x", ["int"])), rec(f("x", "int")), True),
        ("type reads union of one branch", rec(f("x", "int")), rec(f("x", ["int"])), True),
        ("union promotes a writer primitive", rec(f("x", ["null", "double"])), rec(f("x", "int")), True),
        ("union of records, writer record found by name", rec(f("x", ["null", inner1])), rec(f("x", inner2)), True),
        # logical types read as their underlying types
        ("date reads int", rec(f("d", {"type": "int", "logicalType": "date"})), rec(f("d", "int")), True),
        ("timestamp-millis reads long", rec(f("t", {"type": "long", "logicalType": "timestamp-millis"})),
         rec(f("t", "long")), True),
        ("long reads timestamp-millis", rec(f("t", "long")),
         rec(f("t", {"type": "long", "logicalType": "timestamp-millis"})), True),
        # top-level non-records (key subjects)
        ("top-level long reads int", "long", "int", True),
        ("top-level int reads long", "int", "long", False),
        ("top-level string reads bytes", "string", "bytes", True),
        ("top-level record reads string", rec(f("a", "int")), "string", False),
        ("top-level union reads null", ["null", "string"], "null", True),
    ]
    return out + _page_view_evolutions() + _primitive_matrix()
