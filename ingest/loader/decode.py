"""Decoding payloads in a task: framing check, writer schema per id (cached), Avro body.

Thin over :class:`ingest.events.serde.EventDeserializer` (which owns the registry
lookups and the error messages) with one addition the writers need: the Avro
body bytes of a valid payload. They are exactly the binary encoding of the
record under its writer schema, so Avro output appends them to container
blocks instead of re-encoding the decoded record (the deserializer has checked
that the body decodes completely, so the file stays valid).

Framing (fixed by the design): ``magic:int8 = 0`` ``schema_id:int32`` ``avro body``.
"""
from __future__ import annotations

import io
import struct
from typing import Any

import fastavro

from ingest.errors import EventDecodeError

FRAME = struct.Struct(">bi")
"""magic byte 0x00, schema id"""


class PayloadDecoder:
    """Decodes framed payloads; not thread-safe (one per task)."""

    def __init__(self, deserializer) -> None:
        self._deser = deserializer
        self._schemas: dict[int, dict] = {}
        self._parsed: dict[int, Any] = {}

    def decode(self, payload: bytes, *, topic: str, offset: int) -> tuple[int, dict[str, Any]]:
        """(schema id, record). Raises ``EventDecodeError`` naming topic, offset and schema id.

        The hot loop of a task: a valid payload of a known schema is decoded here
        directly (one ``schemaless_reader`` call); anything unusual goes through the
        deserializer, which owns the registry lookup and the exact error messages.
        """
        if len(payload) > FRAME.size and payload[0] == 0:
            schema_id = FRAME.unpack_from(payload)[1]
            parsed = self._parsed.get(schema_id)
            if parsed is not None:
                buf = io.BytesIO(memoryview(payload)[FRAME.size:])
                try:
                    record = fastavro.schemaless_reader(buf, parsed, None)
                except Exception:
                    record = None
                if record is not None and buf.tell() == len(payload) - FRAME.size:
                    return schema_id, record
        record = self._deser.deserialize(payload, topic=topic, offset=offset)  # raises the precise error
        schema_id = FRAME.unpack_from(payload)[1]
        if schema_id not in self._parsed:
            self._parsed[schema_id] = fastavro.parse_schema(self.writer_schema(schema_id, payload, topic=topic,
                                                                                offset=offset))
        return schema_id, record

    def writer_schema(self, schema_id: int, payload: bytes, *, topic: str, offset: int) -> dict:
        schema = self._schemas.get(schema_id)
        if schema is None:
            schema = self._schemas[schema_id] = self._deser.writer_schema(payload, topic=topic, offset=offset)[1]
        return schema

    @staticmethod
    def body(payload: bytes) -> memoryview:
        """The Avro body of a payload already decoded successfully."""
        return memoryview(payload)[FRAME.size:]
