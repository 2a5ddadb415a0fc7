"""Raw wire requests to a broker for black-box tests: produce with an ack, fetch a whole partition.

    with WireClient(b.host, b.port) as c:          # one connection for many requests
        assert c.produce_ack("t", [b"a", b"b"]).error == ErrorCode.NONE
        assert c.fetch_all("t") == [b"a", b"b"]
    produce_ack(b, "t", [b"c"]); fetch_all(b, "t")   # one connection per call

Requests and responses are the protocol's own classes (``ingest.wire.protocol``).
"""
from __future__ import annotations

import socket

from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set

FETCH_BYTES = 1 << 20


class WireClient:
    """One blocking connection to a broker at ``host:port``."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)

    def ask(self, request, response_cls):
        """Send ``request`` and decode its answer as ``response_cls``."""
        self.sock.sendall(request.encode())
        return response_cls.decode(p.recv_response(self.sock))

    def produce_ack(self, topic: str, payloads: list[bytes], partition: int = 0) -> p.ProduceAckResponse:
        return self.ask(p.ProduceAckRequest(topic, partition, encode_message_set(payloads)), p.ProduceAckResponse)

    def fetch_all(self, topic: str, partition: int = 0) -> list[bytes]:
        """Every payload of the partition from offset 0; asserts each fetch succeeds."""
        out, offset = [], 0
        while True:
            resp = self.ask(p.FetchRequest(topic, partition, offset, FETCH_BYTES), p.FetchResponse)
            assert resp.error == ErrorCode.NONE, f"fetch {topic}-{partition}@{offset}: {ErrorCode(resp.error).name}"
            msgs = list(iter_messages(resp.message_set, offset))
            if not msgs:
                return out
            out += [m.payload for m in msgs]
            offset = msgs[-1].next_offset

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ask(broker, request, response_cls):
    """One request on a connection of its own to ``broker`` (anything with ``host`` and ``port``)."""
    with WireClient(broker.host, broker.port) as c:
        return c.ask(request, response_cls)


def produce_ack(broker, topic: str, payloads: list[bytes], partition: int = 0) -> p.ProduceAckResponse:
    with WireClient(broker.host, broker.port) as c:
        return c.produce_ack(topic, payloads, partition)


def fetch_all(broker, topic: str, partition: int = 0) -> list[bytes]:
    with WireClient(broker.host, broker.port) as c:
        return c.fetch_all(topic, partition)
