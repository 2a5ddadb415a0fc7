"""Acknowledged writes that can be checked afterwards: one new numbered message per acks=-1 request.

A :class:`Writer` thread sends PRODUCE_ACKS (acks=-1) requests, each with one
message no request ever carried before (``tag`` + a 9-digit number), to a target
that names a broker and an open socket: :class:`LeaderTarget` (the partition's
current leader by TOPIC_METADATA, reconnecting after any error) or
:class:`FixedTarget` (one broker, e.g. a deposed leader, or a socket made inside
a network namespace). Every request is recorded as an :class:`Attempt` with its
send/answer times, the answering error code and the acknowledged offset.

:func:`check_no_loss` then holds the committed log to the writers' records:
acknowledged -> in the log exactly once, at the acknowledged offset; refused
(NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS: nothing is
appended, by the protocol) -> not in the log; no answer or timed out -> at most once.
"""
from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ingest.wire import protocol as p
from ingest.client.discovery import BrokerAddress
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.errors import IngestError
from ingest.wire.errors import ErrorCode
from ingest.records.message_set import encode_message_set

log = logging.getLogger(__name__)

REFUSED = {ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS}


@dataclass
class Attempt:
    payload: bytes
    sent: float
    broker: int
    done: float = 0.0
    error: int | None = None  # None: no answer (connection failed or timed out)
    offset: int = -1

    @property
    def acked(self) -> bool:
        return self.error == ErrorCode.NONE


class Writer(threading.Thread):
    """Sends one new numbered message per PRODUCE_ACKS request (``acks``, -1 by default) until stopped.

    ``target()`` returns ``(broker_id, socket)`` to send to, or None to wait and
    ask again; ``lost(broker_id)`` is called after an error or a dead connection.
    """

    def __init__(self, topic: str, tag: str, target: Callable[[], tuple[int, socket.socket] | None],
                 lost: Callable[[int], None] = lambda b: None, timeout_ms: int = 2000, partition: int = 0,
                 acks: int = -1, interval_s: float = 0.0) -> None:
        super().__init__(name=f"writer-{tag}", daemon=True)
        self.topic, self.partition, self.acks, self.interval_s = topic, partition, acks, interval_s
        self.tag, self.target, self.lost, self.timeout_ms = tag, target, lost, timeout_ms
        self.attempts: list[Attempt] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop_flag.is_set():
            t = self.target()
            if t is None:
                time.sleep(0.1)
                continue
            broker, sock = t
            a = Attempt(f"{self.tag}{n:09d}".encode(), time.monotonic(), broker)
            n += 1
            self.attempts.append(a)
            req = p.ProduceAcksRequest(self.acks, self.timeout_ms, p.ProduceRequest(self.topic, self.partition,
                                                                          encode_message_set([a.payload])))
            try:
                sock.sendall(req.encode())
                resp = p.ProduceAckResponse.decode(p.recv_response(sock))
                a.error, a.offset = resp.error, resp.offset
            except (OSError, IngestError, ValueError) as exc:
                log.info("writer %s: %s gave no answer: %s", self.tag, a.payload, exc)
            a.done = time.monotonic()
            if not a.acked:
                self.lost(broker)
                time.sleep(0.05)
            elif self.interval_s:
                time.sleep(self.interval_s)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(60)
        assert not self.is_alive(), f"writer {self.tag} did not stop"

    def acked(self) -> list[Attempt]:
        return [a for a in self.attempts if a.acked]


class LeaderTarget:
    """A Writer target: the partition's current leader by TOPIC_METADATA, one cached connection."""

    def __init__(self, topic: str, brokers: list, partition: int = 0) -> None:
        self.topic, self.partition = topic, partition
        self.meta = ReplicaMetadata(lambda: [BrokerAddress(b.broker_id, b.host, b.port) for b in brokers],
                                    timeout_s=2.0, max_age_s=5.0)
        self.conn: tuple[int, socket.socket] | None = None
        self.refresh = False

    def __call__(self) -> tuple[int, socket.socket] | None:
        if self.conn is None:
            try:
                addr = self.meta.leader(self.topic, self.partition, refresh=self.refresh)
                self.conn = (addr.broker_id, socket.create_connection((addr.host, addr.port), timeout=4.0))
            except (IngestError, OSError) as exc:
                log.info("no leader to write to yet: %s", exc)
                self.refresh = True
                return None
        self.refresh = False
        return self.conn

    def lost(self, broker: int) -> None:
        if self.conn is not None:
            self.conn[1].close()
        self.conn, self.refresh = None, True


class FixedTarget:
    """A Writer target: one broker, whatever it is now, through ``connect()`` (reconnects after a loss)."""

    def __init__(self, broker_id: int, connect: Callable[[], socket.socket]) -> None:
        self.broker_id, self.connect = broker_id, connect
        self.sock: socket.socket | None = None

    def __call__(self) -> tuple[int, socket.socket] | None:
        if self.sock is None:
            try:
                self.sock = self.connect()
            except OSError as exc:
                log.info("cannot connect to broker %d: %s", self.broker_id, exc)
                return None
        return self.broker_id, self.sock

    def lost(self, broker: int) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None


def check_no_loss(writers: list[Writer], msgs: list[tuple[int, bytes]]) -> dict[str, int]:
    """Every acked message exactly once at its acked offset; refused never; the rest at most once.

    ``msgs``: ``(offset, payload)`` of the whole committed log. Returns counts of acked,
    refused and unknown (no answer, timed out) attempts.
    """
    count = collections.Counter(pl for _, pl in msgs)
    at = {pl: off for off, pl in msgs}
    dup = [pl for pl, c in count.items() if c > 1]
    assert not dup, f"messages in the log more than once: {dup[:10]}"
    stats = collections.Counter()
    for w in writers:
        for a in w.attempts:
            if a.acked:
                stats["acked"] += 1
                assert count[a.payload] == 1, f"acknowledged {a.payload!r} (offset {a.offset}) is lost"
                assert at[a.payload] == a.offset, f"{a.payload!r} acked at {a.offset} but sits at {at[a.payload]}"
            elif a.error is not None and a.error in REFUSED:
                stats["refused"] += 1
                assert count[a.payload] == 0, f"{a.payload!r} was refused ({ErrorCode(a.error).name}) but is in the log"
            else:
                stats["unknown"] += 1
    return dict(stats)


def errors_of(attempts: list[Attempt]) -> dict[str, int]:
    return dict(collections.Counter("NO ANSWER" if a.error is None else ErrorCode(a.error).name for a in attempts))
