"""The wire protocol's primitives: request types, struct layouts, a named-field reader, frame builders.

Shared by the request/response classes of :mod:`ingest.broker.protocol` (Kafka 0.7 requests and the
replication ones) and :mod:`ingest.broker.protocol_mirror` (APPEND_AT, DELETED_SEGMENTS); the byte
layouts are in those modules' docstrings and docs/protocol.md. All integers are big-endian; strings
are ``len:int16`` + UTF-8 bytes.
"""
from __future__ import annotations

import socket
import struct
from enum import IntEnum

from ingest.errors import IngestError, MalformedRequestError, MalformedResponseError

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
REQUEST_HEADER = struct.Struct(">ih")     # size, type
RESPONSE_HEADER = struct.Struct(">ih")    # size, error
SIZE = INT32
FETCH_TAIL = struct.Struct(">iqi")        # partition, offset, max_size
OFFSETS_TAIL = struct.Struct(">iqi")      # partition, time, max_offsets
PRODUCE_TAIL = struct.Struct(">ii")       # partition, set_size
PARTITION_META = struct.Struct(">iqq")    # partition, earliest, latest
ACKS_HEAD = struct.Struct(">hi")          # required_acks, timeout_ms
REPLICA_HEAD = struct.Struct(">iii")      # replica_id, leader_epoch, max_wait_ms
REPLICA_FETCH_HEAD = struct.Struct(">qqq")  # high_watermark, log_start, log_end
PARTITION_STATE_HEAD = struct.Struct(">iii")  # partition, leader, leader_epoch

LATEST_TIME = -1
EARLIEST_TIME = -2
MAX_STRING_BYTES = 32767


class RequestType(IntEnum):
    """Request keys: 0-4 fixed by the Kafka 0.7 protocol, ours from 10 up."""

    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    PRODUCE_ACK = 10
    METADATA = 11
    PRODUCE_ACKS = 12
    REPLICA_FETCH = 13
    TOPIC_METADATA = 14
    APPEND_AT = 15
    DELETED_SEGMENTS = 16



# --- primitive codecs ---------------------------------------------------------------


class Reader:
    """A cursor over a buffer; every read names the field it expects.

    ``malformed`` is the error a layout violation raises: MalformedRequestError
    for requests (the broker's side), MalformedResponseError for responses.
    Not thread-safe (one reader per decode).
    """

    __slots__ = ("buf", "pos", "what", "malformed")

    def __init__(self, buf: bytes | bytearray | memoryview, what: str,
                 malformed: type[IngestError] = MalformedRequestError) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.what = what
        self.malformed = malformed

    def _need(self, n: int, field_name: str) -> None:
        if self.pos + n > len(self.buf):
            raise self.malformed(
                f"buffer underrun decoding {self.what}.{field_name}: need {n} bytes at "
                f"position {self.pos}, only {len(self.buf) - self.pos} left"
            )

    def unpack(self, st: struct.Struct, field_name: str) -> tuple:
        self._need(st.size, field_name)
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return values

    def int16(self, field_name: str) -> int:
        return self.unpack(INT16, field_name)[0]

    def int32(self, field_name: str) -> int:
        return self.unpack(INT32, field_name)[0]

    def int64(self, field_name: str) -> int:
        return self.unpack(INT64, field_name)[0]

    def raw(self, n: int, field_name: str) -> bytes:
        if n < 0:
            raise self.malformed(f"{self.what}.{field_name}: negative length {n}")
        self._need(n, field_name)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self, field_name: str) -> str:
        n = self.int16(field_name + ".length")
        data = self.raw(n, field_name)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.malformed(f"{self.what}.{field_name}: not UTF-8: {data[:40]!r}") from exc

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def done(self) -> None:
        """Raise when bytes are left over: a body must match its layout exactly."""
        if self.pos != len(self.buf):
            raise self.malformed(
                f"{self.what}: {len(self.buf) - self.pos} unexpected trailing bytes after the body"
            )


def encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > MAX_STRING_BYTES:
        raise MalformedRequestError(f"string of {len(data)} bytes does not fit an int16 length")
    return INT16.pack(len(data)) + data


def request_frame(kind: RequestType, body: bytes) -> bytes:
    return REQUEST_HEADER.pack(len(body) + INT16.size, kind) + body


def response_frame(error: int, body: bytes = b"") -> bytes:
    return RESPONSE_HEADER.pack(len(body) + INT16.size, error) + body


def count16(r: Reader, field_name: str) -> int:
    n = r.int16(field_name)
    if n < 0:
        raise r.malformed(f"{r.what}.{field_name}: negative count {n}")
    return n


# --- blocking socket helpers (clients and tests) ---------------------------------------


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes; ``ConnectionError`` if the peer closes first."""
    buf = bytearray(n)
    recv_into_exact(sock, buf)
    return bytes(buf)


def recv_into_exact(sock: socket.socket, buf: bytearray) -> None:
    """Fill ``buf`` from ``sock`` (no copy after the socket's); ``ConnectionError`` if the peer closes first."""
    view = memoryview(buf)
    n = len(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {n} expected bytes")
        got += k


def recv_response(sock: socket.socket, max_bytes: int = 1 << 31) -> bytes:
    """Read one response frame and return the bytes after ``size`` (``error`` + body).

    Raises:
        ConnectionError: the peer closed the connection.
        MalformedResponseError: the size field is below 2 or above ``max_bytes``.
    """
    (size,) = SIZE.unpack(recv_exact(sock, SIZE.size))
    if size < INT16.size or size > max_bytes:
        raise MalformedResponseError(f"response size {size} outside [2, {max_bytes}]")
    return recv_exact(sock, size)
