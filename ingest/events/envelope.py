"""Payload framing and the event header every event carries.

Framing (the one most Avro tooling knows)::

    magic:int8 = 0x00   schema_id:int32 (big-endian)   body: Avro binary (schemaless)

The header record ``ingest.events.EventHeader`` is the field ``header`` of
every event schema::

    time:long (event time, ms)  server:string  service:string
    session:string (new per producer start)  seq:long (0, 1, 2, ... in the session)

``(session, seq)`` identifies a message uniquely. The producer library fills
the header (:class:`HeaderFactory`); the application fills the rest.
"""
from __future__ import annotations

import itertools
import socket
import struct
import threading
import uuid
from dataclasses import dataclass

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import EventDecodeError

MAGIC_BYTE = 0
PREFIX = struct.Struct(">bi")  # magic:int8 schema_id:int32
PREFIX_SIZE = PREFIX.size
"""Bytes before the Avro body. Hot loops slice with it directly (``payload[:PREFIX_SIZE]`` is
the magic byte + schema id, ``payload[PREFIX_SIZE:]`` the body) instead of calling :func:`unframe`."""

HEADER_FIELD = "header"
HEADER_RECORD = "ingest.events.EventHeader"
HEADER_SCHEMA: dict = {
    "type": "record",
    "name": "EventHeader",
    "namespace": "ingest.events",
    "fields": [
        {"name": "time", "type": "long"},
        {"name": "server", "type": "string"},
        {"name": "service", "type": "string"},
        {"name": "session", "type": "string"},
        {"name": "seq", "type": "long"},
    ],
}


def frame(schema_id: int, body: bytes) -> bytes:
    """``0x00`` + schema id + Avro body."""
    return PREFIX.pack(MAGIC_BYTE, schema_id) + body


def unframe(payload: bytes | memoryview, *, topic: str = "?", offset: int = -1) -> tuple[int, memoryview]:
    """Split a framed payload into (schema id, Avro body).

    Raises:
        EventDecodeError: shorter than :data:`PREFIX_SIZE` bytes or a magic byte other than :data:`MAGIC_BYTE`.
    """
    view = memoryview(payload)
    if len(view) < PREFIX_SIZE:
        raise EventDecodeError(
            f"topic {topic} offset {offset} schema id n/a: payload of {len(view)} bytes is shorter "
            f"than the {PREFIX_SIZE}-byte envelope prefix ({MAGIC_BYTE:#04x} + schema id)"
        )
    magic, schema_id = PREFIX.unpack_from(view, 0)
    if magic != MAGIC_BYTE:
        raise EventDecodeError(
            f"topic {topic} offset {offset} schema id n/a: magic byte {magic & 0xFF:#04x}, "
            f"expected {MAGIC_BYTE:#04x} (payload is not a framed Avro event)"
        )
    return schema_id, view[PREFIX_SIZE:]


@dataclass(frozen=True)
class ProducerIdentity:
    """Who produces: server, service, and the session id of this producer start."""

    server: str
    service: str
    session: str

    @classmethod
    def new(cls, service: str, server: str | None = None) -> "ProducerIdentity":
        return cls(server=server or socket.gethostname(), service=service, session=str(uuid.uuid4()))


class HeaderFactory:
    """Makes headers with consecutive ``seq`` numbers for one producer session.

    Thread-safe: ``seq`` values are unique and gapless across threads.
    """

    def __init__(self, identity: ProducerIdentity, clock: Clock = SYSTEM_CLOCK) -> None:
        self.identity = identity
        self._clock = clock
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def next(self, time_ms: int | None = None) -> dict:
        """A new header; ``time_ms`` defaults to the clock's now."""
        with self._lock:
            seq = next(self._seq)
        return {
            "time": self._clock.time_ms() if time_ms is None else int(time_ms),
            "server": self.identity.server,
            "service": self.identity.service,
            "session": self.identity.session,
            "seq": seq,
        }


def has_header(schema: dict) -> bool:
    """True when a record schema has the ``header`` field of record EventHeader."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    for f in schema.get("fields", []):
        if f.get("name") == HEADER_FIELD:
            t = f.get("type")
            if isinstance(t, str):
                return t in (HEADER_RECORD, "EventHeader")
            if isinstance(t, dict):
                ns = t.get("namespace", "")
                full = t["name"] if "." in t.get("name", "") else f"{ns}.{t.get('name')}"
                return full == HEADER_RECORD
    return False
