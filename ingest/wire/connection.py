"""One blocking TCP connection to one broker: send a request frame, read its response.

Shared by the clients and the broker's replica fetcher and repair reads. Frames are built and
parsed by the declared messages (:mod:`ingest.wire.protocol`); this module only moves bytes. The
connection is opened lazily, and after any socket error it is closed and
:class:`~ingest.errors.BrokerUnavailableError` is raised; the next request reconnects. A response
that does not match its layout closes the connection (it can no longer be trusted to be in sync)
and raises :class:`~ingest.errors.MalformedResponseError`. A broker error code in a response
becomes the matching error with :func:`ingest.wire.errors.check`. Given an SSL context
(:func:`ingest.wire.tls.client_context`), the socket speaks TLS: the handshake runs when it connects
(within the connect timeout), and a broker whose certificate is not trusted (or, with host-name
checking, does not name ``host``) fails as :class:`~ingest.errors.BrokerUnavailableError` naming why.

Concurrency: a connection serialises its requests with a lock, so it may be
shared between threads (the producer's sender thread and ``send`` callers), but
requests on one connection never overlap on the wire.
"""
from __future__ import annotations

import logging
import socket
import ssl
import threading
from typing import Callable, Sequence, TypeVar

from ingest.errors import BrokerUnavailableError, MalformedResponseError
from ingest.wire.frames import MAX_FRAME_BYTES, recv_response, recv_response_buffer

log = logging.getLogger(__name__)

T = TypeVar("T")

SOCKET_BUFFER = 1 << 20

PIPELINE_WINDOW = 64
"""Requests :meth:`BrokerConnection.request_pipelined` puts on the wire before reading their answers: the
broker reads on while it has fewer than 64 replies unsent (docs/protocol.md, back-pressure)."""


class BrokerConnection:
    """A lazily opened, reconnecting socket to ``host:port``.

    Args:
        host, port: where the broker listens.
        timeout_s: connect and per-request socket timeout.
        broker_id: used in messages only.
        nodelay: set TCP_NODELAY. Right for request/response (one write per request, then
            wait); fire-and-forget producers turn it off so Nagle's algorithm coalesces
            back-to-back small requests into full segments.
        ssl_context: speak TLS with this client context (a listener of protocol SSL), or plaintext.
    """

    def __init__(self, host: str, port: int, *, timeout_s: float = 30.0, broker_id: int | None = None,
                 nodelay: bool = True, ssl_context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.ssl_context = ssl_context
        self.nodelay = nodelay
        self.port = port
        self.timeout_s = timeout_s
        self.broker_id = broker_id
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        bid = "" if self.broker_id is None else f"broker {self.broker_id} at "
        return f"{bid}{self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        if self._sock is None:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
            except OSError as exc:
                raise BrokerUnavailableError(f"cannot connect to {self!r}: {exc}") from exc
            if self.nodelay:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
                except (ssl.SSLError, ssl.CertificateError, OSError) as exc:
                    sock.close()
                    raise BrokerUnavailableError(f"TLS handshake with {self!r} failed: {exc}") from exc
            self._sock = sock
        return self._sock

    def _fail(self, exc: BaseException, what: str) -> BrokerUnavailableError:
        self._close_socket()
        return BrokerUnavailableError(f"{what} {self!r} failed: {exc}")

    def send(self, frame: bytes) -> None:
        """Send a request the broker does not answer (PRODUCE, MULTIPRODUCE)."""
        with self._lock:
            sock = self._connect()
            try:
                sock.sendall(frame)
            except OSError as exc:
                raise self._fail(exc, "sending to") from exc

    def request(self, frame: bytes, response_cls: type[T], *, max_response_bytes: int = MAX_FRAME_BYTES) -> T:
        """Send one request frame and decode its response with ``response_cls.decode``.

        Raises:
            BrokerUnavailableError: connect, send or receive failed (the socket is closed).
            MalformedResponseError: the response's frame or body does not match its layout
                (the socket is closed).
        """
        return self._exchange(frame, lambda sock: response_cls.decode(  # type: ignore[attr-defined]
            recv_response(sock, max_response_bytes)))

    def request_pipelined(self, frames: Sequence[bytes], response_cls: type[T], *, window: int = PIPELINE_WINDOW,
                          max_response_bytes: int = MAX_FRAME_BYTES) -> list[T]:
        """Send many request frames that each have a response and decode the responses, in order.

        At most ``window`` requests are on the wire unanswered: each window is one write and then
        its responses (the broker serves a connection's requests in order, docs/protocol.md "Frames"),
        so ``n`` requests cost ``ceil(n / window)`` round trips instead of ``n``, and neither side
        buffers more than a window. The lock is held for the whole exchange.

        Raises:
            BrokerUnavailableError, MalformedResponseError: as :meth:`request` (the socket is closed;
                none of the answers is returned).
        """
        if window < 1:
            raise ValueError(f"window {window}: at least 1 request in flight")
        out: list[T] = []
        with self._lock:
            sock = self._connect()
            try:
                for i in range(0, len(frames), window):
                    chunk = frames[i:i + window]
                    sock.sendall(b"".join(chunk))
                    out.extend(response_cls.decode(recv_response(sock, max_response_bytes))  # type: ignore[attr-defined]
                               for _ in chunk)
            except (OSError, ConnectionError) as exc:
                raise self._fail(exc, "pipelined requests to") from exc
            except MalformedResponseError as exc:
                self._close_socket()
                raise MalformedResponseError(
                    f"bad response from {self!r}: {exc}; is that address an ingest broker of this protocol "
                    "version (docs/protocol.md)?") from exc
        return out

    def request_buffer(self, frame: bytes, *, max_response_bytes: int = MAX_FRAME_BYTES) -> bytearray:
        """Send one request frame; its response's bytes after ``size`` (``error`` + body), undecoded.

        The bytes are received straight into one new bytearray that the caller
        owns (no copy after the socket's), for FETCH answers kept whole
        (:meth:`ingest.client.simple_consumer.SimpleConsumer.fetch_batch`).

        Raises:
            BrokerUnavailableError: connect, send or receive failed (the socket is closed).
            MalformedResponseError: the size field is below 2 or above ``max_response_bytes``
                (the socket is closed).
        """
        return self._exchange(frame, lambda sock: recv_response_buffer(sock, max_response_bytes))

    def _exchange(self, frame: bytes, receive: Callable[[socket.socket], T]) -> T:
        """Send ``frame`` and ``receive`` its answer, under the lock; any failure closes the socket."""
        with self._lock:
            sock = self._connect()
            try:
                sock.sendall(frame)
                return receive(sock)
            except (OSError, ConnectionError) as exc:
                raise self._fail(exc, "request to") from exc
            except MalformedResponseError as exc:
                self._close_socket()
                raise MalformedResponseError(
                    f"bad response from {self!r}: {exc}; is that address an ingest broker of this protocol "
                    "version (docs/protocol.md)?") from exc

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._close_socket()

