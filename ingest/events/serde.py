"""Events to framed bytes and back: the envelope prefix + Avro binary (fastavro schemaless).

The framing (magic byte + schema id) is :mod:`ingest.events.envelope`'s; this module
only adds the registry and Avro.

The serializer registers its schema once (subject ``<topic>-value``) and
frames every record with the id. The deserializer reads the id, fetches the
writer schema once per id (cached: ids are immutable) and resolves it against
the reader schema when one is given, by Avro's resolution rules.

Concurrency contract: both classes are safe to share between threads (the
parsed-schema caches are filled idempotently; each call uses its own buffer).
"""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

import fastavro

from ingest.errors import EventDecodeError, SchemaError, SchemaNotFoundError
from ingest.events.envelope import frame, unframe
from ingest.events.registry_client import RegistryClient

log = logging.getLogger(__name__)


def subject_for_topic(topic: str) -> str:
    """Registry subject of a topic's values."""
    return f"{topic}-value"


def _parse(schema: Any) -> Any:
    return fastavro.parse_schema(schema)  # parsed once; the write hint stops fastavro re-parsing per call


class EventSerializer:
    """Serializes records of one schema, registered under ``subject``."""

    def __init__(self, registry: RegistryClient, subject: str, schema: dict) -> None:
        self.subject = subject
        self.schema = schema
        self.schema_id = registry.register(subject, schema)
        self._parsed = _parse(schema)

    def serialize(self, record: dict) -> bytes:
        """Framed Avro bytes of ``record``.

        Raises:
            SchemaError: the record does not match the schema (names the problem).
        """
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(
                f"record does not match schema id {self.schema_id} ({self.subject}): {exc}") from exc
        return frame(self.schema_id, buf.getvalue())


class EventDeserializer:
    """Decodes framed payloads of any registered schema, optionally into a reader schema."""

    def __init__(self, registry: RegistryClient, reader_schema: dict | None = None) -> None:
        self.registry = registry
        self.reader_schema = reader_schema
        self._reader = _parse(reader_schema) if reader_schema is not None else None
        self._writers: dict[int, Any] = {}

    def writer_schema(self, payload: bytes, *, topic: str = "?", offset: int = -1) -> tuple[int, dict]:
        """(schema id, writer schema) of a framed payload."""
        schema_id, _ = unframe(payload, topic=topic, offset=offset)
        return schema_id, self._lookup(schema_id, topic, offset)[0]

    def _lookup(self, schema_id: int, topic: str, offset: int) -> tuple[dict, Any]:
        hit = self._writers.get(schema_id)
        if hit is None:
            try:
                schema = self.registry.get_schema(schema_id)
            except SchemaNotFoundError as exc:
                raise EventDecodeError(
                    f"topic {topic} offset {offset} schema id {schema_id}: unknown schema id "
                    f"(not in registry {self.registry.url})") from exc
            hit = (schema, _parse(schema))
            self._writers[schema_id] = hit
        return hit

    def deserialize(self, payload: bytes, *, topic: str = "?", offset: int = -1) -> dict:
        """The record in ``payload``.

        Raises:
            EventDecodeError: wrong magic byte, unknown schema id, or bytes that do not
                decode with the writer schema (or do not resolve to the reader schema);
                the message names topic, offset and schema id.
            RegistryUnavailableError: the registry cannot be reached (retriable; not the
                message's fault).
        """
        schema_id, body = unframe(payload, topic=topic, offset=offset)
        _, writer = self._lookup(schema_id, topic, offset)
        buf = io.BytesIO(body)
        try:
            record = fastavro.schemaless_reader(buf, writer, self._reader)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, SchemaResolutionError...
            raise EventDecodeError(
                f"topic {topic} offset {offset} schema id {schema_id}: Avro body of {len(body)} bytes "
                f"does not decode: {type(exc).__name__}: {exc}") from exc
        if buf.tell() != len(body):
            raise EventDecodeError(
                f"topic {topic} offset {offset} schema id {schema_id}: {len(body) - buf.tell()} bytes "
                f"left over after the record (payload corrupt or written with another schema)")
        return record


class _OffsetMessage(Protocol):
    offset: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Decoded:
    """One message's outcome: ``record`` or ``error`` (EventDecodeError), with its offset."""

    offset: int
    record: dict | None
    error: EventDecodeError | None = None


def decode_each(messages: Iterable[_OffsetMessage], deserializer: EventDeserializer, topic: str) -> Iterator[Decoded]:
    """Decode messages one by one; a message that does not decode is yielded as an error
    (naming topic, offset, schema id) and the next one is decoded as usual."""
    for m in messages:
        try:
            yield Decoded(m.offset, deserializer.deserialize(m.payload, topic=topic, offset=m.offset))
        except EventDecodeError as exc:
            log.warning("%s", exc)
            yield Decoded(m.offset, None, exc)
