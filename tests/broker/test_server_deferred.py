"""Deferred replies (acks=-1 produces, followers' parked fetches) reach their client however they race
with the network thread: completed before they are queued, or later by another thread."""
from __future__ import annotations

import socket
import threading

from ingest.broker.reply import Reply
from ingest.broker.server import SocketServer
from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode


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


class Holding:
    """Answers a PRODUCE_ACK to topic ``held`` with a deferred reply that holds its connection (completed
    by the test), every other request at once; records the order in which requests were dispatched."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []
        self.held: list[Reply] = []

    def dispatch(self, kind: int, body: memoryview, client: str) -> Reply:
        topic = p.ProduceAckRequest.decode(body).topic
        self.dispatched.append(topic)
        if topic == "held":
            reply = Reply.deferred(hold=True)
            self.held.append(reply)
            return reply
        return Reply([p.ProduceAckResponse(ErrorCode.NONE, len(self.dispatched)).encode()])


def test_a_reply_that_holds_its_connection_keeps_its_later_requests_back_and_no_other_connection():
    d = Holding()
    server = SocketServer("127.0.0.1", 0, d, max_request_bytes=1 << 20, num_threads=1).start()
    try:
        with socket.create_connection((server.host, server.port), timeout=15) as held, \
                socket.create_connection((server.host, server.port), timeout=15) as other:
            held.sendall(b"".join(p.ProduceAckRequest(t, 0, b"").encode() for t in ("held", "after-1", "after-2")))
            other.sendall(p.ProduceAckRequest("other", 0, b"").encode())
            # the other connection, on the same (only) network thread, is served while the first is held
            assert p.ProduceAckResponse.decode(p.recv_response(other)).error == ErrorCode.NONE
            assert d.dispatched[0] == "held" and "after-1" not in d.dispatched and len(d.held) == 1
            d.held[0].complete([p.ProduceAckResponse(ErrorCode.COORDINATION_UNAVAILABLE, -1).encode()])
            answers = [p.ProduceAckResponse.decode(p.recv_response(held)) for _ in range(3)]
            assert [a.error for a in answers] == [ErrorCode.COORDINATION_UNAVAILABLE, ErrorCode.NONE, ErrorCode.NONE]
            assert d.dispatched == ["held", "other", "after-1", "after-2"]
    finally:
        server.stop()
