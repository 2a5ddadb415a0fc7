"""Schema references (a named type defined in another subject's version) and how a schema is stored.

A reference is Confluent's ``{"name": "com.acme.Address", "subject": "address-value",
"version": 1}``: the schema may use the type ``com.acme.Address`` without defining it;
the definition is the schema of that subject's version (``version`` -1: the latest,
fixed to its number when the schema is registered). References nest: a referenced
schema may have references of its own.

Stored text of a schema (what ``ids/<id>.json`` or the id znode holds, and what ids
are deduplicated by)::

    <canonical schema text>                                   no references (every older store)
    {"references":[{"name":..,"subject":..,"version":N}],"schema":"<canonical text>"}

The second form can never be an Avro schema (a schema object needs ``type``), so the
two never collide, and one schema text with two different reference lists gets two
ids, as in Confluent.

:func:`inline` turns a schema plus the definitions its references resolve to into one
self-contained schema, which fastavro parses and the compatibility checker compares
without knowing about references; the registry client hands such a schema to decoders.
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable

from ingest.errors import RegistryHttpError

log = logging.getLogger(__name__)

MAX_SCHEMA_DEPTH = 256
"""JSON nesting levels a schema may have. Parsing, canonical form and the compatibility
checker recurse once per level; past Python's stack a schema would be a crash, not a
verdict. A record 64 deep or an array 256 deep fits; real schemas nest far less."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})


@dataclass(frozen=True)
class Reference:
    """One entry of a schema's ``references``."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict:
        return {"name": self.name, "subject": self.subject, "version": self.version}


def parse_references(value: Any) -> list[Reference]:
    """The ``references`` of a request body (absent or null: none).

    Raises:
        RegistryHttpError: 42201 naming the entry that is not ``{name, subject, version}``.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise RegistryHttpError(422, 42201, f"Invalid schema: 'references' must be a list, got {type(value).__name__}")
    out = []
    for entry in value:
        ok = (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]
              and isinstance(entry.get("subject"), str) and entry["subject"]
              and isinstance(entry.get("version"), int) and not isinstance(entry["version"], bool)
              and (entry["version"] == -1 or entry["version"] >= 1))
        if not ok:
            raise RegistryHttpError(
                422, 42201, f"Invalid schema: invalid reference {json.dumps(entry)[:200]}: a reference is "
                "{\"name\": type name, \"subject\": subject, \"version\": N >= 1 or -1 for the latest}")
        out.append(Reference(entry["name"], entry["subject"], entry["version"]))
    return out


def stored_text(canonical_text: str, references: Iterable[Reference]) -> str:
    """What the store keeps for a schema (module docstring)."""
    refs = [r.to_json() for r in references]
    if not refs:
        return canonical_text
    return json.dumps({"references": refs, "schema": canonical_text}, sort_keys=True, separators=(",", ":"))


def split_stored(text: str) -> tuple[str, list[Reference]]:
    """(schema text, references) of a stored text."""
    if text.startswith('{"references":'):
        value = json.loads(text)
        return value["schema"], [Reference(r["name"], r["subject"], int(r["version"])) for r in value["references"]]
    return text, []


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def named_definitions(schema: Any) -> dict[str, Any]:
    """Every named type a schema defines: full name -> definition with its namespace made explicit."""
    out: dict[str, Any] = {}
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        s, ns = stack.pop()
        if isinstance(s, list):
            stack.extend((b, ns) for b in s)
        elif isinstance(s, dict):
            t = s.get("type")
            if t in _NAMED and isinstance(s.get("name"), str):
                full = _full(s["name"], s.get("namespace", ns))
                inner = full.rpartition(".")[0]
                out.setdefault(full, _absolute(s, full))
                if t in ("record", "error"):
                    stack.extend((f.get("type"), inner) for f in s.get("fields", []) if isinstance(f, dict))
            elif t == "array":
                stack.append((s.get("items"), ns))
            elif t == "map":
                stack.append((s.get("values"), ns))
            elif isinstance(t, (dict, list)):
                stack.append((t, ns))
    return out


def _absolute(definition: dict, full: str) -> dict:
    """The definition named by its full name, so that it means the same wherever it is placed."""
    namespace, _, name = full.rpartition(".")
    out = dict(definition)
    out["name"] = name
    out["namespace"] = namespace  # "" = the null namespace, not the enclosing one
    return out


def inline(schema: Any, definitions: dict[str, Any]) -> Any:
    """``schema`` with the first use of each name from ``definitions`` replaced by its definition.

    ``definitions`` are the named types the references resolve to (full name ->
    definition, e.g. :func:`named_definitions` of each referenced schema). Later uses
    stay names, which then refer to the inlined definition, as Avro resolves names in
    order. Names the schema defines itself are left alone.
    """
    defined: set[str] = set()

    def walk(s: Any, ns: str) -> Any:
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return s
            full = s if s in definitions and "." in s else _full(s, ns)
            if full not in definitions and s in definitions:
                full = s
            if full in definitions and full not in defined:
                defined.add(full)
                return walk_named(copy.deepcopy(definitions[full]), "")
            return s
        if isinstance(s, list):
            return [walk(b, ns) for b in s]
        if isinstance(s, dict):
            t = s.get("type")
            if t in _NAMED:
                return walk_named(s, ns)
            if t == "array":
                return {**s, "items": walk(s.get("items"), ns)}
            if t == "map":
                return {**s, "values": walk(s.get("values"), ns)}
            if isinstance(t, (dict, list, str)) and t not in _PRIMITIVES:
                return {**s, "type": walk(t, ns)}
        return s

    def walk_named(s: dict, ns: str) -> dict:
        full = _full(s["name"], s.get("namespace", ns))
        defined.add(full)
        if s.get("type") not in ("record", "error"):
            return s
        inner = full.rpartition(".")[0]
        return {**s, "fields": [{**f, "type": walk(f.get("type"), inner)} if isinstance(f, dict) else f
                                for f in s.get("fields", [])]}

    return walk(schema, "")
