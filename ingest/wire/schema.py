"""Requests and responses declared as schemas: a list of typed fields, from which the codec is derived.

A declaration is a class with a ``SCHEMA`` and the :func:`declare` decorator, in the manner of
kafka-python's ``Schema`` and of Kafka's JSON message specs
(``clients/src/main/resources/common/message/``)::

    @declare
    class FetchRequest(Request):
        TYPE = RequestType.FETCH
        SCHEMA = Schema(("topic", STRING), ("partition", INT32), ("offset", INT64), ("max_size", INT32))

The decorator makes the class an immutable value with one attribute per field (a frozen dataclass
with slots; a :class:`Record` is a named tuple instead, for small nested values) and gives it the
codec :mod:`ingest.wire.codegen` compiles from the schema. The field list is the only place the
layout is written: the order, the widths and the names of a body cannot be written twice.

A versioned schema (a Kafka API) declares its ``versions`` and ``flexible`` versions; a
:class:`Field` may exist only in a version range, be nullable in some, or be a tagged field
(KIP-482) with a tag number. One declaration yields the codec of every version, compiled on first
use; in a flexible version strings, bytes and arrays take their compact forms and every struct ends
with its tagged fields. A nested struct is read and written at the version of the message it is in,
compact when the message is flexible; it declares versions and flexible versions only when it has
tagged fields of its own. In a versioned schema every field has a default (Kafka's rule: its type's
zero value unless it declares one), since the version read may not carry it; in an unversioned
schema a field without a default is a required argument.

Version ranges are written as Kafka writes them: ``"0+"``, ``"1-3"``, ``"2"``, ``"none"``.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import ClassVar, NamedTuple

from ingest.errors import MalformedResponseError
from ingest.wire import codegen
from ingest.wire.types import WireType

REQUIRED = dataclasses.MISSING
"""The default of a field that must be given (unversioned schemas only)."""


class Versions(NamedTuple):
    """An inclusive version range; ``hi`` None is open-ended."""

    lo: int
    hi: int | None

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version and (self.hi is None or version <= self.hi)


NONE = Versions(1, 0)   # contains nothing


def parse_versions(text: str | None) -> Versions:
    """``"0+"``, ``"1-3"``, ``"2"`` or ``"none"`` as a :class:`Versions`."""
    if text is None or text == "none":
        return NONE
    try:
        if text.endswith("+"):
            return Versions(int(text[:-1]), None)
        lo, _, hi = text.partition("-")
        return Versions(int(lo), int(hi or lo))
    except ValueError:
        raise ValueError(f"version range {text!r}: expected 'N+', 'N-M', 'N' or 'none'") from None


class Field:
    """One field of a schema.

    Args:
        name: the attribute name (snake case).
        type: a type of :mod:`ingest.wire.types` or a declared class (a nested struct).
        default: the value when absent from a version (or not given); REQUIRED: must be given.
        versions: the versions that carry the field.
        nullable: the versions in which it may be None (a bool: all or none).
        tag: its tag number, for a tagged field; ``tagged_versions`` the versions it is tagged in.
        flexible: ``"none"`` keeps the non-compact form in flexible versions (the request
            header's client id).
        may_end: ``"always"``: the body may end after this field, the fields after it taking their
            defaults; ``"if_set"``: only when this field is not zero (a 0.7 response's error).
    """

    __slots__ = ("name", "type", "default", "versions", "nullable", "tag", "tagged_versions", "flexible",
                 "may_end")

    def __init__(self, name: str, type: WireType | type, *, default: object = REQUIRED, versions: str = "0+",
                 nullable: bool | str = False, tag: int | None = None, tagged_versions: str | None = None,
                 flexible: str | None = None, may_end: str | None = None) -> None:
        if may_end not in (None, "always", "if_set"):
            raise ValueError(f"field {name}: may_end {may_end!r}: expected 'always' or 'if_set'")
        self.name, self.type, self.default, self.tag, self.may_end = name, type, default, tag, may_end
        self.versions = parse_versions(versions)
        self.nullable = parse_versions("0+" if nullable is True else "none" if nullable is False else nullable)
        self.tagged_versions = parse_versions(tagged_versions if tagged_versions is not None
                                              else (versions if tag is not None else "none"))
        self.flexible = None if flexible is None else parse_versions(flexible)

    def is_tagged(self, version: int) -> bool:
        return version in self.tagged_versions

    def compact(self, version: int, schema_flexible: bool) -> bool:
        return schema_flexible and (self.flexible is None or version in self.flexible)

    def type_default(self) -> object:
        return getattr(self.type, "default", None)

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {getattr(self.type, '__name__', self.type)})"


class Schema:
    """The fields of a struct, in wire order, and the versions they exist in.

    Args:
        *fields: :class:`Field` objects or ``(name, type)`` pairs.
        versions: the valid versions of a versioned schema (a Kafka API); None: unversioned (the
            0.7 port's requests, which have one layout).
        flexible: the flexible versions (compact forms, tagged fields).
        trailing: ``"refuse"`` (bytes after the last field are malformed) or ``"ignore"`` (the
            schema reads the start of a longer body).
    """

    def __init__(self, *fields: Field | tuple, versions: str | None = None, flexible: str = "none",
                 trailing: str = "refuse") -> None:
        self.fields = tuple(f if isinstance(f, Field) else Field(*f) for f in fields)
        self.versioned = versions is not None
        self.valid = parse_versions(versions or "0")
        self.flexible = parse_versions(flexible)
        if trailing not in ("refuse", "ignore"):
            raise ValueError(f"trailing {trailing!r}: expected 'refuse' or 'ignore'")
        self.trailing = trailing
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"schema declares a field twice: {names}")

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def check_version(self, version: int, what: str) -> None:
        if version not in self.valid:
            hi = "+" if self.valid.hi is None else f"-{self.valid.hi}"
            raise ValueError(f"{what} has no version {version!r}; valid versions: {self.valid.lo}{hi}")

    def regular(self, version: int) -> list[Field]:
        """The fields a version writes in order (not tagged)."""
        return [f for f in self.fields if version in f.versions and not (self.is_flexible(version) and f.is_tagged(version))]

    def tagged(self, version: int) -> list[Field]:
        """The tagged fields of a flexible version, by tag."""
        if not self.is_flexible(version):
            return []
        return sorted((f for f in self.fields if version in f.versions and f.is_tagged(version)), key=lambda f: f.tag)

    def describe(self, version: int = 0) -> str:
        """The layout as one line of ``name:type`` words, for docs and error messages."""
        flexible = self.is_flexible(version)
        words = [f"{f.name}:{getattr(f.type, '__name__', None) or f.type.describe(f.compact(version, flexible))}"
                 for f in self.regular(version)]
        tags = self.tagged(version)
        if flexible:
            words.append("tagged_fields" + (f"({', '.join(f'{f.tag}={f.name}' for f in tags)})" if tags else ""))
        return " ".join(words)


class Struct:
    """Base of a declared class whose values are frozen dataclasses (compared with their type)."""

    __slots__ = ()
    SCHEMA: ClassVar[Schema]
    MALFORMED: ClassVar[type[Exception]] = MalformedResponseError
    """What a layout violation raises when decoding (a request's class sets MalformedRequestError)."""

    @classmethod
    def codec(cls, version: int = 0) -> codegen.Codec:
        """The compiled codec of ``version``: compiled on first use, then kept (two threads may both
        compile it; the codecs are equal and one is kept). Codecs hold no state: thread-safe."""
        found = cls.__dict__["_codecs"].get(version)
        if found is None:
            cls.SCHEMA.check_version(version, cls.__name__)
            found = cls.__dict__["_codecs"][version] = codegen.compile_codec(cls, version)
        return found


class Record(tuple):
    """Base of a declared class whose values are named tuples: small nested values that callers
    unpack (``for broker_id, host, port in response.brokers``); equal to a tuple of the same values."""

    __slots__ = ()
    SCHEMA: ClassVar[Schema]
    MALFORMED: ClassVar[type[Exception]] = MalformedResponseError
    codec = Struct.__dict__["codec"]


def _defaults(schema: Schema) -> list[tuple[str, object]]:
    out = []
    for f in schema.fields:
        default = f.default
        if default is REQUIRED and schema.versioned:
            default = f.type_default()
        out.append((f.name, default))
    return out


def declare(cls: type) -> type:
    """Make ``cls`` (a subclass of :class:`Struct` or :class:`Record` with a ``SCHEMA``) the value
    class of its schema, and give it its codec. Returns the new class (as ``dataclass`` does)."""
    schema = cls.SCHEMA if isinstance(cls.SCHEMA, Schema) else Schema(*cls.SCHEMA)
    fields = _defaults(schema)
    body = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
    body["SCHEMA"] = schema
    body["_codecs"] = {}
    required = [n for n, d in fields if d is REQUIRED]
    if required and fields[len(required) - 1][0] != required[-1]:
        raise TypeError(f"{cls.__name__}: required field {required[-1]!r} after a field with a default")
    if issubclass(cls, Record):
        given = [d for _n, d in fields if d is not REQUIRED]
        base = collections.namedtuple(f"{cls.__name__}Tuple", [n for n, _d in fields], defaults=given or None,
                                      module=cls.__module__)
        body["__slots__"] = ()
        new = type(cls.__name__, (base, *cls.__bases__), body)
    else:
        for name, default in fields:
            body.pop(name, None)
            if default is not REQUIRED:
                body[name] = default
        body["__annotations__"] = {name: object for name, _d in fields}
        body.pop("__slots__", None)
        new = dataclasses.dataclass(frozen=True, slots=True)(type(cls.__name__, cls.__bases__, body))
    new.__qualname__ = cls.__qualname__
    if not schema.versioned:
        codegen.bind(new, new.codec(0))
    return new

