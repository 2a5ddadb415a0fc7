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
from typing import Any, Iterable, NamedTuple

from ingest.errors import SchemaNotFoundError
from ingest.events.envelope import HEADER_FIELD, HEADER_RECORD, HEADER_SCHEMA, MAGIC_BYTE, PREFIX_SIZE, has_header
from ingest.events.registry_client import RegistryClient

log = logging.getLogger(__name__)

_FAST = 1            # cache value: header is the first field, decode the bytes directly
_NONE = 0            # cache value: no header (or unknown id)
TIME_PREFIX = PREFIX_SIZE + 6
"""Bytes of a payload that decide its header time (magic, schema id, a 6-byte ms time varint)."""
NEEDS_PAYLOAD = object()
""":meth:`HeaderReader.prefix_time`'s answer when the prefix does not decide the time."""
_MISS = object()
_PREFIX_CACHE_SIZE = 1 << 16  # cleared when full (a cache, not state)
_STRINGS_CACHE_SIZE = 1 << 12  # (server, service, session) of recent producer sessions
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


def decode_header_at(p: bytes, pos: int, strings_cache: dict | None = None) -> EventHeader:
    """The EventHeader whose Avro encoding starts at ``p[pos]`` (inlined: this is the hot path).

    ``strings_cache``: maps the encoded (server, service, session) bytes to the decoded
    strings; they repeat in every message of a producer session, so a hit saves three
    slices and three UTF-8 decodes (the caller bounds it).

    Raises:
        ValueError / IndexError / UnicodeDecodeError: the bytes are not an EventHeader.
    """
    size = len(p)
    if size > pos + 6 and p[pos + 5] < 0x80 and p[pos] & p[pos + 1] & p[pos + 2] & p[pos + 3] & p[pos + 4] & 0x80:
        b0, b1, b2, b3, b4, b5 = p[pos:pos + 6]  # a 6-byte time varint (ms from 2004 to 2039), unrolled
        n = (b0 & 0x7F) | (b1 & 0x7F) << 7 | (b2 & 0x7F) << 14 | (b3 & 0x7F) << 21 | (b4 & 0x7F) << 28 | b5 << 35
        time_ms = (n >> 1) ^ -(n & 1)
        pos += 6
    else:
        time_ms, pos = _varint(p, pos)
    n1 = p[pos]
    if n1 < 0x80 and not n1 & 1:  # one-byte lengths (strings up to 63 bytes): the common case
        e1 = pos + 1 + (n1 >> 1)
        n2 = p[e1]
        if n2 < 0x80 and not n2 & 1:
            e2 = e1 + 1 + (n2 >> 1)
            n3 = p[e2]
            if n3 < 0x80 and not n3 & 1:
                e3 = e2 + 1 + (n3 >> 1)
                if e3 > size:
                    raise ValueError("string runs past the payload")
                key = p[pos:e3]
                strings = strings_cache.get(key) if strings_cache is not None else None
                if strings is None:
                    strings = (p[pos + 1:e1].decode("utf-8"), p[e1 + 1:e2].decode("utf-8"),
                               p[e2 + 1:e3].decode("utf-8"))
                    if strings_cache is not None:
                        strings_cache[key] = strings
                pos = e3
                return _with_seq(p, pos, time_ms, strings)
    strings = []
    for _ in (0, 1, 2):  # server, service, session: zigzag varint length + UTF-8
        n, pos = _varint(p, pos)
        if n < 0:
            raise ValueError(f"negative string length {n}")
        end = pos + n
        if end > size:
            raise ValueError("string runs past the payload")
        strings.append(p[pos:end].decode("utf-8"))
        pos = end
    return _with_seq(p, pos, time_ms, strings)


def _with_seq(p: bytes, pos: int, time_ms: int, strings: Any) -> EventHeader:
    b = p[pos]
    if b < 0x80:
        seq = (b >> 1) ^ -(b & 1)
    else:
        seq, _ = _varint(p, pos)
    return _new_header(EventHeader, (time_ms, strings[0], strings[1], strings[2], seq))


_new_header = tuple.__new__  # EventHeader without the Python-level __new__ call


class HeaderReader:
    """Reads headers of framed payloads (see the module docstring)."""

    def __init__(self, registry: RegistryClient) -> None:
        self.registry = registry
        self._kinds: dict[bytes, Any] = {}  # 4 schema-id bytes -> _FAST, _NONE or a parsed fastavro schema
        self.unreadable = 0  # payloads of a known header schema whose bytes did not decode
        self._strings: dict[bytes, tuple[str, str, str]] = {}  # see decode_header_at
        self._prefixes: dict[bytes, Any] = {}  # payload[:TIME_PREFIX] -> time, None or NEEDS_PAYLOAD

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
                if len(self._strings) >= _STRINGS_CACHE_SIZE:
                    self._strings.clear()
                return decode_header_at(payload, PREFIX_SIZE, self._strings)
            if kind == _NONE:
                return None
            return self._slow(payload, kind)
        except (ValueError, IndexError, UnicodeDecodeError, EOFError, TypeError, KeyError):
            self.unreadable += 1
            return None

    def time_of(self, payload: bytes) -> int | None:
        """``header.time`` of ``payload`` (bytes), or None like :meth:`read`.

        The hot path of window counting: the time is looked up by the payload's first
        :data:`TIME_PREFIX` bytes (see :meth:`prefix_time`), so a payload whose prefix was seen
        before costs one slice and one dict look-up.
        """
        t = self._prefixes.get(payload[:TIME_PREFIX], _MISS)
        if t is _MISS:
            t = self.prefix_time(payload[:TIME_PREFIX])
        if t is NEEDS_PAYLOAD:
            h = self.read(payload)
            return None if h is None else h.time
        return t

    def prefix_time(self, prefix: bytes) -> Any:
        """``header.time`` of any payload that starts with ``prefix`` = ``payload[:TIME_PREFIX]``.

        The magic byte, the schema id and, for a schema with the header first, the time varint
        (6 bytes for a millisecond time between 2004 and 2039) are all in the prefix, so the
        prefix alone decides: an int, None (no readable header), or :data:`NEEDS_PAYLOAD`
        (the header is elsewhere in the record, or the varint is longer than the prefix).
        A prefix shorter than :data:`TIME_PREFIX` is a whole payload. Results are cached.

        Raises:
            RegistryUnavailableError: the schema of a new id cannot be fetched (not cached).
        """
        t = self._prefixes.get(prefix, _MISS)
        if t is not _MISS:
            return t
        t = self._resolve_prefix(prefix)
        if len(self._prefixes) >= _PREFIX_CACHE_SIZE:
            self._prefixes.clear()
        self._prefixes[prefix] = t
        return t

    def prefix_times(self, prefixes: Iterable[bytes]) -> list[Any]:
        """:meth:`prefix_time` of each prefix (one call for a whole message set; the common case inlined)."""
        cache = self._prefixes
        kinds = self._kinds
        out = []
        append = out.append
        for prefix in prefixes:
            t = cache.get(prefix, _MISS)
            if t is _MISS:
                if len(prefix) == TIME_PREFIX and prefix[0] == MAGIC_BYTE and kinds.get(prefix[1:PREFIX_SIZE]) == _FAST:
                    b0, b1, b2, b3, b4, b5 = prefix[PREFIX_SIZE:]
                    if b5 < 0x80 and b0 & b1 & b2 & b3 & b4 & 0x80:
                        n = ((b0 & 0x7F) | (b1 & 0x7F) << 7 | (b2 & 0x7F) << 14 | (b3 & 0x7F) << 21
                             | (b4 & 0x7F) << 28 | b5 << 35)
                        t = (n >> 1) ^ -(n & 1)
                        if len(cache) >= _PREFIX_CACHE_SIZE:
                            cache.clear()
                        cache[prefix] = t
                        append(t)
                        continue
                t = self.prefix_time(prefix)
            append(t)
        return out

    def _resolve_prefix(self, prefix: bytes) -> Any:
        if len(prefix) <= PREFIX_SIZE or prefix[0] != MAGIC_BYTE:
            return None
        kind = self._kinds.get(prefix[1:PREFIX_SIZE])
        if kind is None:
            kind = self._kind(prefix[1:PREFIX_SIZE])
        if kind == _NONE:
            return None
        if kind != _FAST:
            return NEEDS_PAYLOAD
        if len(prefix) == TIME_PREFIX:  # unrolled: a 6-byte varint (ms times from 2004 to 2039)
            b0, b1, b2, b3, b4, b5 = prefix[PREFIX_SIZE:]
            if b5 < 0x80 and b0 & b1 & b2 & b3 & b4 & 0x80:
                n = (b0 & 0x7F) | (b1 & 0x7F) << 7 | (b2 & 0x7F) << 14 | (b3 & 0x7F) << 21 | (b4 & 0x7F) << 28 | b5 << 35
                return (n >> 1) ^ -(n & 1)
        try:
            t, _ = _varint(prefix, PREFIX_SIZE)
        except IndexError:  # the varint runs past the prefix
            if len(prefix) < TIME_PREFIX:  # ... which is the whole payload: cut short
                self.unreadable += 1
                return None
            return NEEDS_PAYLOAD
        return t

    def _slow(self, payload: bytes, parsed: Any) -> EventHeader | None:
        import fastavro  # deferred (see _lookup)
        record = fastavro.schemaless_reader(io.BytesIO(payload[PREFIX_SIZE:]), parsed)
        h = record.get(HEADER_FIELD)
        if not isinstance(h, dict):
            return None
        return EventHeader(int(h["time"]), h["server"], h["service"], h["session"], int(h["seq"]))
