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
A handler never waits on a network thread: work that waits (an acks=-1
produce, a follower's fetch, a request that needs ZooKeeper) comes back as a
*deferred* reply that another thread completes; it keeps its place in the
connection's response order. One that *holds* its connection (a request
served on the handlers' coordination thread) also stops the connection's
later requests from being dispatched (or read) until it is complete, so they
never overtake it; the processor serves its other connections meanwhile.
The only state shared between threads is the request-byte budget (below,
guarded by its own lock) and the rate-limited log.

Fairness and back-pressure (what one connection can cost the others):

- **Work per turn.** A processor dispatches at most
  ``MAX_DISPATCH_PER_TURN`` requests of one connection per loop turn, then
  serves the other ready connections round robin; a client that pipelines
  32,768 requests in one send delays the others by one turn, not by all of
  them.
- **Pending replies.** A connection stops being dispatched and read while its
  unsent replies exceed ``MAX_PENDING_REPLY_BYTES`` (in memory) or
  ``MAX_PENDING_REPLIES``; it resumes as the client reads. A client that
  never reads costs at most that much memory and no CPU.
- **Buffered requests.** A connection reads only while it has no complete
  frame waiting, and reads at most ``SMALL_FRAME_BYTES`` at a time unless it
  holds a reservation, so a connection buffers at most that much outside the
  budget (the same order as the kernel's own socket buffers; the descriptor
  limit bounds the number of connections). A frame larger than
  ``SMALL_FRAME_BYTES`` must first
  reserve its announced size from a budget shared by all connections
  (``queued.max.request.bytes``); while the budget is short the connection is
  not read (it waits, unread, until another frame is dispatched or a
  connection closes); a frame larger than the whole budget is refused with
  REQUEST_TOO_LARGE.
- **Timeouts.** A frame that has started must be complete within
  ``request.partial.timeout.ms`` while the broker is reading it; a connection
  with no bytes in either direction for ``connections.max.idle.ms`` is closed.
- **Descriptors.** When ``accept`` fails for lack of descriptors (EMFILE,
  ENFILE) the acceptor pauses for a doubling interval (up to
  ``ACCEPT_BACKOFF_MAX_S``) instead of spinning; connections wait in the
  listen backlog meanwhile.
- **Logs.** Refusals and timeouts are logged through a
  :class:`~ingest.ratelimited_log.RateLimitedLog`: the first of each (client
  host, reason), then one line per ``LOG_INTERVAL_S`` with the count.

Frame-level bad input is handled here: a size below 2 (no room for the type)
or above ``max.socket.request.bytes`` is answered with one error response and
the connection is closed, because the stream can no longer be trusted to be
in sync. Everything else (unknown type, bad body, bad topic, CRC failure) is
the dispatcher's business.

Graceful stop: the acceptor closes the listening socket; each processor stops
reading, still dispatches the complete frames it already holds (the per-turn
bound still applies), writes out the pending replies, then closes its
connections. All of that is bounded by ``drain_timeout_s``
(``shutdown.timeout.ms``) whatever the clients do: at the deadline every
remaining connection is closed.

The broker that uses this layer (LogManager, handlers, ZooKeeper) is
:class:`ingest.broker.broker.BrokerServer`; replies are
:class:`~ingest.broker.reply.Reply` objects (``reply.py``).
"""
from __future__ import annotations

import errno
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

from ingest.broker.reply import FileRegion, Reply
from ingest.errors import ConfigError
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
ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 2.0
"""Pause after accept fails for lack of descriptors: doubles from MIN up to MAX, reset by a success."""
LOG_INTERVAL_S = 30.0
"""At most one log line per (client host, reason) per interval; the rest are counted."""

_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Dispatcher(Protocol):
    """Turns one request into an optional reply. Called from processor threads concurrently.

    A dispatcher may also have ``connection_closed(client)``, called once when the
    connection from ``client`` closes (handlers.py logs its refusal summary there).
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


class _Connection:
    """One client socket owned by one processor thread (never shared)."""

    __slots__ = ("sock", "addr", "inbuf", "start", "replies", "part", "sent", "closing", "mask",
                 "pending_bytes", "reserved", "muted", "complete", "frame_started", "last_active", "held")

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


class _Processor(threading.Thread):
    """A network thread: one selector over its connections (see the module docstring)."""

    def __init__(self, index: int, server: "SocketServer") -> None:
        super().__init__(name=f"broker-net-{index}", daemon=True)
        self.server = server
        self.selector = selectors.DefaultSelector()
        self.new_conns: queue.SimpleQueue[tuple[socket.socket, str]] = queue.SimpleQueue()
        self.conns: dict[int, _Connection] = {}
        self.ready: dict[_Connection, None] = {}    # complete frames to dispatch (insertion-ordered)
        self.muted: dict[_Connection, None] = {}    # waiting for request budget
        self.completed: queue.SimpleQueue[_Connection] = queue.SimpleQueue()  # deferred replies now filled
        self.budget_freed = False
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

    def _guarded(self, conn: _Connection, fn: Callable, *args) -> None:
        if conn.sock.fileno() < 0:
            return
        try:
            fn(conn, *args)
        except Exception:  # noqa: BLE001 - lose this connection, not the thread
            log.exception("client %s: connection failed unexpectedly; closing it", conn.addr)
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
            conn = _Connection(sock, addr, self.server.clock_monotonic())
            self.conns[sock.fileno()] = conn
            self._interest(conn)

    def _on_event(self, conn: _Connection, events: int) -> None:
        if events & selectors.EVENT_READ:
            self._on_readable(conn)
        if events & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
            self._on_writable(conn)

    def _serve(self, conn: _Connection) -> None:
        """Dispatch up to MAX_DISPATCH_PER_TURN frames of ``conn``, then write what they produced."""
        self._dispatch_some(conn)
        if conn.replies:
            self._on_writable(conn)      # updates interest and readiness, or closes
        else:
            self._after_io(conn)

    # --- state ---------------------------------------------------------------------------

    def _can_dispatch(self, conn: _Connection) -> bool:
        return (not conn.closing and not conn.held and conn.pending_bytes < MAX_PENDING_REPLY_BYTES
                and len(conn.replies) < MAX_PENDING_REPLIES)

    def _wants_read(self, conn: _Connection) -> bool:
        return (not self.draining and not conn.muted and not conn.complete and self._can_dispatch(conn))

    def _interest(self, conn: _Connection) -> None:
        """Register exactly the events we act on: never READ we would not read (no busy loop)."""
        want = 0
        if self._wants_read(conn):
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

    def _after_io(self, conn: _Connection) -> None:
        """Close a finished closing connection; otherwise update readiness and interest."""
        if conn.closing and not conn.replies:
            self._close(conn)
            return
        if conn.complete and self._can_dispatch(conn):
            self.ready[conn] = None
        else:
            self.ready.pop(conn, None)
        self._interest(conn)

    def _close(self, conn: _Connection) -> None:
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
            if (conn.frame_started is not None and conn.mask & selectors.EVENT_READ
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

    # --- reading and dispatching -----------------------------------------------------------

    def _on_readable(self, conn: _Connection) -> None:
        if not self._wants_read(conn):
            return       # interest changed after the selector reported
        try:
            data = conn.sock.recv(RECV_CHUNK if conn.reserved else SMALL_FRAME_BYTES)
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

    def _advance(self, conn: _Connection) -> None:
        """Look at the frame starting at ``conn.start``: refuse a bad size, reserve budget, set ``complete``."""
        conn.complete = False
        if conn.closing:
            return
        avail = len(conn.inbuf) - conn.start
        if avail < SIZE.size:
            conn.frame_started = (conn.frame_started or self.server.clock_monotonic()) if avail else None
            return
        (size,) = SIZE.unpack_from(conn.inbuf, conn.start)
        limit = self.server.max_request_bytes
        if size < INT16.size or size > limit:
            code = ErrorCode.REQUEST_TOO_LARGE if size > limit else ErrorCode.MALFORMED_REQUEST
            self.server.refusals.warning(
                conn.addr, f"frame size outside [{INT16.size}, {limit}]",
                "client %s: request frame size %d outside [%d, %d] (max.socket.request.bytes);"
                " answering %s and closing the connection", conn.addr, size, INT16.size, limit, code.name)
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

    def _refuse(self, conn: _Connection, code: ErrorCode) -> None:
        self.server.count_refused_frame(code)
        self._queue(conn, Reply([ErrorResponse(code).encode()], close_after=True))

    def _queue(self, conn: _Connection, reply: Reply) -> None:
        if reply.pending:
            def wake(conn: _Connection = conn) -> None:   # any thread: hand the connection back to us
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

    def _dispatch_some(self, conn: _Connection) -> None:
        dispatched = 0
        while conn.complete and dispatched < MAX_DISPATCH_PER_TURN and self._can_dispatch(conn):
            buf = conn.inbuf
            (size,) = SIZE.unpack_from(buf, conn.start)
            end = conn.start + SIZE.size + size
            (kind,) = INT16.unpack_from(buf, conn.start + SIZE.size)
            body = memoryview(buf)[conn.start + REQUEST_HEADER.size:end]
            conn.start = end
            dispatched += 1
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

    def _on_writable(self, conn: _Connection) -> None:
        sock = conn.sock
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
                        n = os.sendfile(sock.fileno(), part.fd, part.position + conn.sent,
                                        min(remaining, SENDFILE_CHUNK)) if remaining else 0
                        if remaining and n == 0:
                            raise OSError(f"segment file ended {remaining} bytes early")
                        total = part.length
                    else:
                        total = len(part)
                        n = sock.send(memoryview(part)[conn.sent:]) if conn.sent < total else 0
                        conn.pending_bytes -= n
                    conn.sent += n
                    progressed = progressed or n > 0
                    if conn.sent < total:
                        raise BlockingIOError   # socket buffer full; wait for EVENT_WRITE
                    conn.part += 1
                    conn.sent = 0
                conn.replies.popleft().release()
                conn.part = 0
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            log.info("client %s: send failed (%s); closing", conn.addr, exc)
            self._close(conn)
            return
        if progressed:
            conn.last_active = self.server.clock_monotonic()
        self._after_io(conn)


class SocketServer:
    """Accepts connections on ``host:port`` and serves frames through ``dispatcher``.

    Thread-safe: ``start``/``stop`` may be called from any thread (once each).
    ``port`` is the bound port (useful when configured as 0). The bounds are
    described in the module docstring; the keyword arguments are the
    ``server.properties`` keys of the same meaning.
    """

    def __init__(self, host: str, port: int, dispatcher: Dispatcher, *, max_request_bytes: int,
                 send_buffer: int = 0, receive_buffer: int = 0, num_threads: int = 2,
                 drain_timeout_s: float = 10.0, queued_max_request_bytes: int = 128 * 1024 * 1024,
                 idle_timeout_s: float = 600.0, partial_timeout_s: float = 30.0,
                 monotonic: Callable[[], float] | None = None) -> None:
        self.dispatcher = dispatcher
        self.max_request_bytes = max_request_bytes
        self.send_buffer = send_buffer
        self.receive_buffer = receive_buffer
        self.drain_timeout_s = drain_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.partial_timeout_s = partial_timeout_s
        self.clock_monotonic = monotonic or time.monotonic
        self.refusals = RateLimitedLog(log, interval_s=LOG_INTERVAL_S, monotonic=self.clock_monotonic)
        self.budget = RequestBudget(queued_max_request_bytes, self._budget_released)
        self._refused: dict[str, int] = {}   # frames refused here, by error code (the metrics read them)
        self._refused_lock = threading.Lock()
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

    @classmethod
    def from_config(cls, config, dispatcher: Dispatcher, host: str, port: int) -> "SocketServer":
        """A server with the bounds of a broker config (``SERVER_CONFIG``)."""
        return cls(host, port, dispatcher,
                   max_request_bytes=config["max.socket.request.bytes"],
                   send_buffer=config["socket.send.buffer"], receive_buffer=config["socket.receive.buffer"],
                   num_threads=config["num.threads"], drain_timeout_s=config["shutdown.timeout.ms"] / 1000.0,
                   queued_max_request_bytes=config["queued.max.request.bytes"],
                   idle_timeout_s=config["connections.max.idle.ms"] / 1000.0,
                   partial_timeout_s=config["request.partial.timeout.ms"] / 1000.0)

    def count_refused_frame(self, code: ErrorCode) -> None:
        with self._refused_lock:
            self._refused[code.name] = self._refused.get(code.name, 0) + 1

    def refused_frames(self) -> dict[str, int]:
        """Frames refused by this layer since start (bad size, larger than the budget), by error code."""
        with self._refused_lock:
            return dict(self._refused)

    def connection_count(self) -> int:
        """Open client connections (a snapshot: processors add and remove them concurrently)."""
        return sum(len(p.conns) for p in self._processors)

    def _budget_released(self) -> None:
        for p in self._processors:
            p.on_budget_released()

    def start(self) -> "SocketServer":
        for p in self._processors:
            p.start()
        self._acceptor.start()
        log.info("listening on %s:%d with %d network threads", self.host, self.port, len(self._processors))
        return self

    def _accept_loop(self) -> None:
        rr = itertools.cycle(self._processors)
        listener = f"listener {self.host}:{self.port}"
        backoff = 0.0
        while not self._stopping.is_set():
            try:
                sock, addr = self._listener.accept()
            except socket.timeout:
                self.refusals.flush()
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    break
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    # spinning on accept() cannot free a descriptor: pause, let clients close
                    backoff = min(max(backoff * 2, ACCEPT_BACKOFF_MIN_S), ACCEPT_BACKOFF_MAX_S)
                    self.refusals.log(
                        logging.ERROR, listener, f"accept: {errno.errorcode.get(exc.errno, exc.errno)}",
                        "accept failed: %s; pausing accepts (up to %.1f s at a time) until descriptors free up;"
                        " raise the descriptor limit (ulimit -n) if this persists",
                        exc.strerror or exc, ACCEPT_BACKOFF_MAX_S)
                    self._stopping.wait(backoff)
                else:
                    self.refusals.warning(listener, "accept failed", "accept failed: %s", exc)
                continue
            backoff = 0.0
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                if self.receive_buffer:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            except OSError as exc:      # the peer already reset the connection
                log.debug("setting up connection from %s failed: %s", addr, exc)
                sock.close()
                continue
            next(rr).add(sock, f"{addr[0]}:{addr[1]}")
        self._listener.close()

    def stop(self) -> None:
        """Stop accepting, finish in-flight requests, write pending replies, close connections.

        Returns within about ``drain_timeout_s`` whatever the clients do.
        """
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
        # one deadline for all threads: joining each for the full timeout in turn once took 30 s
        deadline = time.monotonic() + self.drain_timeout_s + 5
        for p in self._processors:
            if p.is_alive():      # stop() also runs after a failed start, before the threads started
                p.join(max(0.0, deadline - time.monotonic()))
        stuck = [p.name for p in self._processors if p.is_alive()]
        if stuck:
            log.error("network threads %s did not stop within shutdown.timeout.ms + 5 s; abandoning them", stuck)
        log.info("network layer on port %d stopped", self.port)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self._processors) and self._acceptor.is_alive()
