"""A loopback TCP proxy in front of the real ZooKeeper, to lose a client's connection on purpose.

``stall()`` swallows what the client sends (its request is in flight, never
answered); ``stall(replies=True)`` lets requests reach ZooKeeper but swallows
the answers (a create lands, its caller never hears so). ``cut()`` then drops
every connection and refuses new ones, so the in-flight request fails with
kazoo's ``ConnectionLoss`` while the session lives on; ``heal()`` lets the
client reconnect to the same session.
"""
from __future__ import annotations

import socket
import threading


class ZkProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` (host, port) until closed."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._stalled: bool | None = None  # None: forward; False: swallow requests; True: swallow replies
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, name="zk-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self._stalled is not None and from_client != self._stalled:
                    continue  # swallowed: the request (or its answer) is lost until the cut
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stall(self, *, replies: bool = False) -> None:
        self._stalled = replies

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def heal(self) -> None:
        self._stalled = None
        self._open.set()

    def close(self) -> None:
        self.cut()
        self._listener.close()
