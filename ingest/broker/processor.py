"""A network thread of the broker: one selector over its connections, frames cut, dispatched, replies written.

A :class:`Processor` owns its connections (never shared with another thread) and
drives them with non-blocking sockets: it reads what is available, cuts complete
frames (``size:int32`` + ``type:int16`` + body), hands each to the
:class:`Dispatcher` inline and writes the :class:`~ingest.broker.reply.Reply`
parts back with ``send`` and ``os.sendfile`` as the socket drains. On a TLS listener (the server has an
``ssl_context``) each socket is wrapped on arrival and its handshake driven by the same selector
(``do_handshake`` until it stops asking to read or write); bytes are read and written through TLS, and
file regions are read (``os.pread``) and encrypted, since ``sendfile`` would bypass TLS. A handshake
that fails closes its connection (logged rate-limited); one that does not finish within
``request.partial.timeout.ms`` is closed by the sweep. The dispatcher's ``new_session`` (if it has one)
makes each connection's session, once the handshake is done, with the client's certificate. Its bounds
(requests per turn, unsent replies, buffered bytes, the shared
:class:`RequestBudget`, timeouts) are described in docs/protocol.md,
"Concurrency model"; the acceptor that feeds it is
:class:`ingest.broker.server.SocketServer`.

Concurrency: a processor's state is touched only by its own thread, except
:meth:`Processor.add`, :meth:`Processor.wakeup`, :meth:`Processor.on_budget_released`
and the ``completed`` queue (deferred replies filled by other threads), which
are safe from any thread. The budget has its own lock.
"""
from __future__ import annotations

import logging
import os
import queue
import selectors
import socket
import ssl
import threading
from collections import deque
from typing import Callable, Protocol

from ingest.broker.reply import FileRegion, Reply
from ingest.ratelimited_log import RateLimitedLog, flush_all
from ingest.wire.errors import ErrorCode
from ingest.wire.frames import INT16, REQUEST_HEADER, SIZE
from ingest.wire.protocol import ErrorResponse

log = logging.getLogger(__name__)

RECV_CHUNK = 256 * 1024
"""Largest read for a connection that holds a budget reservation (a large frame on its way)."""
SENDFILE_CHUNK = 1 << 30

MAX_DISPATCH_PER_TURN = 16
"""Requests of one connection dispatched per loop turn before the others get theirs."""
MAX_PENDING_REPLY_BYTES = 256 * 1024
"""In-memory reply bytes a connection may have unsent before it is neither dispatched nor read."""
MAX_PENDING_REPLIES = 64
"""Unsent replies (each may pin a segment file region) a connection may have queued."""
SMALL_FRAME_BYTES = 64 * 1024
"""Frames up to this size (with their size field) need no reservation from the request budget;
also the largest read for a connection without a reservation."""
SWEEP_INTERVAL_S = 0.5
"""How often a processor checks its connections' timeouts and retries budget waits."""
TLS_SEND_CHUNK = 256 * 1024
"""Largest plaintext handed to one TLS write (a retry after SSLWantWriteError repeats the same bytes)."""


class Dispatcher(Protocol):
    """Turns one request into an optional reply. Called from processor threads concurrently.

    ``dispatch`` gets the frame's first int16 (the 0.7 request type, the Kafka api key) and the
    bytes after it, or, when the dispatcher's ``frame_from_type`` is true, the bytes after ``size``
    with that int16 included (the Kafka listener decodes its request header whole).

    A dispatcher may also have ``new_session(client, peer_cert)``: called once per connection (after
    the TLS handshake, with ``getpeercert()``'s verified client certificate or None); its result is
    passed with every frame of that connection as ``dispatch(kind, body, client, session)``. It may
    also have ``connection_closed(client)``, called once when the
    connection from ``client`` closes (handlers.py logs its refusal summary there), and
    ``refusal(code)``: the reply to a frame this layer refuses (a bad size, a frame larger than
    the budget) or whose dispatch failed unexpectedly; it must close the connection. Without it
    the 0.7 answer is sent (an error response, then close); the Kafka listener closes without one,
    as Kafka's socket server does. A dispatcher with ``new_session(client, peer_certificate)`` (the
    Kafka listener's) gets a session per connection, made when it is accepted, and ``dispatch``
    receives it as a fourth argument.
    """

    def dispatch(self, kind: int, body: memoryview, client: str) -> Reply | None: ...


class RequestBudget:
    """Bytes of large request frames buffered across all connections (``queued.max.request.bytes``).

    Thread-safe (one lock). ``on_release`` runs after every release, outside the
    lock, so that processors with connections waiting for budget retry them.
    """

    def __init__(self, capacity: int, on_release: Callable[[], None] = lambda: None) -> None:
        self.capacity = capacity
        self.used = 0
        self._on_release = on_release
        self._lock = threading.Lock()

    def try_reserve(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.capacity:
                return False
            self.used += n
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self.used -= n
        self._on_release()


class ProcessorHost(Protocol):
    """What a processor needs from the server that owns it (:class:`ingest.broker.server.SocketServer`)."""

    dispatcher: Dispatcher
    budget: RequestBudget
    refusals: RateLimitedLog
    max_request_bytes: int
    drain_timeout_s: float
    idle_timeout_s: float
    partial_timeout_s: float
    clock_monotonic: Callable[[], float]
    ssl_context: ssl.SSLContext | None   # a TLS listener's context, or None (plaintext)

    def count_refused_frame(self, code: ErrorCode) -> None: ...


class Connection:
    """One client socket owned by one processor thread (never shared)."""

    __slots__ = ("sock", "addr", "inbuf", "start", "replies", "part", "sent", "closing", "mask",
                 "pending_bytes", "reserved", "muted", "complete", "frame_started", "last_active", "held",
                 "handshake", "accepted", "session")

    def __init__(self, sock: socket.socket, addr: str, now: float) -> None:
        self.sock = sock
        self.addr = addr
        self.inbuf = bytearray()
        self.start = 0          # first unconsumed byte of inbuf
        self.replies: deque[Reply] = deque()
        self.part = 0           # index of the part being sent in replies[0]
        self.sent = 0           # bytes of that part already sent
        self.closing = False    # close once replies are written
        self.mask = 0           # events registered with the selector (0 = not registered)
        self.pending_bytes = 0  # in-memory bytes of the queued replies
        self.reserved = 0       # request-budget bytes held for the frame at ``start``
        self.muted = False      # waiting for request budget: not read
        self.complete = False   # a complete frame starts at ``start``
        self.frame_started: float | None = None   # when we began waiting for the rest of a frame
        self.last_active = now  # last byte received or sent
        self.held = False       # a deferred reply that holds the connection is pending: dispatch nothing
        self.handshake = 0      # TLS handshake in progress: the selector event it waits for (0 = none/done)
        self.accepted = now
        self.session = None     # the dispatcher's session for this connection (new_session), once known


class Processor(threading.Thread):
    """A network thread: one selector over its connections (see the module docstring)."""

    def __init__(self, index: int, server: ProcessorHost) -> None:
        super().__init__(name=f"{getattr(server, 'name', 'broker')}-net-{index}", daemon=True)
        self.server = server
        self.selector = selectors.DefaultSelector()
        self.new_conns: queue.SimpleQueue[tuple[socket.socket, str]] = queue.SimpleQueue()
        self.conns: dict[int, Connection] = {}
        self.ready: dict[Connection, None] = {}    # complete frames to dispatch (insertion-ordered)
        self.muted: dict[Connection, None] = {}    # waiting for request budget
        self.completed: queue.SimpleQueue[Connection] = queue.SimpleQueue()  # deferred replies now filled
        self.budget_freed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.draining = False
        self.frame_from_type = bool(getattr(server.dispatcher, "frame_from_type", False))
        self.new_session = getattr(server.dispatcher, "new_session", None)
        self.ssl_context: ssl.SSLContext | None = getattr(server, "ssl_context", None)
        self._scratch: memoryview | None = None   # where TLS reads land (RECV_CHUNK bytes, made on first use)

    def add(self, sock: socket.socket, addr: str) -> None:
        self.new_conns.put((sock, addr))
        self.wakeup()

    def wakeup(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # a wakeup is already pending

    def on_budget_released(self) -> None:
        if self.muted:
            self.budget_freed = True
            self.wakeup()

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        now_fn = self.server.clock_monotonic
        deadline: float | None = None
        next_sweep = now_fn() + SWEEP_INTERVAL_S
        try:
            while True:
                self._accept_new()
                now = now_fn()
                if self.draining:
                    if deadline is None:
                        deadline = now + self.server.drain_timeout_s
                        for conn in list(self.conns.values()):
                            self._interest(conn)      # stop reading
                    for conn in list(self.conns.values()):
                        if not conn.replies and not (conn.complete and not conn.closing):
                            self._close(conn)
                    if not self.conns or now > deadline:
                        break
                if self.budget_freed or now >= next_sweep:
                    self.budget_freed = False
                    self._retry_muted()
                if now >= next_sweep:
                    next_sweep = now + SWEEP_INTERVAL_S
                    self._sweep(now)
                    flush_all()  # this layer's refusals and the request handlers' alike
                timeout = 0 if self.ready else SWEEP_INTERVAL_S
                for key, events in self.selector.select(timeout=timeout):
                    conn = key.data
                    if conn is None:
                        try:
                            self._wake_r.recv(4096)
                        except BlockingIOError:
                            pass
                        continue
                    self._guarded(conn, self._on_event, events)
                self._write_completed()
                for conn in list(self.ready):
                    self._guarded(conn, self._serve)
        except Exception:  # noqa: BLE001 - logged; the server notices a dead processor
            log.exception("network processor %s failed", self.name)
        finally:
            for conn in list(self.conns.values()):
                self._close(conn)
            self.selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _write_completed(self) -> None:
        """Write out connections whose deferred replies other threads completed."""
        while True:
            try:
                conn = self.completed.get_nowait()
            except queue.Empty:
                return
            if self.conns.get(conn.sock.fileno()) is conn:
                conn.held = any(r.pending and r.hold for r in conn.replies)
                for reply in conn.replies:
                    if not reply.pending and not reply.accounted:
                        reply.accounted = True
                        conn.pending_bytes += sum(len(p) for p in reply.parts if not isinstance(p, FileRegion))
                        if reply.close_after:
                            conn.closing = True
                            conn.complete = False
                self._guarded(conn, self._on_writable)

    def _guarded(self, conn: Connection, fn: Callable, *args) -> None:
        if conn.sock.fileno() < 0:
            return
        try:
            fn(conn, *args)
        except Exception:  # noqa: BLE001 - lose this connection, not the thread
            self.server.refusals.log(logging.ERROR, conn.addr, "connection failed unexpectedly",
                                     "client %s: connection failed unexpectedly; closing it", conn.addr, exc_info=True)
            self._close(conn)

    def _accept_new(self) -> None:
        while True:
            try:
                sock, addr = self.new_conns.get_nowait()
            except queue.Empty:
                return
            if self.draining:
                sock.close()
                continue
            now = self.server.clock_monotonic()
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except OSError as exc:      # the peer already went away
                    log.debug("TLS setup of the connection from %s failed: %s", addr, exc)
                    sock.close()
                    continue
            conn = Connection(sock, addr, now)
            self.conns[sock.fileno()] = conn
            if self.ssl_context is not None:
                conn.handshake = selectors.EVENT_READ      # the client speaks first (ClientHello)
            elif self.new_session is not None:
                conn.session = self.new_session(addr, None)
            self._interest(conn)

    def _on_event(self, conn: Connection, events: int) -> None:
        if conn.handshake:
            self._handshake(conn)
            return
        if events & selectors.EVENT_READ:
            self._on_readable(conn)
        if events & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
            self._on_writable(conn)

    def _serve(self, conn: Connection) -> None:
        """Dispatch up to MAX_DISPATCH_PER_TURN frames of ``conn``, then write what they produced."""
        self._dispatch_some(conn)
        if conn.replies:
            self._on_writable(conn)      # updates interest and readiness, or closes
        else:
            self._after_io(conn)

    # --- state ---------------------------------------------------------------------------

    def _can_dispatch(self, conn: Connection) -> bool:
        return (not conn.closing and not conn.held and conn.pending_bytes < MAX_PENDING_REPLY_BYTES
                and len(conn.replies) < MAX_PENDING_REPLIES)

    def _wants_read(self, conn: Connection) -> bool:
        return (not self.draining and not conn.muted and not conn.complete and self._can_dispatch(conn))

    def _interest(self, conn: Connection) -> None:
        """Register exactly the events we act on: never READ we would not read (no busy loop)."""
        want = 0
        if conn.handshake:
            want = conn.handshake
        elif self._wants_read(conn):
            want |= selectors.EVENT_READ
            if conn.frame_started is not None and not conn.mask & selectors.EVENT_READ:
                # the partial-request clock runs only while we are waiting for the client
                conn.frame_started = self.server.clock_monotonic()
        if conn.replies and not conn.replies[0].pending and conn.replies[0].accounted:
            want |= selectors.EVENT_WRITE
        if want == conn.mask:            # skip the epoll_ctl when nothing changes
            return
        if conn.mask == 0:
            self.selector.register(conn.sock, want, conn)
        elif want == 0:
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, want, conn)
        conn.mask = want

    def _after_io(self, conn: Connection) -> None:
        """Close a finished closing connection; otherwise update readiness and interest."""
        if conn.closing and not conn.replies:
            self._close(conn)
            return
        if conn.complete and self._can_dispatch(conn):
            self.ready[conn] = None
        else:
            self.ready.pop(conn, None)
        self._interest(conn)

    def _close(self, conn: Connection) -> None:
        if self.conns.pop(conn.sock.fileno(), None) is None:
            return
        self.ready.pop(conn, None)
        self.muted.pop(conn, None)
        if conn.mask:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        for reply in conn.replies:
            reply.release()
        conn.replies.clear()
        conn.sock.close()
        if conn.reserved:
            reserved, conn.reserved = conn.reserved, 0
            self.server.budget.release(reserved)
        log.debug("closed connection from %s", conn.addr)
        closed = getattr(self.server.dispatcher, "connection_closed", None)
        if closed is not None:  # the dispatcher's per-connection refusal summary (handlers.py)
            try:
                closed(conn.addr)
            except Exception:  # noqa: BLE001 - a summary must not break closing
                log.exception("connection-closed hook failed for %s", conn.addr)

    def _retry_muted(self) -> None:
        for conn in list(self.muted):
            del self.muted[conn]
            conn.muted = False
            self._advance(conn)
            if conn.sock.fileno() >= 0:
                self._after_io(conn)

    def _sweep(self, now: float) -> None:
        server = self.server
        for conn in list(self.conns.values()):
            if conn.handshake and now - conn.accepted > server.partial_timeout_s:
                server.refusals.warning(
                    conn.addr, "TLS handshake timeout",
                    "client %s: TLS handshake not finished %.0f s after connecting (request.partial.timeout.ms=%d);"
                    " closing the connection", conn.addr, now - conn.accepted, server.partial_timeout_s * 1000)
                self._close(conn)
            elif (conn.frame_started is not None and conn.mask & selectors.EVENT_READ
                    and now - conn.frame_started > server.partial_timeout_s):
                have = len(conn.inbuf) - conn.start
                server.refusals.warning(
                    conn.addr, "partial request timeout",
                    "client %s: request frame incomplete after %.0f s (%d bytes received; "
                    "request.partial.timeout.ms=%d); closing the connection",
                    conn.addr, now - conn.frame_started, have, server.partial_timeout_s * 1000)
                self._close(conn)
            elif now - conn.last_active > server.idle_timeout_s:
                server.refusals.log(
                    logging.INFO, conn.addr, "idle timeout",
                    "client %s: no bytes in either direction for %.0f s (connections.max.idle.ms=%d); "
                    "closing the connection", conn.addr, now - conn.last_active, server.idle_timeout_s * 1000)
                self._close(conn)

    # --- TLS handshake ---------------------------------------------------------------------

    def _handshake(self, conn: Connection) -> None:
        """Drive a TLS handshake one step; when it is done, make the session and read what followed it."""
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            conn.handshake = selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            conn.handshake = selectors.EVENT_WRITE
        except (ssl.SSLError, OSError) as exc:
            # a plaintext client, an untrusted or missing client certificate, garbage: this client only
            self.server.refusals.warning(conn.addr, "TLS handshake failed",
                                         "client %s: TLS handshake failed (%s); closing the connection",
                                         conn.addr, getattr(exc, "reason", None) or exc)
            self._close(conn)
            return
        else:
            conn.handshake = 0
            conn.last_active = self.server.clock_monotonic()
            if self.new_session is not None:
                conn.session = self.new_session(conn.addr, conn.sock.getpeercert() or None)
            self._interest(conn)
            self._on_readable(conn)      # application data may have come with the handshake's last flight
            return
        self._interest(conn)

    # --- reading and dispatching -----------------------------------------------------------

    def _recv(self, conn: Connection, limit: int) -> bytes | memoryview:
        """Up to ``limit`` bytes; on TLS, records are decrypted until ``limit`` or until the socket has
        no more, and the rest of a record cut at ``limit`` with it (left in the TLS buffer, it would wait
        for an event the selector never reports). A TLS read lands in the processor's scratch buffer: the
        view returned is valid until the next read (the caller copies it into the connection's buffer).

        Raises:
            BlockingIOError: nothing to read now.
        """
        sock = conn.sock
        if not isinstance(sock, ssl.SSLSocket):
            return sock.recv(limit)
        if self._scratch is None:
            self._scratch = memoryview(bytearray(RECV_CHUNK))
        view = self._scratch
        got = 0
        while got < limit:
            try:
                n = sock.recv_into(view[got:limit], limit - got)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                n = 0
            if not n:
                if not got:
                    return b""      # closed
                break
            got += n
        if not got:
            raise BlockingIOError
        if sock.pending():
            # the rest of a record cut at ``limit``: decrypted already, so the selector will not report it
            return bytes(view[:got]) + sock.recv(sock.pending())
        return view[:got]

    def _on_readable(self, conn: Connection) -> None:
        if not self._wants_read(conn):
            return       # interest changed after the selector reported
        try:
            data = self._recv(conn, RECV_CHUNK if conn.reserved else SMALL_FRAME_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("recv from %s failed: %s", conn.addr, exc)
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.last_active = self.server.clock_monotonic()
        if conn.start == len(conn.inbuf):
            conn.inbuf = bytearray(data)
            conn.start = 0
        else:
            conn.inbuf += data
        self._advance(conn)
        if conn.sock.fileno() >= 0:
            self._after_io(conn)

    def _advance(self, conn: Connection) -> None:
        """Look at the frame starting at ``conn.start``: refuse a bad size, reserve budget, set ``complete``."""
        conn.complete = False
        if conn.closing:
            return
        avail = len(conn.inbuf) - conn.start
        if avail < SIZE.size:
            conn.frame_started = (conn.frame_started or self.server.clock_monotonic()) if avail else None
            return
        (size,) = SIZE.unpack_from(conn.inbuf, conn.start)
        limit, key = self.server.max_request_bytes, "max.socket.request.bytes"
        cap = getattr(conn.session, "max_receive_bytes", None)   # a session not authenticated yet: less
        if cap is not None and cap < limit:
            limit, key = cap, "sasl.server.max.receive.size before authentication"
        if size < INT16.size or size > limit:
            code = ErrorCode.REQUEST_TOO_LARGE if size > limit else ErrorCode.MALFORMED_REQUEST
            self.server.refusals.warning(
                conn.addr, f"frame size outside [{INT16.size}, {limit}]",
                "client %s: request frame size %d outside [%d, %d] (%s);"
                " answering %s and closing the connection", conn.addr, size, INT16.size, limit, key, code.name)
            self._refuse(conn, code)
            return
        need = SIZE.size + size
        if need > SMALL_FRAME_BYTES and not conn.reserved and avail < need:
            # (a frame that arrived whole in one read is already paid for: no reservation)
            budget = self.server.budget
            if need > budget.capacity:
                self.server.refusals.warning(
                    conn.addr, "frame larger than queued.max.request.bytes",
                    "client %s: request frame of %d bytes is larger than queued.max.request.bytes=%d;"
                    " answering REQUEST_TOO_LARGE and closing the connection", conn.addr, need, budget.capacity)
                self._refuse(conn, ErrorCode.REQUEST_TOO_LARGE)
                return
            if not budget.try_reserve(need):
                conn.muted = True            # not read until another frame's bytes are freed
                conn.frame_started = None
                self.muted[conn] = None
                return
            conn.reserved = need
        if avail >= need:
            conn.complete = True
            conn.frame_started = None
        elif conn.frame_started is None:
            conn.frame_started = self.server.clock_monotonic()

    def _refuse(self, conn: Connection, code: ErrorCode) -> None:
        self.server.count_refused_frame(code)
        self._queue(conn, self._refusal(code))

    def _refusal(self, code: ErrorCode) -> Reply:
        refusal = getattr(self.server.dispatcher, "refusal", None)
        if refusal is not None:
            return refusal(code)
        return Reply([ErrorResponse(code).encode()], close_after=True)

    def _queue(self, conn: Connection, reply: Reply) -> None:
        if reply.pending:
            def wake(conn: Connection = conn) -> None:   # any thread: hand the connection back to us
                self.completed.put(conn)
                self.wakeup()
            reply.on_complete = wake
            conn.replies.append(reply)
            conn.held = conn.held or reply.hold
            if not reply.pending:  # completed between the check and the hook: nobody woke us
                wake()
            return
        reply.accounted = True   # a deferred reply completed before it was queued is counted here
        conn.replies.append(reply)
        conn.pending_bytes += sum(len(part) for part in reply.parts if not isinstance(part, FileRegion))
        if reply.close_after:
            conn.closing = True
            conn.complete = False

    def _dispatch_some(self, conn: Connection) -> None:
        dispatched = 0
        while conn.complete and dispatched < MAX_DISPATCH_PER_TURN and self._can_dispatch(conn):
            buf = conn.inbuf
            (size,) = SIZE.unpack_from(buf, conn.start)
            end = conn.start + SIZE.size + size
            (kind,) = INT16.unpack_from(buf, conn.start + SIZE.size)
            body = memoryview(buf)[conn.start + (SIZE.size if self.frame_from_type else REQUEST_HEADER.size):end]
            conn.start = end
            dispatched += 1
            try:
                if self.new_session is not None:
                    reply = self.server.dispatcher.dispatch(kind, body, conn.addr, conn.session)
                else:
                    reply = self.server.dispatcher.dispatch(kind, body, conn.addr)
            except Exception:  # noqa: BLE001 - a handler bug answers UNKNOWN, never kills the thread
                self.server.refusals.log(logging.ERROR, conn.addr, f"request type {kind} failed unexpectedly",
                                         "client %s: request type %d failed unexpectedly", conn.addr, kind,
                                         exc_info=True)
                reply = self._refusal(ErrorCode.UNKNOWN)
            finally:
                try:
                    body.release()
                except BufferError:
                    # a handler kept a view of the frame: detach, so inbuf can grow again
                    conn.inbuf = bytearray(buf)
            if conn.reserved:
                reserved, conn.reserved = conn.reserved, 0
                self.server.budget.release(reserved)
            if reply is not None:
                self._queue(conn, reply)
            self._advance(conn)
        if conn.start == len(conn.inbuf):
            conn.inbuf = bytearray()
            conn.start = 0
        elif conn.start > RECV_CHUNK:
            # copy the rest out: ``del buf[:n]`` would keep a large frame's allocation alive
            conn.inbuf = conn.inbuf[conn.start:]
            conn.start = 0

    # --- writing -------------------------------------------------------------------------

    def _on_writable(self, conn: Connection) -> None:
        if conn.handshake:
            return
        sock = conn.sock
        tls = isinstance(sock, ssl.SSLSocket)
        progressed = False
        try:
            while conn.replies:
                reply = conn.replies[0]
                if reply.pending or not reply.accounted:
                    break              # a deferred reply not yet filled (or not yet counted) holds the order
                while conn.part < len(reply.parts):
                    part = reply.parts[conn.part]
                    if isinstance(part, FileRegion):
                        remaining = part.length - conn.sent
                        if not remaining:
                            n = 0
                        elif tls:
                            n = self._send_file_tls(sock, part, conn.sent)
                        else:
                            n = os.sendfile(sock.fileno(), part.fd, part.position + conn.sent,
                                            min(remaining, SENDFILE_CHUNK))
                        if remaining and n == 0:
                            raise OSError(f"segment file ended {remaining} bytes early")
                        total = part.length
                    else:
                        total = len(part)
                        if conn.sent >= total:
                            n = 0
                        elif tls:
                            n = sock.send(memoryview(part)[conn.sent:conn.sent + TLS_SEND_CHUNK])
                        else:
                            n = sock.send(memoryview(part)[conn.sent:])
                        conn.pending_bytes -= n
                    conn.sent += n
                    progressed = progressed or n > 0
                    if conn.sent < total:
                        raise BlockingIOError   # socket buffer full; wait for EVENT_WRITE
                    conn.part += 1
                    conn.sent = 0
                conn.replies.popleft().release()
                conn.part = 0
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            log.info("client %s: send failed (%s); closing", conn.addr, exc)
            self._close(conn)
            return
        if progressed:
            conn.last_active = self.server.clock_monotonic()
        self._after_io(conn)

    @staticmethod
    def _send_file_tls(sock: ssl.SSLSocket, part: FileRegion, sent: int) -> int:
        """Part of a file region read and written through TLS; the same bytes again after SSLWantWriteError
        (a segment's bytes do not change while a region pins them)."""
        data = os.pread(part.fd, min(part.length - sent, TLS_SEND_CHUNK), part.position + sent)
        return sock.send(data) if data else 0
