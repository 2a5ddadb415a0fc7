"""Deferred replies (acks=-1 produces, followers' parked fetches) reach their client however they race
with the network thread: completed before they are queued, or later by another thread."""
from __future__ import annotations

import socket
import threading

from ingest.broker import protocol as p
from ingest.broker.reply import Reply
from ingest.broker.server import SocketServer
from ingest.errors import ErrorCode


class Deferring:
    """Answers every request with a deferred reply; ``early`` ones are completed inside dispatch
    (as when a purgatory's own check after registering completes the op at once)."""

    def __init__(self) -> None:
        self.n = 0
        self.timers: list[threading.Timer] = []

    def dispatch(self, kind: int, body: memoryview, client: str) -> Reply:
        self.n += 1
        reply = Reply.deferred()
        answer = [p.ProduceAckResponse(ErrorCode.NONE, self.n).encode()]
        if self.n % 2:
            reply.complete(answer)                       # completed before the server queues it
        else:
            t = threading.Timer(0.05, reply.complete, (answer,))   # completed later, by another thread
            self.timers.append(t)
            t.start()
        return reply


def test_deferred_replies_completed_early_or_late_are_all_written():
    d = Deferring()
    server = SocketServer("127.0.0.1", 0, d, max_request_bytes=1 << 20, num_threads=1).start()
    try:
        with socket.create_connection((server.host, server.port), timeout=15) as s:
            frame = p.ProduceAckRequest("t", 0, b"").encode()
            for i in range(1, 7):
                s.sendall(frame)
                resp = p.ProduceAckResponse.decode(p.recv_response(s))   # times out (fails) if never written
                assert resp == p.ProduceAckResponse(ErrorCode.NONE, i)
    finally:
        for t in d.timers:
            t.join()
        server.stop()
