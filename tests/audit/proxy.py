"""A frame-aware TCP proxy between a client and a real broker, for injecting network faults.

Requests are ``size:int32 type:int16 body`` and responses ``size:int32 ...``
(docs/protocol.md); PRODUCE (0) and MULTIPRODUCE (3) have no response, every
other request has exactly one, in order. Faults (switched at run time):

- ``drop_produce``: fire-and-forget PRODUCE/MULTIPRODUCE frames are swallowed
  (the network lost them; an acks=0 producer cannot know).
- ``drop_acks``: the next N responses to PRODUCE_ACK (10) are swallowed after the
  broker appended the messages (a lost ack; the producer retries: at-least-once).
- ``refuse``: new and existing connections are closed at once (broker unreachable).

Threads: one accept thread, two per connection; the switches are plain attributes
read by those threads (a switch applies from the next frame on).
"""
from __future__ import annotations

import socket
import struct
import threading
from collections import deque

from tests.harness.net import free_port

SIZE = struct.Struct(">i")
TYPE = struct.Struct(">h")
NO_RESPONSE = {0, 3}
PRODUCE_ACK = 10


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, SIZE.size)
    if head is None:
        return None
    body = _read_exact(sock, SIZE.unpack(head)[0])
    return None if body is None else head + body


class FaultProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = free_port()
        self.drop_produce = False
        self.drop_acks = 0
        self.refuse = False
        self.dropped_frames = 0
        self.dropped_acks = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", self.port))
        self._server.listen(16)
        self._stop = False
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set_refuse(self, refuse: bool) -> None:
        self.refuse = refuse
        if refuse:
            with self._lock:
                conns, self._conns = self._conns, []
            for c in conns:
                _close(c)

    def close(self) -> None:
        self._stop = True
        _close(self._server)
        self.set_refuse(True)

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.refuse:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns += [client, upstream]
            expected: deque[bool] = deque()  # per request awaiting a response: forward it?
            cond = threading.Condition()
            threading.Thread(target=self._up, args=(client, upstream, expected, cond), daemon=True).start()
            threading.Thread(target=self._down, args=(client, upstream, expected, cond), daemon=True).start()

    def _up(self, client, upstream, expected, cond) -> None:
        try:
            while True:
                frame = _read_frame(client)
                if frame is None:
                    break
                kind = TYPE.unpack_from(frame, SIZE.size)[0] if len(frame) >= 6 else -1
                if kind in NO_RESPONSE:
                    if self.drop_produce:
                        self.dropped_frames += 1
                        continue
                else:
                    forward = True
                    if kind == PRODUCE_ACK and self.drop_acks > 0:
                        self.drop_acks -= 1
                        forward = False
                    with cond:
                        expected.append(forward)
                        cond.notify()
                upstream.sendall(frame)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def _down(self, client, upstream, expected, cond) -> None:
        try:
            while True:
                frame = _read_frame(upstream)
                if frame is None:
                    break
                with cond:
                    forward = expected.popleft() if expected else True
                if forward:
                    client.sendall(frame)
                else:
                    self.dropped_acks += 1
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
