"""The registry's HTTP server: waitress serving the REST API (``registry_api.RegistryApp``), with limits.

Concurrency model (waitress): one thread runs an event loop (``poll``) that
accepts connections and reads requests without blocking; a request is handed to
one of ``num.io.threads`` worker threads only once it has arrived whole. A client
that sends half a request, or nothing, holds a socket and a few KB, never a
thread, so slow clients cannot starve the others of workers
(docs/dependencies.md has the measurements that chose waitress).

Limits (``conf`` keys, :mod:`ingest.events.registry_config`):

- ``num.io.threads``: worker threads; a request waits for a free one.
- ``max.connections``: open connections. Past it a new connection is answered at
  once with ``503`` and ``{"error_code": 50302, "message": "... max.connections ..."}``
  and closed (clients retry a 5xx later), instead of waiting unseen in the kernel's
  backlog; at most ``REFUSING_AT_ONCE`` are being refused at a time (beyond, new
  connections wait in the backlog). The process raises its descriptor limit to fit,
  or lowers the cap to fit the limit (logged).
- ``connections.max.idle.ms``: a connection with no bytes in either direction for
  this long is closed, whether idle between requests or stopped in the middle of
  one (the read timeout of a request); checked every half of it (at most 30 s).
- Request bodies larger than :data:`~ingest.events.registry_api.MAX_BODY` are refused
  with 413 by waitress before they are read; bodies over 512 KB are spooled to a
  temporary file while they arrive, so memory stays bounded by connections, not bytes.

TLS and authentication (docs/security.md, "Schema registry and secrets"): a ``listeners`` key
of ``https://HOST:PORT`` serves TLS through :class:`~ingest.events.registry_tls.TlsFront`, which
hands each decrypted connection to waitress as if accepted from the client (waitress's own
socket then does not listen); ``authentication.method=BASIC`` makes the application check
credentials and write roles (:mod:`ingest.events.registry_auth`).

Logs: a client that closes its connection in the middle of a request, and a request
that stops arriving until the idle timeout, are each one line per client host per
minute (:class:`~ingest.ratelimited_log.RateLimitedLog`); refusals at
``max.connections`` likewise.
"""
from __future__ import annotations

import json
import logging
import resource
import socket
import threading
import time
from typing import Any, Mapping

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask

from ingest.events.registry import SchemaRegistry
from ingest.events.registry_api import CONTENT_TYPE, MAX_BODY, RegistryApp
from ingest.events.registry_auth import BasicAuth
from ingest.events.registry_config import REGISTRY_DEFAULTS
from ingest.events.registry_tls import TlsFront, server_context
from ingest.metrics.exporter import metrics_enabled, new_registry, start_exporter
from ingest.metrics.registry import RegistryMetrics
from ingest.ratelimited_log import RateLimitedLog, flush_all

log = logging.getLogger(__name__)

# The listen backlog: connections the kernel completes while the accept loop is busy.
# socketserver's default of 5 reset registrations under 20 concurrent clients; the kernel
# caps this at net.core.somaxconn (4096 on current Linux).
LISTEN_BACKLOG = 1024
# Descriptors kept free of connections: the store, the log, ZooKeeper, the metrics endpoint.
RESERVED_DESCRIPTORS = 64
REFUSED_ERROR_CODE = 50302
REFUSAL_LINGER_S = 5.0
# Connections being refused at once; past them waitress stops accepting until one closes (new ones wait
# in the backlog), so refusals never take the descriptors of the connections being served.
REFUSING_AT_ONCE = 32
ACCEPTS_PER_TURN = 256
LOOP_TIMEOUT_S = 0.2

_events = RateLimitedLog(log)


def _refusal(limit: int) -> bytes:
    body = (b'{"error_code": %d, "message": "HTTP 503 Service Unavailable: the registry holds max.connections=%d '
            b'connections; retry later"}' % (REFUSED_ERROR_CODE, limit))
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body


class _JsonErrorTask(ErrorTask):
    """Requests waitress refuses before the application (bad request line, body too large...):
    a JSON error body like every other answer, not waitress's text page."""

    def execute(self) -> None:
        e = self.request.error
        body = json.dumps({"error_code": e.code, "message": f"HTTP {e.code} {e.reason}: {e.body}"}).encode()
        self.status = f"{e.code} {e.reason}"
        self.response_headers.append(("Content-Type", CONTENT_TYPE))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class _Channel(HTTPChannel):
    """A waitress connection that refuses itself past ``max.connections`` and reports aborts."""

    error_task_class = _JsonErrorTask
    timed_out = False  # closed by the idle timeout (logged there, not as an abort)
    refused_until = 0.0  # refused: drain what the client sends until then, so the close sends no reset

    def __init__(self, server: "_Server", sock: Any, addr: Any, adj: Adjustments, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map=map)
        if len(server.active_channels) > server.max_connections:
            self._refuse(server)

    def _refuse(self, server: "_Server") -> None:
        # An answer of a few hundred bytes fits the empty send buffer of a new socket. The request the
        # client may already have sent is read and dropped until it closes (or REFUSAL_LINGER_S): closing
        # with unread bytes would reset the connection, and the client might lose the 503 with it.
        self.refused_until = time.monotonic() + REFUSAL_LINGER_S
        _events.warning(self._client(), "refused", "refused a connection from %s: max.connections=%d "
                        "connections are open (answered 503)", self._client(), server.max_connections)
        try:
            self.socket.send(server.refusal)
            self.socket.shutdown(socket.SHUT_WR)
        except OSError:
            self.handle_close()

    def readable(self) -> bool:
        return True if self.refused_until else super().readable()

    def writable(self) -> bool:
        return False if self.refused_until else super().writable()

    def handle_read(self) -> None:
        if not self.refused_until:
            super().handle_read()
            return
        try:
            data = self.socket.recv(65536)
        except OSError:
            data = b""
        if not data or time.monotonic() > self.refused_until:
            self.handle_close()

    def _client(self) -> str:
        addr = self.addr if isinstance(self.addr, tuple) else ("?", 0)
        return f"{addr[0]}:{addr[1]}"

    def handle_close(self) -> None:
        request = self.request
        if request is not None and not request.completed and not self.timed_out and request.header_bytes_received:
            _events.warning(self._client(), "aborted", "client %s closed the connection in the middle of a request "
                            "(%d header and %d of %d body bytes received); request dropped", self._client(),
                            request.header_bytes_received, request.body_bytes_received, request.content_length)
        super().handle_close()


class _Server(TcpWSGIServer):
    channel_class = _Channel

    def __init__(self, app: RegistryApp, adj: Adjustments, max_connections: int, sock_map: dict,
                 listen: bool = True) -> None:
        """``listen=False``: no socket of its own; connections come from :meth:`adopt` (the TLS front)."""
        self.max_connections = max_connections
        self.refusal = _refusal(max_connections)
        super().__init__(app, map=sock_map, adj=adj, bind_socket=listen, _start=listen)

    def adopt(self, sock: socket.socket, addr: tuple) -> None:
        """Serve ``sock`` as a connection accepted from ``addr`` (called on this server's loop thread)."""
        self.channel_class(self, sock, addr, self.adj, map=self._map)

    def handle_accept(self) -> None:
        """Accept up to ``ACCEPTS_PER_TURN`` connections per loop turn (waitress accepts one: with
        thousands of open connections a turn takes milliseconds, and a burst would wait minutes)."""
        for _ in range(ACCEPTS_PER_TURN):
            try:
                accepted = self.accept()
                if accepted is None:  # no connection left in the backlog
                    return
                conn, addr = accepted
                self.set_socket_options(conn)
            except OSError as exc:  # e.g. EMFILE, or a peer that reset before accept
                _events.warning("*", "accept failed", "accept() failed: %s", exc)
                return
            self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)

    def maintenance(self, now: float) -> None:
        """Close connections idle past the timeout; a request cut off that way is logged."""
        cutoff = now - self.adj.channel_timeout
        for channel in list(self.active_channels.values()):
            if channel.refused_until:
                if channel.refused_until < time.monotonic():
                    channel.handle_close()
                continue
            if not channel.requests and channel.last_activity < cutoff:
                channel.timed_out = True
                request = channel.request
                if request is not None and not request.completed:
                    _events.warning(channel._client(), "timed out", "closed the connection of %s: its request "
                                    "stopped arriving for %d s (connections.max.idle.ms; %d body bytes of %d)",
                                    channel._client(), self.adj.channel_timeout, request.body_bytes_received,
                                    request.content_length)
        super().maintenance(now)
        flush_all()


def _descriptor_room(wanted: int) -> int:
    """Raise the soft descriptor limit towards ``wanted``; returns the descriptors connections may use."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, new, exc)
    return (wanted if soft == resource.RLIM_INFINITY else soft) - RESERVED_DESCRIPTORS


class RegistryServer:
    """The registry HTTP service on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, registry: SchemaRegistry, host: str = "127.0.0.1", port: int = 0,
                 config: Mapping[str, Any] | None = None, *, tls: bool = False) -> None:
        """``config``: the keys of ``ingest.events.registry_config`` (None: their defaults, metrics off).
        ``tls``: serve HTTPS on ``host:port`` with the ``ssl.*`` keys.

        Raises:
            ConfigError: the metrics endpoint cannot be bound; bad TLS files; a bad users file.
        """
        keys = {**REGISTRY_DEFAULTS, **(config or {})}
        auth = BasicAuth.from_config(keys)
        context = server_context(keys) if tls else None
        self.registry = registry
        self.exporter = None
        metrics = None
        if config is not None and metrics_enabled(config):
            prom = new_registry()
            metrics = RegistryMetrics(prom, registry)
        wanted = int(keys["max.connections"])
        room = _descriptor_room(wanted + REFUSING_AT_ONCE + RESERVED_DESCRIPTORS) - REFUSING_AT_ONCE
        self.max_connections = max(1, min(wanted, room))
        if self.max_connections < wanted:
            log.warning("max.connections=%d lowered to %d: the process may open only %d descriptors",
                        wanted, self.max_connections, room + RESERVED_DESCRIPTORS)
        idle_s = max(1, -(-int(keys["connections.max.idle.ms"]) // 1000))
        adj = Adjustments(
            host=host, port=port, threads=int(keys["num.io.threads"]),
            # waitress stops accepting at its own limit: ours answers 503 first, a few at a time
            connection_limit=self.max_connections + REFUSING_AT_ONCE,
            channel_timeout=idle_s, cleanup_interval=max(1, min(30, idle_s // 2)),
            backlog=LISTEN_BACKLOG, asyncore_use_poll=True, asyncore_loop_timeout=1,
            max_request_body_size=MAX_BODY, ident="ingest-schema-registry", expose_tracebacks=False,
            log_socket_errors=False)
        self._map: dict = {}
        self._stopping = threading.Event()
        self._httpd = _Server(RegistryApp(registry, metrics, auth), adj, self.max_connections, self._map,
                              listen=context is None)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._tls: TlsFront | None = None
        try:
            if context is not None:
                self._tls = TlsFront(host, port, context, self._adopt, max_open=self.max_connections + REFUSING_AT_ONCE,
                                     handshake_timeout_s=min(60.0, idle_s), backlog=LISTEN_BACKLOG)
            if metrics is not None:
                self.exporter = start_exporter(prom, config, "schema registry")
        except BaseException:
            self._close_sockets()
            raise

    def _adopt(self, sock: socket.socket, addr: tuple) -> None:
        """A TLS client's plain end, served by waitress from its own loop thread (the TLS front's hand-over)."""
        self._httpd.trigger.pull_trigger(lambda: self._httpd.adopt(sock, addr))

    @property
    def address(self) -> tuple[str, int]:
        if self._tls is not None:
            return str(self._tls.address[0]), int(self._tls.address[1])
        return str(self._httpd.effective_host), int(self._httpd.effective_port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"{'https' if self._tls is not None else 'http'}://{host}:{port}"

    def serve_forever(self) -> None:
        """Run the event loop until :meth:`stop` (or an exception, e.g. KeyboardInterrupt)."""
        while not self._stopping.is_set():
            wasyncore.loop(timeout=LOOP_TIMEOUT_S, map=self._map, use_poll=True, count=1)

    def start(self) -> "RegistryServer":
        """Serve from a background thread (in-process use)."""
        self._thread = threading.Thread(target=self.serve_forever, name="schema-registry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.pull_trigger()
        if self._thread is not None:
            self._thread.join(10)
        self.close()

    def _close_sockets(self) -> None:
        if self._tls is not None:
            self._tls.close()
        for dispatcher in list(self._map.values()):
            try:
                dispatcher.close()
            except OSError:
                pass
        self._httpd.task_dispatcher.shutdown(cancel_pending=True, timeout=5)

    def close(self) -> None:
        """Close the listening socket, every connection, the workers, the metrics endpoint and the store
        (after ``serve_forever`` returned)."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        began = time.monotonic()
        self._close_sockets()
        if self.exporter is not None:
            self.exporter.stop()
        self.registry.store.close()
        log.debug("registry server closed in %.2fs", time.monotonic() - began)

