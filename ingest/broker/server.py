"""The broker's network layer: frames in, replies out; knows nothing about storage.

Concurrency model (Kafka 0.7's ``SocketServer``): one acceptor thread hands
each new connection, round robin, to one of ``num.threads`` processor
threads. A processor owns its connections and one ``selectors`` selector;
sockets are non-blocking, so a client that sends half a frame or never reads
its responses only occupies its own buffers: it never blocks the processor or
any other client. A processor reads whatever is available, cuts complete
frames (``size:int32`` + ``type:int16`` + body) and hands each to the
dispatcher (``handlers.py``) inline; the reply is a list of byte strings and
:class:`FileRegion` s that the processor writes with ``send`` and
``os.sendfile`` (zero copy from the segment file) as the socket drains.
While a connection has unsent reply bytes the processor stops reading from it
(back-pressure), so a client that pipelines requests without reading cannot
grow the broker's memory.

Frame-level bad input is handled here: a size below 2 (no room for the type)
or above ``max.socket.request.bytes`` is answered with one error response and
the connection is closed, because the stream can no longer be trusted to be
in sync. Everything else (unknown type, bad body, bad topic, CRC failure) is
the dispatcher's business.

Graceful stop: the acceptor closes the listening socket; each processor stops
reading, still dispatches the complete frames it already holds, writes out
the pending replies (bounded by ``drain_timeout_s``), then closes its
connections.

The broker that uses this layer (LogManager, handlers, ZooKeeper) is
:class:`ingest.broker.broker.BrokerServer`; replies are
:class:`~ingest.broker.reply.Reply` objects (``reply.py``).
"""
from __future__ import annotations

import itertools
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections import deque
from typing import Callable, Protocol

from ingest.broker.protocol import ErrorResponse, INT16, REQUEST_HEADER, SIZE
from ingest.broker.reply import FileRegion, Reply
from ingest.errors import ConfigError, ErrorCode, MalformedRequestError, RequestTooLargeError

log = logging.getLogger(__name__)

RECV_CHUNK = 256 * 1024
SENDFILE_CHUNK = 1 << 30


class Dispatcher(Protocol):
    """Turns one request into an optional reply. Called from processor threads concurrently."""

    def dispatch(self, kind: int, body: memoryview, client: str) -> Reply | None: ...


class _Connection:
    """One client socket owned by one processor thread (never shared)."""

    __slots__ = ("sock", "addr", "inbuf", "start", "replies", "part", "sent", "closing", "mask")

    def __init__(self, sock: socket.socket, addr: str) -> None:
        self.sock = sock
        self.addr = addr
        self.inbuf = bytearray()
        self.start = 0          # first unconsumed byte of inbuf
        self.replies: deque[Reply] = deque()
        self.part = 0           # index of the part being sent in replies[0]
        self.sent = 0           # bytes of that part already sent
        self.closing = False    # close once replies are written
        self.mask = selectors.EVENT_READ   # events registered with the selector


class _Processor(threading.Thread):
    """A network thread: one selector over its connections."""

    def __init__(self, index: int, server: "SocketServer") -> None:
        super().__init__(name=f"broker-net-{index}", daemon=True)
        self.server = server
        self.selector = selectors.DefaultSelector()
        self.new_conns: queue.SimpleQueue[tuple[socket.socket, str]] = queue.SimpleQueue()
        self.conns: dict[int, _Connection] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.draining = False

    def add(self, sock: socket.socket, addr: str) -> None:
        self.new_conns.put((sock, addr))
        self.wakeup()

    def wakeup(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # a wakeup is already pending

    def run(self) -> None:
        deadline: float | None = None
        try:
            while True:
                self._accept_new()
                if self.draining:
                    if deadline is None:
                        deadline = self.server.clock_monotonic() + self.server.drain_timeout_s
                        for conn in list(self.conns.values()):
                            if not conn.replies:
                                self._process_frames(conn)   # complete frames already received
                            conn.closing = True
                            if conn.replies:
                                self._on_writable(conn)
                            else:
                                self._close(conn)
                    if not self.conns or self.server.clock_monotonic() > deadline:
                        break
                for key, events in self.selector.select(timeout=0.5):
                    conn = key.data
                    if conn is None:
                        try:
                            self._wake_r.recv(4096)
                        except BlockingIOError:
                            pass
                        continue
                    if conn.sock.fileno() < 0:
                        continue
                    try:
                        if events & selectors.EVENT_READ:
                            self._on_readable(conn)
                        if events & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                            self._on_writable(conn)
                    except Exception:  # noqa: BLE001 - lose this connection, not the thread
                        log.exception("client %s: connection failed unexpectedly; closing it", conn.addr)
                        self._close(conn)
        except Exception:  # noqa: BLE001 - logged; the server notices a dead processor
            log.exception("network processor %s failed", self.name)
        finally:
            for conn in list(self.conns.values()):
                self._close(conn)
            self.selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept_new(self) -> None:
        while True:
            try:
                sock, addr = self.new_conns.get_nowait()
            except queue.Empty:
                return
            if self.draining:
                sock.close()
                continue
            conn = _Connection(sock, addr)
            self.conns[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _interest(self, conn: _Connection) -> None:
        want = 0
        if not conn.closing and not conn.replies:
            want |= selectors.EVENT_READ
        if conn.replies:
            want |= selectors.EVENT_WRITE
        if want == 0:
            want = selectors.EVENT_READ  # notice a peer that hangs up
        if want != conn.mask:            # skip the epoll_ctl when nothing changes
            self.selector.modify(conn.sock, want, conn)
            conn.mask = want

    def _close(self, conn: _Connection) -> None:
        if self.conns.pop(conn.sock.fileno(), None) is None:
            return
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        for reply in conn.replies:
            reply.release()
        conn.replies.clear()
        conn.sock.close()
        log.debug("closed connection from %s", conn.addr)

    def _on_readable(self, conn: _Connection) -> None:
        if conn.closing or conn.replies:
            # only here to notice a hang-up while we wait to write
            try:
                if conn.sock.recv(1, socket.MSG_PEEK) == b"":
                    self._close(conn)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._close(conn)
            return
        try:
            data = conn.sock.recv(RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("recv from %s failed: %s", conn.addr, exc)
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        if conn.start == len(conn.inbuf):
            conn.inbuf = bytearray(data)
            conn.start = 0
        else:
            conn.inbuf += data
        self._process_frames(conn)
        if conn.sock.fileno() >= 0:
            self._on_writable(conn)

    def _process_frames(self, conn: _Connection) -> None:
        buf = conn.inbuf
        limit = self.server.max_request_bytes
        while not conn.closing and len(buf) - conn.start >= SIZE.size:
            (size,) = SIZE.unpack_from(buf, conn.start)
            if size < INT16.size or size > limit:
                code = RequestTooLargeError.code if size > limit else MalformedRequestError.code
                log.warning("client %s: request frame size %d outside [%d, %d] (max.socket.request.bytes);"
                            " answering %s and closing the connection",
                            conn.addr, size, INT16.size, limit, code.name)
                conn.replies.append(Reply([ErrorResponse(code).encode()], close_after=True))
                conn.closing = True
                break
            end = conn.start + SIZE.size + size
            if len(buf) < end:
                break
            (kind,) = INT16.unpack_from(buf, conn.start + SIZE.size)
            body = memoryview(buf)[conn.start + REQUEST_HEADER.size:end]
            conn.start = end
            try:
                reply = self.server.dispatcher.dispatch(kind, body, conn.addr)
            except Exception:  # noqa: BLE001 - a handler bug answers UNKNOWN, never kills the thread
                log.exception("client %s: request type %d failed unexpectedly", conn.addr, kind)
                reply = Reply([ErrorResponse(ErrorCode.UNKNOWN).encode()], close_after=True)
            finally:
                try:
                    body.release()
                except BufferError:
                    # a handler kept a view of the frame: detach, so inbuf can grow again
                    conn.inbuf = buf = bytearray(buf)
            if reply is not None:
                conn.replies.append(reply)
                if reply.close_after:
                    conn.closing = True
        if conn.start == len(buf):
            conn.inbuf = bytearray()
            conn.start = 0
        elif conn.start > RECV_CHUNK:
            del buf[:conn.start]
            conn.start = 0

    def _on_writable(self, conn: _Connection) -> None:
        sock = conn.sock
        try:
            while conn.replies:
                reply = conn.replies[0]
                while conn.part < len(reply.parts):
                    part = reply.parts[conn.part]
                    if isinstance(part, FileRegion):
                        remaining = part.length - conn.sent
                        n = os.sendfile(sock.fileno(), part.fd, part.position + conn.sent,
                                        min(remaining, SENDFILE_CHUNK)) if remaining else 0
                        if remaining and n == 0:
                            raise OSError(f"segment file ended {remaining} bytes early")
                        total = part.length
                    else:
                        total = len(part)
                        n = sock.send(memoryview(part)[conn.sent:]) if conn.sent < total else 0
                    conn.sent += n
                    if conn.sent < total:
                        self._interest(conn)
                        return  # socket buffer full; wait for EVENT_WRITE
                    conn.part += 1
                    conn.sent = 0
                conn.replies.popleft().release()
                conn.part = 0
        except (BlockingIOError, InterruptedError):
            self._interest(conn)
            return
        except OSError as exc:
            log.info("client %s: send failed (%s); closing", conn.addr, exc)
            self._close(conn)
            return
        if conn.closing:
            self._close(conn)
            return
        if conn.start < len(conn.inbuf):
            self._process_frames(conn)   # frames held back while we were writing
            if conn.replies:
                self._on_writable(conn)
                return
            if conn.closing:
                self._close(conn)
                return
        self._interest(conn)


class SocketServer:
    """Accepts connections on ``host:port`` and serves frames through ``dispatcher``.

    Thread-safe: ``start``/``stop`` may be called from any thread (once each).
    ``port`` is the bound port (useful when configured as 0).
    """

    def __init__(self, host: str, port: int, dispatcher: Dispatcher, *, max_request_bytes: int,
                 send_buffer: int = 0, receive_buffer: int = 0, num_threads: int = 2,
                 drain_timeout_s: float = 10.0,
                 monotonic: Callable[[], float] | None = None) -> None:
        self.dispatcher = dispatcher
        self.max_request_bytes = max_request_bytes
        self.send_buffer = send_buffer
        self.receive_buffer = receive_buffer
        self.drain_timeout_s = drain_timeout_s
        self.clock_monotonic = monotonic or time.monotonic
        try:
            self._listener = socket.create_server((host, port), backlog=128, reuse_port=False)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}; check 'hostname' and 'port' "
                "(another broker may already use this port)") from exc
        self._listener.settimeout(0.5)
        self.host, self.port = self._listener.getsockname()[:2]
        self._processors = [_Processor(i, self) for i in range(num_threads)]
        self._acceptor = threading.Thread(target=self._accept_loop, name="broker-acceptor", daemon=True)
        self._stopping = threading.Event()

    def start(self) -> "SocketServer":
        for p in self._processors:
            p.start()
        self._acceptor.start()
        log.info("listening on %s:%d with %d network threads", self.host, self.port, len(self._processors))
        return self

    def _accept_loop(self) -> None:
        rr = itertools.cycle(self._processors)
        while not self._stopping.is_set():
            try:
                sock, addr = self._listener.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    break
                log.warning("accept failed: %s", exc)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            if self.receive_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            next(rr).add(sock, f"{addr[0]}:{addr[1]}")
        self._listener.close()

    def stop(self) -> None:
        """Stop accepting, finish in-flight requests, write pending replies, close connections."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)   # wakes a blocked accept() at once
        except OSError:
            pass
        if self._acceptor.is_alive():
            self._acceptor.join()
        else:
            self._listener.close()
        for p in self._processors:
            p.draining = True
            p.wakeup()
        for p in self._processors:
            if p.is_alive():
                p.join(self.drain_timeout_s + 5)
        log.info("network layer on port %d stopped", self.port)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self._processors) and self._acceptor.is_alive()

