"""The example event schemas in ``conf/schemas/*.avsc`` and schema text helpers.

Every event schema is an Avro record with a field ``header`` of record
``ingest.events.EventHeader`` (see :mod:`ingest.events.envelope`). Schemas
are plain JSON dicts here; :func:`canonical` gives the form the registry
compares and stores, so the same schema written twice gets the same id.
"""
from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastavro

from ingest.errors import SchemaError

log = logging.getLogger(__name__)

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "conf" / "schemas"

PAGE_VIEW = "page_view"
CLICK = "click"
SERVICE_METRIC = "service_metric"
MONITORING_EVENT = "monitoring_event"
SCHEMA_NAMES = (PAGE_VIEW, CLICK, SERVICE_METRIC, MONITORING_EVENT)

# Attributes that do not change how data is read: dropped before comparing.
_IGNORED_ATTRIBUTES = frozenset({"doc"})


@lru_cache(maxsize=None)
def _load_text(name: str) -> str:
    path = SCHEMA_DIR / f"{name}.avsc"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchemaError(
            f"no schema named {name!r} ({path}: {exc.strerror}); known: {', '.join(SCHEMA_NAMES)}"
        ) from exc


def load_schema(name: str) -> dict:
    """The schema ``conf/schemas/<name>.avsc`` as a fresh dict (validated)."""
    schema = parse_schema_text(_load_text(name), source=f"{name}.avsc")
    return schema


def schema_for_topic(topic: str, audit_topic: str = "audit-monitoring") -> str:
    """The example schema name for a topic: by name (clicks, metrics, audit), page views otherwise."""
    t = topic.lower()
    if topic == audit_topic or "monitoring" in t:
        return MONITORING_EVENT
    if "click" in t:
        return CLICK
    if "metric" in t:
        return SERVICE_METRIC
    return PAGE_VIEW


def parse_schema_text(text: str | dict | list, *, source: str = "schema") -> Any:
    """Parse and validate an Avro schema given as JSON text or an already-parsed value.

    Raises:
        SchemaError: the text is not JSON or not a valid Avro schema (with the reason).
    """
    if isinstance(text, str):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{source} is not JSON: {exc}") from exc
    else:
        value = text
    try:
        fastavro.parse_schema(value, _write_hint=False)
    except Exception as exc:  # fastavro raises SchemaParseException, ValueError, KeyError, TypeError
        raise SchemaError(f"{source} is not a valid Avro schema: {exc}") from exc
    return value


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"type"} and isinstance(value["type"], str):
            return value["type"]  # {"type": "string"} is "string"
        # default values are data, not schema: kept verbatim
        return {k: (v if k == "default" else _strip(v)) for k, v in value.items() if k not in _IGNORED_ATTRIBUTES}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def canonical(schema: str | dict | list) -> str:
    """The registry's canonical text: compact JSON, sorted keys, docs dropped.

    Unlike Avro's Parsing Canonical Form it keeps defaults and aliases,
    because they change compatibility.
    """
    # A bare name ("long", "null", "com.x.Named") is an already-parsed schema, not JSON text:
    # parsing it as JSON fails ("long") or changes it ("null" -> None). JSON text never is one.
    value = parse_schema_text(schema) if isinstance(schema, str) and not _BARE_NAME.fullmatch(schema) else schema
    return json.dumps(_strip(value), sort_keys=True, separators=(",", ":"))


_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def record_name(schema: Any) -> str:
    """Full name of a record schema (``namespace.name``), or the type for others."""
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        ns = schema.get("namespace")
        return name if "." in name or not ns else f"{ns}.{name}"
    return json.dumps(schema) if not isinstance(schema, str) else schema
