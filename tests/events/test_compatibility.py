"""Avro schema-resolution rules, each tested in both directions."""
from __future__ import annotations

import copy

import pytest

from ingest.events import compatibility as compat
from ingest.events.schemas import load_schema


def rec(*fields, name="R", **extra):
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields), **extra}


def f(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


def rules(reader, writer):
    return [p.rule for p in compat.can_read(reader, writer)]


def test_identical_schemas_are_compatible_every_way():
    s = load_schema("page_view")
    for level in compat.LEVELS:
        assert compat.check(s, [copy.deepcopy(s)], level) == []


def test_added_field_needs_a_default_for_the_new_reader():
    old = rec(f("a", "int"))
    new_nodefault = rec(f("a", "int"), f("b", "string"))
    new_default = rec(f("a", "int"), f("b", "string", default="x"))
    assert rules(new_nodefault, old) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    assert rules(new_default, old) == []
    # the other way: an old reader skips the writer's extra field
    assert rules(old, new_nodefault) == []


def test_removed_field_breaks_old_readers_unless_it_had_a_default():
    old = rec(f("a", "int"), f("b", "string"))
    new = rec(f("a", "int"))
    assert rules(new, old) == []  # new reader ignores b
    assert rules(old, new) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]  # old reader misses b
    old_with_default = rec(f("a", "int"), f("b", "string", default=""))
    assert rules(old_with_default, new) == []


@pytest.mark.parametrize("writer,reader", [
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
    ("float", "double"), ("string", "bytes"), ("bytes", "string"),
])
def test_promotions_are_one_way(writer, reader):
    assert rules(rec(f("x", reader)), rec(f("x", writer))) == []
    if {writer, reader} != {"string", "bytes"}:
        assert rules(rec(f("x", writer)), rec(f("x", reader))) == ["TYPE_MISMATCH"]


def test_unrelated_types_mismatch_both_ways():
    assert rules(rec(f("x", "string")), rec(f("x", "int"))) == ["TYPE_MISMATCH"]
    assert rules(rec(f("x", "int")), rec(f("x", "string"))) == ["TYPE_MISMATCH"]
    assert rules(rec(f("x", "boolean")), rec(f("x", "null"))) == ["TYPE_MISMATCH"]


def test_unions_widening_is_backward_narrowing_is_forward():
    narrow = rec(f("x", "string"))
    wide = rec(f("x", ["null", "string"], default=None))
    assert rules(wide, narrow) == []  # reader union has a branch for string
    assert rules(narrow, wide) == ["MISSING_UNION_BRANCH"]  # writer may write null
    u2 = rec(f("x", ["null", "string"]))
    u3 = rec(f("x", ["null", "string", "long"]))
    assert rules(u3, u2) == []
    assert rules(u2, u3) == ["MISSING_UNION_BRANCH"]
    # promotion inside a union branch
    assert rules(rec(f("x", ["null", "long"])), rec(f("x", ["null", "int"]))) == []
    assert rules(rec(f("x", ["null", "int"])), rec(f("x", ["null", "long"]))) == ["MISSING_UNION_BRANCH"]


def test_enum_symbols_added_and_removed():
    e3 = rec(f("k", {"type": "enum", "name": "K", "symbols": ["A", "B", "C"]}))
    e2 = rec(f("k", {"type": "enum", "name": "K", "symbols": ["A", "B"]}))
    assert rules(e3, e2) == []  # reader knows more symbols
    assert rules(e2, e3) == ["MISSING_ENUM_SYMBOLS"]  # writer may write C
    e2_default = rec(f("k", {"type": "enum", "name": "K", "symbols": ["A", "B"], "default": "A"}))
    assert rules(e2_default, e3) == []  # unknown symbols read as the default


def test_enum_and_record_names_must_match_or_alias():
    a = rec(f("k", {"type": "enum", "name": "K", "symbols": ["A"]}))
    b = rec(f("k", {"type": "enum", "name": "Other", "symbols": ["A"]}))
    assert rules(a, b) == ["NAME_MISMATCH"]
    assert rules(b, a) == ["NAME_MISMATCH"]
    old = rec(f("a", "int"), name="Old")
    renamed = rec(f("a", "int"), name="New", aliases=["Old"])
    assert rules(renamed, old) == []
    assert rules(old, renamed) == ["NAME_MISMATCH"]  # the old reader has no alias for New


def test_field_rename_with_alias_reads_old_data():
    old = rec(f("member", "long"))
    new = rec(f("member_id", "long", aliases=["member"]))
    assert rules(new, old) == []
    assert rules(old, new) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]


def test_nested_records_report_the_field_path():
    inner_old = {"type": "record", "name": "Inner", "fields": [f("x", "int")]}
    inner_new = {"type": "record", "name": "Inner", "fields": [f("x", "int"), f("y", "int")]}
    old, new = rec(f("in", inner_old)), rec(f("in", inner_new))
    problems = compat.can_read(new, old)
    assert [(p.path, p.rule) for p in problems] == [("in.y", "READER_FIELD_MISSING_DEFAULT_VALUE")]
    assert rules(old, new) == []


def test_arrays_and_maps_resolve_their_items_and_values():
    assert rules(rec(f("a", {"type": "array", "items": "long"})), rec(f("a", {"type": "array", "items": "int"}))) == []
    assert rules(rec(f("a", {"type": "array", "items": "int"})),
                 rec(f("a", {"type": "array", "items": "long"}))) == ["TYPE_MISMATCH"]
    assert rules(rec(f("m", {"type": "map", "values": "double"})), rec(f("m", {"type": "map", "values": "float"}))) == []
    assert rules(rec(f("m", {"type": "map", "values": "float"})),
                 rec(f("m", {"type": "map", "values": "double"}))) == ["TYPE_MISMATCH"]


def test_fixed_size_must_match():
    a = rec(f("h", {"type": "fixed", "name": "H", "size": 16}))
    b = rec(f("h", {"type": "fixed", "name": "H", "size": 32}))
    assert rules(a, b) == ["FIXED_SIZE_MISMATCH"]
    assert rules(b, a) == ["FIXED_SIZE_MISMATCH"]


def test_recursive_types_terminate():
    node = {"type": "record", "name": "Node", "fields": [f("v", "int"), f("next", ["null", "Node"], default=None)]}
    node2 = copy.deepcopy(node)
    node2["fields"].append(f("w", "int", default=0))
    assert rules(node2, node) == []
    assert rules(node, node2) == []


def test_levels_direction_and_transitivity():
    v1 = rec(f("a", "int"))
    v2 = rec(f("a", "int"), f("b", "int", default=0))
    v3 = rec(f("b", "int", default=0))  # drops a: BACKWARD vs v2 fine, FORWARD vs v2 not
    assert compat.check(v3, [v1, v2], "BACKWARD") == []
    forward = compat.check(v3, [v1, v2], "FORWARD")
    assert len(forward) == 1 and "READER_FIELD_MISSING_DEFAULT_VALUE" in forward[0] and "'a'" in forward[0]
    assert [p.split(":", 1)[1] for p in compat.check(v3, [v1, v2], "FULL")] == [p.split(":", 1)[1] for p in forward]
    assert compat.check(v3, [v1, v2], "NONE") == []
    # transitive: a field added without default vs v1 but with it vs v2
    v2b = rec(f("a", "int"), f("c", "int"))
    v3b = rec(f("a", "int"), f("c", "int"))
    assert compat.check(v3b, [v1, v2b], "BACKWARD") == []
    trans = compat.check(v3b, [v1, v2b], "BACKWARD_TRANSITIVE")
    assert len(trans) == 1 and "version 1" in trans[0] and "'c'" in trans[0]
    with pytest.raises(ValueError, match="not one of"):
        compat.check(v1, [v1], "SIDEWAYS")


def test_header_change_is_caught_in_the_real_schemas():
    old = load_schema("page_view")
    new = copy.deepcopy(old)
    new["fields"][0]["type"]["fields"][4]["type"] = "int"  # header.seq long -> int
    problems = compat.check(new, [old], "BACKWARD")
    assert len(problems) == 1 and "header.seq" in problems[0] and "TYPE_MISMATCH" in problems[0]
