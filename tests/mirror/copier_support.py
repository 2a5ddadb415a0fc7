"""Test support for the copier tests: a minimal counter, a test header format, produce and read helpers.

``TestCounter`` stands in for H4's PartitionCounter in these tests only (same methods: count, due_events,
state, published): it counts every message of each acknowledged set, so a test can check that the mirror
tier counted each source message exactly once across restarts. ``TestHeaders`` reads the header of the
test payloads ``session|seq|time|filler`` (the real HeaderReader decodes Avro events; the copier only
needs ``.read(payload) -> header with session, seq, time``).
"""
from __future__ import annotations

from typing import NamedTuple

from ingest.broker import protocol
from ingest.broker.message_set import encode_message_set, iter_messages, valid_prefix
from ingest.client.connection import BrokerConnection, check
from ingest.client.replica_metadata import ReplicaMetadata


class TestCounter:
    __test__ = False

    def __init__(self, state: dict | None = None) -> None:
        self.messages = (state or {}).get("messages", 0)

    def count(self, message_set: bytes) -> int:
        n = sum(1 for _ in iter_messages(message_set))
        self.messages += n
        return n

    def due_events(self, closing: bool = False) -> list[dict]:
        return []

    def state(self) -> dict:
        return {"messages": self.messages}

    def published(self, event_ids) -> None:
        pass


class Header(NamedTuple):
    time: int
    server: str
    service: str
    session: str
    seq: int


class TestHeaders:
    __test__ = False

    def read(self, payload: bytes) -> Header | None:
        parts = payload.split(b"|")
        if len(parts) < 4:
            return None
        return Header(int(parts[2]), "h", "svc", parts[0].decode(), int(parts[1]))


def payload(session: str, seq: int, time_ms: int = 1_700_000_000_000, size: int = 40) -> bytes:
    head = f"{session}|{seq}|{time_ms + seq}|".encode()
    return head + b"x" * max(0, size - len(head))


def produce_07(broker, topic: str, partition: int, payloads: list[bytes], codec: int = 0) -> int:
    """One PRODUCE_ACK of ``payloads`` (one set, compressed with ``codec``) to an unreplicated topic's broker."""
    conn = BrokerConnection(broker.host, broker.port, timeout_s=10)
    try:
        req = protocol.ProduceAckRequest(topic, partition, encode_message_set(payloads, codec))
        resp = conn.request(req.encode(), protocol.ProduceAckResponse)
        check(resp.error, f"PRODUCE_ACK {topic}/{partition}")
        return resp.offset
    finally:
        conn.close()


def produce_replicated(md: ReplicaMetadata, topic: str, partition: int, payloads: list[bytes], codec: int = 0) -> int:
    """One PRODUCE_ACKS (acks -1) of one set to the partition's leader."""
    addr = md.leader(topic, partition, refresh=True)
    conn = BrokerConnection(addr.host, addr.port, timeout_s=15)
    try:
        req = protocol.ProduceAcksRequest(-1, 10_000, protocol.ProduceRequest(topic, partition,
                                                                               encode_message_set(payloads, codec)))
        resp = conn.request(req.encode(), protocol.ProduceAckResponse)
        check(resp.error, f"PRODUCE_ACKS {topic}-{partition}")
        return resp.offset
    finally:
        conn.close()


def read_all(fetch_raw, start: int = 0) -> bytes:
    """Every valid byte of a partition from ``start`` (``fetch_raw(offset, max_bytes)``), as consumers see it."""
    out = bytearray()
    pos = start
    while True:
        chunk = fetch_raw(pos, 1 << 20)
        n = valid_prefix(chunk)
        if n == 0:
            return bytes(out)
        out += chunk[:n]
        pos += n
