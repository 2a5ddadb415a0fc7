"""Avro schema -> Spark SQL types, and a decoded Avro record -> a Spark row of those types.

The mapping is Spark's own ``from_avro`` one (spark-avro's ``SchemaConverters``),
for the types an event schema uses:

==========================================  =====================================
Avro                                        Spark
==========================================  =====================================
boolean, int, long, float, double           boolean, int, bigint, float, double
string, enum; ``uuid`` string               string
bytes, fixed                                binary
``decimal`` (bytes or fixed)                decimal(precision, scale)
``date``                                    date
``timestamp-millis`` / ``-micros``          timestamp
``local-timestamp-millis`` / ``-micros``    timestamp_ntz
record                                      struct (same field order)
array, map                                  array, map<string, ...>
``["null", T]``                             T, nullable
==========================================  =====================================

A non-null Avro type is a non-nullable Spark field, as in ``from_avro``. Not
supported (a :class:`~ingest.errors.SchemaError` naming the field): unions of
two or more non-null types, ``time-millis``/``time-micros``, recursive records.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ingest.errors import SchemaError

log = logging.getLogger(__name__)

_PRIMITIVE = {"boolean": "BooleanType", "int": "IntegerType", "long": "LongType", "float": "FloatType",
              "double": "DoubleType", "string": "StringType", "bytes": "BinaryType"}
_TIMESTAMPS = {"timestamp-millis": "TimestampType", "timestamp-micros": "TimestampType",
               "local-timestamp-millis": "TimestampNTZType", "local-timestamp-micros": "TimestampNTZType"}

Convert = Callable[[Any], Any]


def _identity(v: Any) -> Any:
    return v


def _to_str(v: Any) -> Any:
    return None if v is None else str(v)


class _Mapper:
    """Walks one schema; remembers named types (a later field may name an earlier record, enum or fixed)."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.active: set[str] = set()

    def _remember(self, t: dict, ns: str) -> str:
        name = t.get("name", "")
        full = name if "." in name else (f"{t.get('namespace', ns)}.{name}" if t.get("namespace", ns) else name)
        self.named[full] = t
        self.named.setdefault(name.rsplit(".", 1)[-1], t)
        return full

    def spark(self, t: Any, where: str, ns: str = "") -> tuple[Any, bool, Convert]:
        """(Spark DataType, nullable, value converter) of Avro type ``t`` at field path ``where``."""
        from pyspark.sql import types as T  # deferred: the module is importable without pyspark for docs

        if isinstance(t, str) and t in _PRIMITIVE:
            return getattr(T, _PRIMITIVE[t])(), False, _identity
        if t == "null":
            return T.NullType(), True, _identity
        if isinstance(t, str):
            target = self.named.get(f"{ns}.{t}") or self.named.get(t)
            if target is None:
                raise SchemaError(f"field {where}: unknown named type {t!r}")
            if any(target is self.named.get(a) for a in self.active):
                raise SchemaError(f"field {where}: recursive type {t} has no Spark type")
            return self.spark(target, where, ns)
        if isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if len(branches) != 1:
                raise SchemaError(f"field {where}: union {t!r} is not supported; allowed are a single type "
                                  f"or [\"null\", T]")
            dtype, _, conv = self.spark(branches[0], where, ns)
            return dtype, True, (lambda v, c=conv: None if v is None else c(v))
        if not isinstance(t, dict):
            raise SchemaError(f"field {where}: {t!r} is not an Avro type")
        kind, logical = t.get("type"), t.get("logicalType")
        if logical in _TIMESTAMPS and kind == "long":
            return getattr(T, _TIMESTAMPS[logical])(), False, _identity
        if logical == "date" and kind == "int":
            return T.DateType(), False, _identity
        if logical == "decimal" and kind in ("bytes", "fixed"):
            if kind == "fixed":
                self._remember(t, ns)
            return T.DecimalType(int(t["precision"]), int(t.get("scale", 0))), False, _identity
        if logical == "uuid" and kind == "string":
            return T.StringType(), False, _to_str
        if logical in ("time-millis", "time-micros"):
            raise SchemaError(f"field {where}: logical type {logical} has no Spark type; not supported")
        if kind == "record":
            return self._record(t, where, ns)
        if kind == "enum":
            self._remember(t, ns)
            return T.StringType(), False, _identity
        if kind == "fixed":
            self._remember(t, ns)
            return T.BinaryType(), False, _identity
        if kind == "array":
            dtype, nullable, conv = self.spark(t["items"], f"{where}[]", ns)
            return T.ArrayType(dtype, nullable), False, (lambda v, c=conv: [c(x) for x in v])
        if kind == "map":
            dtype, nullable, conv = self.spark(t["values"], f"{where}{{}}", ns)
            return (T.MapType(T.StringType(), dtype, nullable), False,
                    (lambda v, c=conv: {k: c(x) for k, x in v.items()}))
        return self.spark(kind, where, ns)  # {"type": "long"} and the like

    def _record(self, t: dict, where: str, ns: str) -> tuple[Any, bool, Convert]:
        from pyspark.sql import types as T  # deferred, see spark()

        full = self._remember(t, ns)
        inner_ns = full.rpartition(".")[0]
        self.active.add(full)
        fields, convs = [], []
        for f in t.get("fields", []):
            dtype, nullable, conv = self.spark(f["type"], f"{where}.{f['name']}" if where else f["name"], inner_ns)
            fields.append(T.StructField(f["name"], dtype, nullable))
            convs.append((f["name"], conv))
        self.active.discard(full)

        def convert(record: dict, _c=tuple(convs)) -> tuple:
            return tuple(c(record[name]) for name, c in _c)

        return T.StructType(fields), False, convert


def record_type(schema: dict) -> tuple[Any, Convert]:
    """(Spark StructType, converter dict -> tuple) of a record schema (the top level of an event).

    Raises:
        SchemaError: ``schema`` is not a record, or has a field of a type without a Spark type.
    """
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaError(f"schema {str(schema)[:80]!r} is not an Avro record; this source reads record events")
    struct, _, convert = _Mapper()._record(schema, "", "")
    return struct, convert
