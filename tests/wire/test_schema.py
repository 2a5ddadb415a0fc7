"""The schema declaration and its compiled codecs: every type both ways, versions, nullability,
compact forms, early ends, and the errors that name what is wrong."""
from __future__ import annotations

import uuid

import pytest

from ingest.errors import MalformedRequestError, MalformedResponseError
from ingest.wire import protocol as p
from ingest.wire.schema import Field, Record, Schema, Struct, declare, parse_versions
from ingest.wire.types import (BOOL, BYTES, FLOAT64, INT8, INT16, INT32, INT64, RECORDS, STRING, UINT16, UINT32,
                               UUID, UVARINT, VARINT, VARLONG, Array)
from tests.wire.golden_frames import samples


@declare
class Point(Record):
    SCHEMA = Schema(("x", INT32), ("y", INT32), versions="0+", flexible="1+")


@declare
class Everything(Struct):
    """One field of every type, some nullable, one only in version 1, one tagged in version 1."""

    SCHEMA = Schema(
        Field("i8", INT8), Field("i16", INT16), Field("i32", INT32), Field("i64", INT64),
        Field("u16", UINT16), Field("u32", UINT32), Field("f64", FLOAT64), Field("flag", BOOL), Field("id", UUID),
        Field("name", STRING), Field("maybe_name", STRING, nullable=True, default=None),
        Field("data", BYTES), Field("maybe_data", BYTES, nullable=True, default=None), Field("records", RECORDS),
        Field("uv", UVARINT), Field("sv", VARINT), Field("lv", VARLONG),
        Field("points", Array(Point)), Field("maybe_points", Array(Point), nullable=True, default=None),
        Field("numbers", Array(INT64)), Field("since_1", INT32, versions="1+", default=-1),
        Field("tagged", STRING, versions="1+", tag=0, default="none"),
        versions="0-1", flexible="1+")


VALUES = Everything(-8, -16, -32, -64, 65535, 4294967295, 2.5, True, uuid.UUID(int=12345), "é", None, b"\x00\xff",
                    None, b"batch", 300, -2, -(1 << 40), (Point(1, 2), Point(-3, 4)), None, (1, -1, 1 << 62), 7, "set")


@pytest.mark.parametrize("version", [0, 1])
def test_every_type_round_trips_in_both_forms(version):
    back = Everything.codec(version).decode(Everything.codec(version).encode(VALUES))
    expected = VALUES if version == 1 else Everything(**{**_asdict(VALUES), "since_1": -1, "tagged": "none"})
    assert back == expected


def _asdict(value) -> dict:
    return {f.name: getattr(value, f.name) for f in value.SCHEMA.fields}


def test_the_flexible_form_is_compact():
    v0 = Everything.codec(0).encode(VALUES)
    v1 = Everything.codec(1).encode(VALUES)
    # v1 writes since_1 (4 bytes) and the tagged field, yet every length and count is a one-byte varint
    assert len(v1) < len(v0) + 4
    assert Everything.SCHEMA.describe(1).startswith("i8:int8 i16:int16")
    assert "name:compact_string" in Everything.SCHEMA.describe(1)
    assert Everything.SCHEMA.describe(1).endswith("tagged_fields(0=tagged)")


def test_nullable_fields_take_none_and_a_non_nullable_field_refuses_a_negative_length():
    empty = Everything(0, 0, 0, 0, 0, 0, 0.0, False, uuid.UUID(int=0), "", None, b"", None, b"", 0, 0, 0, (), None, ())
    for version in (0, 1):
        assert Everything.codec(version).decode(Everything.codec(version).encode(empty)).maybe_points is None
    body = bytearray(Everything.codec(0).encode(empty))
    name_at = 1 + 2 + 4 + 8 + 2 + 4 + 8 + 1 + 16
    body[name_at:name_at + 2] = b"\xff\xfe"                 # name's length -2
    with pytest.raises(MalformedResponseError, match=r"Everything\.name\.length: negative length -2"):
        Everything.codec(0).decode(bytes(body))
    body[name_at:name_at + 4] = b"\x00\x00\xff\xfe"         # name "", then maybe_name's length -2 (only -1 is null)
    with pytest.raises(MalformedResponseError, match=r"Everything\.maybe_name\.length: negative length -2"):
        Everything.codec(0).decode(bytes(body))


def test_a_record_is_a_tuple_a_struct_compares_with_its_type():
    assert Point(1, 2) == (1, 2) and tuple(Point(1, 2)) == (1, 2)
    assert p.ProduceRequest("t", 0, b"") != p.ProduceAckRequest("t", 0, b"")
    with pytest.raises(AttributeError):
        p.FetchRequest("t", 0, 0, 1).topic = "u"       # frozen


def test_a_versioned_field_defaults_and_an_unversioned_field_is_required():
    assert Everything.codec(0) is Everything.codec(0)            # compiled once per version
    with pytest.raises(TypeError):
        p.FetchRequest("t", 0)                                  # unversioned: every field must be given
    with pytest.raises(ValueError, match="valid versions: 0-1"):
        Everything.codec(2)


def test_declaration_mistakes_are_refused_with_what_is_allowed():
    with pytest.raises(ValueError, match="declares a field twice"):
        Schema(("a", INT32), ("a", INT64))
    with pytest.raises(ValueError, match="version range '1\\.5'"):
        parse_versions("1.5")
    with pytest.raises(ValueError, match="may_end 'sometimes'"):
        Field("a", INT32, may_end="sometimes")
    assert parse_versions("3+") == (3, None) and 7 in parse_versions("3+") and 2 not in parse_versions("3+")
    assert parse_versions("1-3") == (1, 3) and 0 not in parse_versions("none")


def test_the_generated_source_is_there_to_read():
    source = p.FetchRequest.codec(0).source
    assert "def decode(buf):" in source and "def encode(o):" in source
    assert "partition+offset+max_size" in source           # one unpack for the three fixed-width fields


def test_encoding_a_string_too_long_or_a_list_too_long_for_its_count():
    with pytest.raises(MalformedRequestError, match="does not fit an int16 length"):
        p.MetadataRequest(("x" * 40000,)).encode()
    with pytest.raises(MalformedRequestError, match="elements do not fit an int16 count"):
        p.MetadataRequest(("x",) * 40000).encode()


def _declared_classes():
    return [v for v in vars(p).values() if isinstance(v, type) and issubclass(v, (Struct, Record))
            and hasattr(v, "SCHEMA") and v.__module__ == p.__name__]


def _classes_in(value, found: set) -> None:
    if isinstance(value, (Struct, Record)):
        found.add(type(value))
        for name in value.SCHEMA.fields:
            _classes_in(getattr(value, name.name), found)
    elif isinstance(value, tuple):
        for item in value:
            _classes_in(item, found)


def test_every_declared_schema_of_the_0_7_port_has_a_golden_frame():
    found: set = set()
    for kind, cls, _obj, frame in samples().values():
        if kind == "request":
            _classes_in(p.decode_request(frame), found)
        elif kind in ("response", "decode"):
            _classes_in(cls.decode(frame[4:]), found)
    found.add(p.CorruptRange)          # the body of the CORRUPT_RANGE samples
    missing = {c.__name__ for c in _declared_classes()} - {c.__name__ for c in found}
    assert not missing, f"add golden samples (tests/wire/golden_frames.py) for {sorted(missing)}"
