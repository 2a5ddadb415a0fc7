"""The registry's HTTPS listener: TLS ended on an asyncio loop, the plain HTTP handed to waitress.

waitress serves plain sockets only, and its connections are written to by worker threads
while its event loop reads them, which an OpenSSL connection does not allow. So an
``https://`` listener is a front of its own: an asyncio server (``ssl=`` context, handshake
bounded by ``connections.max.idle.ms``) that, for each client that completed the handshake,
makes a connected socket pair, hands one end to waitress as if it had been accepted from the
client's address (:meth:`~ingest.events.registry_server.RegistryServer` adopts it on its own
loop), and copies bytes both ways between the TLS stream and the other end, at most
:data:`CHUNK` bytes in flight per direction. waitress then applies every limit it applies to
plain connections (``max.connections`` with its 503, the idle timeout, body sizes); its own
TCP socket does not listen, so there is no plaintext door beside the TLS one.

A client that fails the handshake (plain HTTP on the HTTPS port, an untrusted or missing
client certificate) is closed without an answer, as asyncio does (it reports handshake failures
only in its debug mode; other errors of the loop are logged, rate-limited per client host). Past
``max_open`` open connections a new one is closed at once (waitress answers 503 before that).

Concurrency contract: one thread runs the loop; :meth:`TlsFront.close` may be called from any thread.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from typing import Any, Callable, Mapping

from ingest.errors import ConfigError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

CHUNK = 64 * 1024

_events = RateLimitedLog(log)


def server_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context of an https listener from the ``ssl.*`` keys (TLS 1.2 or newer).

    Raises:
        ConfigError: no ``ssl.keystore.location``, a file that cannot be read or is no PEM
            certificate and key, a wrong ``ssl.key.password``, or REQUESTED/REQUIRED client
            authentication without ``ssl.truststore.location``.
    """
    keystore = config["ssl.keystore.location"]
    if not keystore:
        raise ConfigError("an https listener needs ssl.keystore.location: a PEM file with the certificate chain and "
                          "the private key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(keystore, password=config["ssl.key.password"] or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.keystore.location={keystore}: cannot load a PEM certificate chain and private key "
                          f"(with ssl.key.password if the key is encrypted): {exc}") from None
    mode = config["ssl.client.authentication"]
    if mode != "NONE":
        truststore = config["ssl.truststore.location"]
        if not truststore:
            raise ConfigError(f"ssl.client.authentication={mode} needs ssl.truststore.location: a PEM bundle of "
                              "the CAs that sign client certificates")
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.truststore.location={truststore}: cannot load PEM CA certificates: {exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if mode == "REQUIRED" else ssl.CERT_OPTIONAL
    return ctx


class TlsFront:
    """The listening TLS socket on ``host:port`` and its loop thread (module docstring).

    Args:
        hand_over: called on the loop thread with (plain socket, client address) for each
            client past the handshake; it must take the socket over (non-blocking).
    """

    def __init__(self, host: str, port: int, context: ssl.SSLContext, hand_over: Callable[[socket.socket, tuple], None],
                 *, max_open: int, handshake_timeout_s: float, backlog: int) -> None:
        self._hand_over = hand_over
        self._max_open = max_open
        self._open = 0
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        try:
            sock = socket.create_server((host, port), backlog=backlog)
        except OSError as exc:
            self._loop.close()
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        self.address = sock.getsockname()[:2]
        self._server = self._loop.run_until_complete(asyncio.start_server(
            self._client, sock=sock, ssl=context, ssl_handshake_timeout=handshake_timeout_s, limit=CHUNK))
        self._thread = threading.Thread(target=self._loop.run_forever, name="schema-registry-tls", daemon=True)
        self._thread.start()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        exc = context.get("exception")
        transport = context.get("transport")
        peer = transport.get_extra_info("peername") if transport is not None else None
        client = f"{peer[0]}:{peer[1]}" if peer else "?"
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            _events.warning(client, "tls handshake", "closed the connection of %s: TLS handshake failed: %s",
                            client, exc)
        else:
            log.error("TLS listener: %s", context.get("message"), exc_info=exc)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        if self._open >= self._max_open:
            writer.close()
            return
        self._open += 1
        raw = writer.get_extra_info("socket")
        if raw is not None and raw.family in (socket.AF_INET, socket.AF_INET6):
            # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and one accepted from
            # socket.create_server has proto 0: without it, the close_notify after an answer waits for the
            # client's delayed ACK (40 ms per request, measured)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        inner, outer = socket.socketpair()
        try:
            outer.setblocking(False)
            self._hand_over(outer, (str(peer[0]), int(peer[1])))
            inner_reader, inner_writer = await asyncio.open_connection(sock=inner, limit=CHUNK)
        except OSError:
            inner.close()
            outer.close()
            writer.close()
            self._open -= 1
            return
        try:
            await asyncio.gather(self._copy(reader, inner_writer, half_close=True),
                                 self._copy(inner_reader, writer, half_close=False))
        except asyncio.CancelledError:
            pass  # the listener is closing: the connection ends with it
        finally:
            self._open -= 1
            for w in (inner_writer, writer):
                w.close()

    @staticmethod
    async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, half_close: bool) -> None:
        """Bytes from ``source`` to ``sink`` until end of stream or an error; then end ``sink``."""
        try:
            while True:
                data = await source.read(CHUNK)
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            try:
                if half_close and sink.can_write_eof():
                    sink.write_eof()  # the client is done sending; waitress may still answer
                else:
                    sink.close()
            except OSError:
                sink.close()

    def close(self) -> None:
        """Stop listening, close every connection, stop the loop thread."""
        if self._loop.is_closed():
            return

        async def _shutdown() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=5) if tasks else None
            await asyncio.sleep(0)  # the closed transports' callbacks

        try:
            asyncio.run_coroutine_threadsafe(_shutdown(), self._loop).result(10)
        except (RuntimeError, TimeoutError):  # the loop stopped already
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
