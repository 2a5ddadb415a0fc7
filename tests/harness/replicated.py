"""Helpers for replication tests against real brokers and a real ZooKeeper.

Usage guide
-----------

::

    from tests.harness.brokers import broker_factory          # noqa: F401  (fixture)
    from tests.harness import replicated as r

    def test_x(broker_factory, zk_connect, zk):
        brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(min_isr=2))
        r.create_topic(zk, "t", {0: [0, 1, 2]})                 # the assignment znode, as `topics create` writes it
        state = r.wait_for_leader_state(zk, "t", 0)             # PartitionState with a live leader
        client = r.AcksClient(brokers)                          # acks=-1 produce to the current leader
        res = client.send("t", 0, [r.payload(1), r.payload(2)])
        assert res.status == r.ACKED
        msgs = r.read_committed(r.leader_of(brokers, state), "t", 0)   # FETCH up to the high watermark
        r.assert_replicas_identical(brokers, "t", 0, upto=r.high_watermark(leader, "t", 0))

Everything reads ZooKeeper through ``zk.retry`` and names znodes through
:mod:`ingest.znodes`. A produce outcome is one of ``ACKED`` (error 0: the offset
of its first message is known), ``REFUSED`` (NOT_LEADER_FOR_PARTITION,
LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS: the broker promises nothing was
appended) or ``MAYBE`` (timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a broken
connection: it may or may not be in the log). Segment bytes are read straight
from a broker's log dir (``<log.dir>/<topic>-<p>/<20-digit base>.kafka``).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ingest import znodes
from ingest.wire import protocol as p
from ingest.client.discovery import BrokerAddress
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.errors import IngestError
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set, scan
from tests.harness.wait import wait_until

log = logging.getLogger(__name__)

ACKED, REFUSED, MAYBE = "acked", "refused", "maybe"
REFUSING_CODES = frozenset({ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                            ErrorCode.NOT_ENOUGH_REPLICAS})
ID_WIDTH = 10


# --- broker config ------------------------------------------------------------------------

def replication_overrides(*, min_isr: int = 1, lag_ms: int = 1500, session_ms: int = 2000,
                          unclean: bool = False, **extra: Any) -> dict[str, Any]:
    """server.properties overrides for a fast replicated cluster (ZooKeeper is added by the factory)."""
    return {"min.insync.replicas": min_isr, "replica.lag.time.max.ms": lag_ms,
            "zk.sessiontimeout.ms": session_ms, "unclean.leader.election.enable": unclean,
            "replica.fetch.wait.max.ms": 100, "replica.high.watermark.checkpoint.interval.ms": 500,
            **extra}


# --- ZooKeeper ----------------------------------------------------------------------------

def create_topic(zk, topic: str, assignment: dict[int, list[int]]) -> None:
    """Write a replicated topic's assignment znode (what ``ingest topics create`` does)."""
    zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value(assignment), makepath=True)


def partition_state(zk, topic: str, partition: int) -> znodes.PartitionState | None:
    """The partition's state znode, or None while the controller has not written it."""
    if zk.retry(zk.exists, znodes.partition_state_path(topic, partition)) is None:
        return None
    data, stat = zk.retry(zk.get, znodes.partition_state_path(topic, partition))
    return znodes.PartitionState.parse(data, stat.version)


def controller(zk) -> int | None:
    """The broker id in ``/controller`` (None while there is no controller)."""
    if zk.retry(zk.exists, znodes.CONTROLLER) is None:
        return None
    try:
        return znodes.parse_controller(zk.retry(zk.get, znodes.CONTROLLER)[0])
    except Exception:  # noqa: BLE001 - vanished between exists and get
        return None


def controller_epoch(zk) -> int:
    """``/controller_epoch`` (0 while absent)."""
    if zk.retry(zk.exists, znodes.CONTROLLER_EPOCH) is None:
        return 0
    return int(zk.retry(zk.get, znodes.CONTROLLER_EPOCH)[0].decode().strip() or 0)


def live_broker_ids(zk) -> set[int]:
    return {int(c) for c in zk.retry(zk.get_children, znodes.BROKER_IDS)}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until truthy (returns its value) or fail naming ``what`` (``wait_until``)."""
    return wait_until(predicate, timeout, what, interval)


def wait_for_state(zk, topic: str, partition: int, pred: Callable[[znodes.PartitionState], bool],
                   timeout: float = 60.0, what: str = "") -> znodes.PartitionState:
    """Poll the state znode until ``pred(state)``; the assertion names the last state seen."""
    last: list[znodes.PartitionState | None] = [None]

    def check():
        last[0] = partition_state(zk, topic, partition)
        return last[0] if last[0] is not None and pred(last[0]) else None
    try:
        return wait_for(check, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc} ({topic}-{partition}, last state {last[0]})") from None


def wait_for_leader_state(zk, topic: str, partition: int, timeout: float = 60.0,
                          among: Iterable[int] | None = None) -> znodes.PartitionState:
    """The state once the partition has a leader that is registered (and in ``among`` if given)."""
    allowed = set(among) if among is not None else None

    def ok(s: znodes.PartitionState) -> bool:
        return s.leader >= 0 and s.leader in live_broker_ids(zk) and (allowed is None or s.leader in allowed)
    return wait_for_state(zk, topic, partition, ok, timeout, f"a live leader of {topic}-{partition}")


# --- processes ----------------------------------------------------------------------------

def by_id(brokers, broker_id: int):
    return next(b for b in brokers if b.broker_id == broker_id)


def sigstop(broker) -> None:
    os.kill(broker.pid, signal.SIGSTOP)


def sigcont(broker) -> None:
    if broker.running:
        os.kill(broker.pid, signal.SIGCONT)


# --- wire ---------------------------------------------------------------------------------

def payload(msg_id: int, size: int = 100) -> bytes:
    """A checkable message: its id, then filler to ``size`` bytes."""
    head = b"id%0*d|" % (ID_WIDTH, msg_id)
    return head + b"x" * max(0, size - len(head))


def payload_id(data: bytes) -> int:
    if not data.startswith(b"id") or data[2 + ID_WIDTH:3 + ID_WIDTH] != b"|":
        raise ValueError(f"not a test payload: {data[:40]!r}")
    return int(data[2:2 + ID_WIDTH])


def request(host: str, port: int, req: Any, response_cls: type, timeout: float = 10.0):
    """One request on a fresh connection; OSError/ConnectionError propagate."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(req.encode())
        return response_cls.decode(p.recv_response(s))


def addresses(brokers) -> list[BrokerAddress]:
    return [BrokerAddress(b.broker_id, b.host, b.port) for b in brokers]


def metadata(brokers, timeout_s: float = 3.0) -> ReplicaMetadata:
    """A ReplicaMetadata bootstrapped from the test's brokers (only running ones are asked first)."""
    return ReplicaMetadata(lambda: addresses(sorted(brokers, key=lambda b: not b.running)),
                           timeout_s=timeout_s, max_age_s=0.5)


@dataclass(frozen=True)
class ProduceResult:
    status: str            # ACKED, REFUSED or MAYBE
    error: int             # wire code, or -1 for a connection failure / no leader found
    offset: int = -1
    leader: int = -1
    detail: str = ""


class AcksClient:
    """Produces with PRODUCE_ACKS to the partition's current leader (TOPIC_METADATA via ReplicaMetadata).

    ``send`` makes one attempt and never retries (a retry would duplicate a
    batch that was appended but not acknowledged); it first waits up to
    ``leader_wait_s`` for a leader to be known.
    """

    def __init__(self, brokers, *, timeout_ms: int = 5000, leader_wait_s: float = 10.0) -> None:
        self.meta = metadata(brokers)
        self.timeout_ms = timeout_ms
        self.leader_wait_s = leader_wait_s

    def send(self, topic: str, partition: int, payloads: list[bytes], *, acks: int = -1) -> ProduceResult:
        try:
            addr = self.meta.wait_for_leader(topic, partition, time.monotonic() + self.leader_wait_s)
        except (IngestError, ValueError) as exc:      # ValueError: not (yet) known as replicated
            return ProduceResult(REFUSED, ErrorCode.LEADER_NOT_AVAILABLE, detail=f"no leader: {exc}")
        req = p.ProduceAcksRequest(acks, self.timeout_ms, p.ProduceRequest(topic, partition,
                                                                          encode_message_set(payloads)))
        try:
            resp = request(addr.host, addr.port, req, p.ProduceAckResponse, timeout=self.timeout_ms / 1000 + 5)
        except (OSError, ConnectionError, IngestError) as exc:
            self.meta.invalidate(topic)
            if isinstance(exc, ConnectionRefusedError):   # never reached the broker
                return ProduceResult(REFUSED, -1, leader=addr.broker_id, detail=f"refused connection: {exc}")
            return ProduceResult(MAYBE, -1, leader=addr.broker_id, detail=f"{type(exc).__name__}: {exc}")
        if resp.error == ErrorCode.NONE:
            return ProduceResult(ACKED, 0, resp.offset, addr.broker_id)
        self.meta.invalidate(topic)
        status = REFUSED if resp.error in REFUSING_CODES else MAYBE
        return ProduceResult(status, resp.error, leader=addr.broker_id)


def high_watermark(broker, topic: str, partition: int) -> int:
    """OFFSETS latest (-1) from ``broker``: its high watermark when it leads the partition.

    Raises AssertionError naming the error code when the broker refuses.
    """
    resp = request(broker.host, broker.port, p.OffsetsRequest(topic, partition, p.LATEST_TIME, 1), p.OffsetsResponse)
    assert resp.error == 0 and resp.offsets, f"OFFSETS latest of {topic}-{partition} from broker " \
                                             f"{broker.broker_id}: error {resp.error}, offsets {resp.offsets}"
    return resp.offsets[0]


def wait_until_leading(broker, topic: str, partition: int, timeout: float = 60.0) -> int:
    """Wait until ``broker`` answers OFFSETS latest as the partition's leader (its high watermark, returned).

    ZooKeeper shows an election before the elected broker has applied it (it answers NOT_LEADER until
    then); a test that sends one request right after the election waits for this first."""
    def leading():
        try:
            return (high_watermark(broker, topic, partition),)
        except AssertionError:
            return None
    return wait_for(leading, timeout, f"broker {broker.broker_id} serving {topic}-{partition} as its leader")[0]


def read_committed(broker, topic: str, partition: int, start: int = 0, upto: int | None = None,
                   max_size: int = 1 << 20) -> list[tuple[int, int, bytes]]:
    """``(offset, next_offset, payload)`` of every message from ``start`` to the broker's high
    watermark (or ``upto``), read with FETCH; asserts every fetch is CRC-clean."""
    hw = high_watermark(broker, topic, partition) if upto is None else upto
    out: list[tuple[int, int, bytes]] = []
    off = start
    while off < hw:
        resp = request(broker.host, broker.port, p.FetchRequest(topic, partition, off, max_size), p.FetchResponse)
        assert resp.error == 0, f"FETCH {topic}-{partition}@{off} from broker {broker.broker_id}: error {resp.error}"
        r = scan(resp.message_set)
        assert r.error is None or r.cut_off, f"FETCH {topic}-{partition}@{off}: bad bytes: {r.error}"
        msgs = [(m.offset, m.next_offset, m.payload) for m in iter_messages(resp.message_set, off)]
        assert msgs, f"FETCH {topic}-{partition}@{off} below the high watermark {hw} returned no message"
        out.extend(m for m in msgs if m[0] < hw)
        off = msgs[-1][1]
    return out


# --- log dirs -----------------------------------------------------------------------------

def segments(broker, topic: str, partition: int) -> list[tuple[int, Path]]:
    """``(base offset, path)`` of every segment file, oldest first."""
    d = Path(broker.log_dir) / f"{topic}-{partition}"
    return sorted((int(f.name.split(".")[0]), f) for f in d.glob("*.kafka")) if d.is_dir() else []


def log_end(broker, topic: str, partition: int) -> int:
    """The replica's log end offset as its files show it (0 when it has no segment)."""
    segs = segments(broker, topic, partition)
    return segs[-1][0] + segs[-1][1].stat().st_size if segs else 0


def log_bytes(broker, topic: str, partition: int, upto: int) -> tuple[int, bytes]:
    """``(first base offset, bytes from it to upto)`` from the segment files; asserts no gap."""
    segs = segments(broker, topic, partition)
    assert segs, f"broker {broker.broker_id} has no segment of {topic}-{partition}"
    first = segs[0][0]
    chunks, pos = [], first
    for base, path in segs:
        if base >= upto:
            break
        assert base == pos, f"broker {broker.broker_id} {topic}-{partition}: segment {base} after a gap at {pos}"
        data = path.read_bytes()
        chunks.append(data[:upto - base])
        pos = base + len(data)
    assert pos >= upto, f"broker {broker.broker_id} {topic}-{partition}: log ends at {pos}, below {upto}"
    return first, b"".join(chunks)


def replica_bytes_differ(brokers, topic: str, partition: int, upto: int) -> str | None:
    """None when every replica holds the same bytes in ``[max first base, upto)``, else what differs."""
    logs = {b.broker_id: log_bytes(b, topic, partition, upto) for b in brokers}
    lo = max(first for first, _ in logs.values())
    views = {bid: data[lo - first:] for bid, (first, data) in logs.items()}
    ref_id, ref = next(iter(views.items()))
    for bid, data in views.items():
        if data != ref:
            at = next((i for i, (x, y) in enumerate(zip(data, ref)) if x != y), min(len(data), len(ref)))
            return (f"{topic}-{partition}: broker {bid} differs from broker {ref_id} at offset {lo + at} "
                    f"(compared [{lo}, {upto}))")
    return None


def assert_replicas_identical(brokers, topic: str, partition: int, upto: int, timeout: float = 60.0) -> None:
    """Every replica's segment bytes equal up to ``upto`` (waits until each log reaches it)."""
    try:
        wait_for(lambda: all(log_end(b, topic, partition) >= upto for b in brokers), timeout,
                 f"every replica of {topic}-{partition} to reach offset {upto}")
    except AssertionError as exc:
        ends = ", ".join(f"broker {b.broker_id} at {log_end(b, topic, partition)}" for b in brokers)
        raise AssertionError(f"{exc}; log ends: {ends}") from None
    diff = replica_bytes_differ(brokers, topic, partition, upto)
    assert diff is None, diff
