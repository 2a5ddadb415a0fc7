"""Frames: ``size:int32`` around every request and response, and the blocking reads of one frame.

``size`` counts the bytes that follow it; a client takes one frame off a blocking socket with
:func:`recv_response`.

The 0.7 port's frames (docs/protocol.md, "Frames")::

    request   size:int32  type:int16   body        size = 2 + body
    response  size:int32  error:int16  body        size = 2 + body

The Kafka port frames its requests and responses the same way (``size:int32`` + header + body).
"""
from __future__ import annotations

import socket
import struct
from typing import Iterable

from ingest.errors import MalformedResponseError

SIZE = struct.Struct(">i")
INT16 = struct.Struct(">h")                # the type of a request, the error of a response
REQUEST_HEADER = struct.Struct(">ih")      # size, type
RESPONSE_HEADER = struct.Struct(">ih")     # size, error
MAX_FRAME_BYTES = 1 << 31


def request_frame(kind: int, body: bytes | Iterable[bytes]) -> bytes:
    """A whole request frame: ``size type body`` (``body`` one byte string or its parts)."""
    parts = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
    return b"".join([REQUEST_HEADER.pack(sum(map(len, parts)) + INT16.size, kind), *parts])


def response_frame(error: int, body: bytes | Iterable[bytes] = b"") -> bytes:
    """A whole response frame whose body starts after ``error``."""
    parts = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
    return b"".join([RESPONSE_HEADER.pack(sum(map(len, parts)) + INT16.size, error), *parts])


def frame(parts: list[bytes]) -> bytes:
    """``size`` and then ``parts`` (whose first part is a type or an error), as one frame."""
    return b"".join([SIZE.pack(sum(map(len, parts))), *parts])


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


def recv_size(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> int:
    """Read one frame's ``size`` field and check it: at least 2 (a type or an error), at most ``max_bytes``.

    Raises:
        ConnectionError: the peer closed the connection.
        MalformedResponseError: the size is outside ``[2, max_bytes]``.
    """
    head = bytearray(SIZE.size)
    recv_into_exact(sock, head)
    (size,) = SIZE.unpack(head)
    if size < INT16.size or size > max_bytes:
        raise MalformedResponseError(f"response size {size} outside [2, {max_bytes}]")
    return size


def recv_response(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """Read one response frame and return the bytes after ``size`` (``error`` + body).

    Raises:
        ConnectionError: the peer closed the connection.
        MalformedResponseError: the size field is below 2 or above ``max_bytes``.
    """
    return recv_exact(sock, recv_size(sock, max_bytes))


def recv_response_buffer(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> bytearray:
    """As :func:`recv_response`, received straight into one new bytearray the caller owns."""
    body = bytearray(recv_size(sock, max_bytes))
    recv_into_exact(sock, body)
    return body
