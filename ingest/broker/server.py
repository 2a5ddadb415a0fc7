"""The broker's network layer: an acceptor and its processor threads; frames in, replies out; knows nothing about storage.

Kafka 0.7's ``SocketServer``: one acceptor thread hands each new connection,
round robin, to one of ``num.threads`` :class:`~ingest.broker.processor.Processor`
threads. The concurrency model, the bounds on what one connection can cost the
others, the handling of bad frames and the graceful stop are described in
docs/protocol.md, "Concurrency model". The broker that uses this layer
(LogManager, handlers, ZooKeeper) is :class:`ingest.broker.broker.BrokerServer`.
"""
from __future__ import annotations

import errno
import itertools
import logging
import socket
import ssl
import threading
import time
from typing import Callable

from ingest.broker.processor import Dispatcher, Processor, RequestBudget
from ingest.errors import ConfigError
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire.errors import ErrorCode

log = logging.getLogger(__name__)

ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 2.0
"""Pause after accept fails for lack of descriptors: doubles from MIN up to MAX, reset by a success."""
LOG_INTERVAL_S = 30.0
"""At most one log line per (client host, reason) per interval; the rest are counted."""

_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class SocketServer:
    """Accepts connections on ``host:port`` and serves frames through ``dispatcher``.

    Thread-safe: ``start``/``stop`` may be called from any thread (once each).
    ``port`` is the bound port (useful when configured as 0). The bounds are
    described in docs/protocol.md, "Concurrency model"; the keyword arguments
    are the ``server.properties`` keys of the same meaning; ``ssl_context`` makes it a TLS listener.
    """

    def __init__(self, host: str, port: int, dispatcher: Dispatcher, *, max_request_bytes: int,
                 send_buffer: int = 0, receive_buffer: int = 0, num_threads: int = 2,
                 drain_timeout_s: float = 10.0, queued_max_request_bytes: int = 128 * 1024 * 1024,
                 idle_timeout_s: float = 600.0, partial_timeout_s: float = 30.0,
                 monotonic: Callable[[], float] | None = None, name: str = "broker",
                 bind_keys: str = "'hostname' and 'port'", ssl_context: ssl.SSLContext | None = None) -> None:
        self.name = name
        self.ssl_context = ssl_context   # TLS on every connection (a listener of protocol SSL), or None
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
                f"cannot listen on {host}:{port}: {exc.strerror or exc}; check {bind_keys} "
                "(another broker may already use this port)") from exc
        self._listener.settimeout(0.5)
        self.host, self.port = self._listener.getsockname()[:2]
        self._processors = [Processor(i, self) for i in range(num_threads)]
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{name}-acceptor", daemon=True)
        self._stopping = threading.Event()

    @classmethod
    def from_config(cls, config, dispatcher: Dispatcher, host: str, port: int, **kw) -> "SocketServer":
        """A server with the bounds of a broker config (``SERVER_CONFIG``); ``kw``: ``name``, ``bind_keys``,
        ``ssl_context``."""
        return cls(host, port, dispatcher, **kw,
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
        log.info("%s: listening on %s:%d%s with %d network threads", self.name, self.host, self.port,
                 " (TLS)" if self.ssl_context is not None else "", len(self._processors))
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
        log.info("%s: network layer on port %d stopped", self.name, self.port)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self._processors) and self._acceptor.is_alive()
