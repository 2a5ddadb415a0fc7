"""Read the event header (time, server, service, session, seq) out of a framed payload, fast.

Tiers that move messages without decoding them (the mirror) still count them per
event-time window, so they read each message's ``header``. Framing is
:mod:`ingest.events.envelope`'s: ``0x00``, schema id (int32 big-endian), Avro binary.

Fast path: when the writer schema's **first** field is ``header`` of record
``ingest.events.EventHeader`` with its five fields in the documented order (every
example schema, and every schema the event producer writes), the header is the
first bytes of the Avro body, so it is decoded directly: ``time`` and ``seq`` are
zigzag varint longs, ``server``, ``service`` and ``session`` a zigzag varint length
then UTF-8 bytes. No fastavro call, no record dict. :meth:`HeaderReader.time_of`
decodes only ``time`` (what window counting needs).

Fallback: a schema that has the header elsewhere is decoded whole with fastavro
(schemaless); a schema without a header, an unknown schema id, an unframed payload
or bytes that do not decode give ``None``. The outcome per schema id is cached
(ids are immutable): the registry is asked once per id, unknown ids included.

Concurrency contract: thread-safe (the cache is a dict filled idempotently).
"""
from __future__ import annotations

import io
import logging
from typing import Any, NamedTuple

from ingest.errors import SchemaNotFoundError
from ingest.events.envelope import HEADER_FIELD, HEADER_RECORD, HEADER_SCHEMA, MAGIC_BYTE, PREFIX_SIZE, has_header
from ingest.events.registry_client import RegistryClient

log = logging.getLogger(__name__)

_FAST = 1            # cache value: header is the first field, decode the bytes directly
_NONE = 0            # cache value: no header (or unknown id)
_TIME_KEY_END = PREFIX_SIZE + 6  # payload[1:11]: schema id + the 6 bytes of a ms time varint
_TIME_CACHE_SIZE = 1 << 16       # cleared when full (a cache, not state)
_FIELDS = [(f["name"], f["type"]) for f in HEADER_SCHEMA["fields"]]


class EventHeader(NamedTuple):
    """The ``header`` record of an event."""

    time: int
    server: str
    service: str
    session: str
    seq: int


def header_is_first(schema: Any) -> bool:
    """True when ``schema``'s first field is ``header`` of record EventHeader with the documented fields."""
    if not isinstance(schema, dict) or schema.get("type") != "record" or not schema.get("fields"):
        return False
    first = schema["fields"][0]
    t = first.get("type")
    if first.get("name") != HEADER_FIELD or not isinstance(t, dict) or t.get("type") != "record":
        return False
    name = t.get("name", "")
    full = name if "." in name else f"{t.get('namespace', '')}.{name}"
    fields = [(f.get("name"), f.get("type")) for f in t.get("fields", [])]
    return full == HEADER_RECORD and fields == _FIELDS


def _varint(p: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint long at ``pos``: (value, position after it)."""
    b = p[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = p[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def decode_header_at(p: bytes, pos: int) -> EventHeader:
    """The EventHeader whose Avro encoding starts at ``p[pos]`` (inlined: this is the hot path).

    Raises:
        ValueError / IndexError / UnicodeDecodeError: the bytes are not an EventHeader.
    """
    b = p[pos]  # time: zigzag varint
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = p[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    time_ms = (n >> 1) ^ -(n & 1)
    strings = []
    for _ in (0, 1, 2):  # server, service, session: zigzag varint length + UTF-8
        n = p[pos]
        if n < 0x80 and not n & 1:  # one-byte length (up to 63 bytes): the common case
            end = pos + 1 + (n >> 1)
            pos += 1
        else:
            n, pos = _varint(p, pos)
            if n < 0:
                raise ValueError(f"negative string length {n}")
            end = pos + n
        if end > len(p):
            raise ValueError("string runs past the payload")
        strings.append(p[pos:end].decode("utf-8"))
        pos = end
    b = p[pos]  # seq: zigzag varint
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = p[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return _new_header(EventHeader, (time_ms, strings[0], strings[1], strings[2], (n >> 1) ^ -(n & 1)))


_new_header = tuple.__new__  # EventHeader without the Python-level __new__ call


class HeaderReader:
    """Reads headers of framed payloads (see the module docstring)."""

    def __init__(self, registry: RegistryClient) -> None:
        self.registry = registry
        self._kinds: dict[bytes, Any] = {}  # 4 schema-id bytes -> _FAST, _NONE or a parsed fastavro schema
        self.unreadable = 0  # payloads of a known header schema whose bytes did not decode
        self._times: dict[bytes, int] = {}  # schema id + first 6 body bytes -> header.time (fast schemas)

    def _kind(self, id_bytes: bytes) -> Any:
        kind = self._kinds.get(id_bytes)
        if kind is None:
            kind = self._kinds[id_bytes] = self._lookup(int.from_bytes(id_bytes, "big", signed=True))
        return kind

    def _lookup(self, schema_id: int) -> Any:
        """Raises RegistryUnavailableError (not cached: the next payload asks again)."""
        try:
            schema = self.registry.get_schema(schema_id)
        except SchemaNotFoundError:
            log.warning("schema id %d is not in registry %s: its messages have no readable header",
                        schema_id, self.registry.url)
            return _NONE
        if header_is_first(schema):
            return _FAST
        if has_header(schema):
            import fastavro  # deferred: only schemas with the header elsewhere need it
            return fastavro.parse_schema(schema)
        log.info("schema id %d has no field %r of record %s: its messages have no readable header",
                 schema_id, HEADER_FIELD, HEADER_RECORD)
        return _NONE

    def read(self, payload: bytes | bytearray | memoryview) -> EventHeader | None:
        """The header of ``payload``, or None (not framed, no header in its schema, unknown id, garbled).

        Raises:
            RegistryUnavailableError: the schema of a new id cannot be fetched (retry later).
        """
        if not isinstance(payload, bytes):
            payload = bytes(payload)
        if len(payload) <= PREFIX_SIZE or payload[0] != MAGIC_BYTE:
            return None
        kind = self._kinds.get(payload[1:PREFIX_SIZE])
        if kind is None:
            kind = self._kind(payload[1:PREFIX_SIZE])
        try:
            if kind == _FAST:
                return decode_header_at(payload, PREFIX_SIZE)
            if kind == _NONE:
                return None
            return self._slow(payload, kind)
        except (ValueError, IndexError, UnicodeDecodeError, EOFError, TypeError, KeyError):
            self.unreadable += 1
            return None

    def time_of(self, payload: bytes) -> int | None:
        """``header.time`` of ``payload`` (bytes), or None like :meth:`read`.

        The hot path of window counting: a payload whose schema id and first 6 body bytes were
        seen before costs one slice and one dict look-up (a millisecond time since 2004 is a
        6-byte varint, and messages of the same millisecond share those bytes); otherwise only
        the time varint is decoded.
        """
        if not payload or payload[0]:
            return None
        t = self._times.get(payload[1:_TIME_KEY_END])
        if t is not None:
            return t
        return self._time_slow(payload)

    def _time_slow(self, payload: bytes) -> int | None:
        if len(payload) <= PREFIX_SIZE:
            return None
        kind = self._kinds.get(payload[1:PREFIX_SIZE])
        if kind is None:
            kind = self._kind(payload[1:PREFIX_SIZE])
        if kind == _FAST:
            try:
                t, pos = _varint(payload, PREFIX_SIZE)
            except IndexError:
                self.unreadable += 1
                return None
            if pos <= _TIME_KEY_END and len(payload) >= _TIME_KEY_END:
                # the key holds every byte of the varint, so it determines the time
                if len(self._times) >= _TIME_CACHE_SIZE:
                    self._times.clear()
                self._times[payload[1:_TIME_KEY_END]] = t
            return t
        if kind == _NONE:
            return None
        h = self.read(payload)
        return None if h is None else h.time

    def _slow(self, payload: bytes, parsed: Any) -> EventHeader | None:
        import fastavro  # deferred (see _lookup)
        record = fastavro.schemaless_reader(io.BytesIO(payload[PREFIX_SIZE:]), parsed)
        h = record.get(HEADER_FIELD)
        if not isinstance(h, dict):
            return None
        return EventHeader(int(h["time"]), h["server"], h["service"], h["session"], int(h["seq"]))
