"""Background load for replication fault tests: an acks=-1 producer and a fetching reader.

Usage::

    prod = ProducerThread(AcksClient(brokers), "t", 0)
    reader = ReaderThread(brokers, "t", 0)
    prod.start(); reader.start()
    ... kill brokers ...
    prod.stop(); reader.stop()
    final = {offset: payload_id(data) for offset, _, data in read_committed(leader, "t", 0)}
    problems = prod.check(final) + reader.check(final)

The producer gives every batch fresh ids and never sends an id twice, so an id
can appear in the log at most once; each batch's outcome (ACKED with its offset,
REFUSED, MAYBE) is kept. The reader fetches from the current leader and records
for every fetch whether its bytes pass the CRC scan, whether the fetched range
ends at or below the high watermark the same broker reports right after, and
the id it saw at each offset (a committed message must still be there at the end).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter

from ingest.wire import protocol as p
from ingest.errors import IngestError
from ingest.wire.errors import ErrorCode, error_name
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import scan
from tests.harness.replicated import ACKED, MAYBE, REFUSED, AcksClient, metadata, payload, payload_id

log = logging.getLogger(__name__)


class ProducerThread(threading.Thread):
    """Sends batches of ``batch`` fresh ids until stopped; ``outcomes`` is ``[(t, ids, ProduceResult)]``."""

    def __init__(self, client: AcksClient, topic: str, partition: int, *, batch: int = 5,
                 size: int = 100, first_id: int = 1, acks: int = -1) -> None:
        super().__init__(name=f"producer-{topic}-{partition}", daemon=True)
        self.client, self.topic, self.partition = client, topic, partition
        self.batch, self.size, self.next_id, self.acks = batch, size, first_id, acks
        self.outcomes: list[tuple[float, range, object]] = []
        self._stop_event = threading.Event()
        self.crashed: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                ids = range(self.next_id, self.next_id + self.batch)
                self.next_id += self.batch
                res = self.client.send(self.topic, self.partition, [payload(i, self.size) for i in ids],
                                       acks=self.acks)
                self.outcomes.append((time.monotonic(), ids, res))
                if res.status != ACKED:
                    self._stop_event.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.crashed = exc
            log.exception("producer thread crashed")

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)

    def ids(self, status: str) -> set[int]:
        return {i for _, ids, res in self.outcomes if res.status == status for i in ids}

    def counts(self) -> Counter:
        return Counter(res.status for _, _, res in self.outcomes)

    def error_counts(self) -> Counter:
        return Counter(res.error for _, _, res in self.outcomes if res.status != ACKED)

    def first_ack_after(self, t: float) -> float | None:
        return next((ts for ts, _, res in self.outcomes if ts > t and res.status == ACKED), None)

    def check(self, final: dict[int, int]) -> list[str]:
        """Problems against the final log ``{offset: id}`` (empty list: all promises kept)."""
        problems = [f"producer thread crashed: {self.crashed!r}"] if self.crashed else []
        seen = Counter(final.values())
        where = {i: off for off, i in final.items()}
        for _, ids, res in self.outcomes:
            for i in ids:
                n = seen.get(i, 0)
                if res.status == ACKED and n != 1:
                    problems.append(f"acknowledged id {i} (batch at offset {res.offset}, leader {res.leader}) "
                                    f"is in the final log {n} times")
                elif res.status == MAYBE and n > 1:
                    problems.append(f"unacknowledged id {i} is in the final log {n} times")
                elif res.status == REFUSED and n:
                    problems.append(f"id {i} refused with error {res.error} by broker {res.leader} is in the "
                                    f"final log at offset {where[i]}")
            if res.status == ACKED and seen.get(ids[0]) == 1 and where[ids[0]] != res.offset:
                problems.append(f"batch acknowledged at offset {res.offset} (leader {res.leader}) sits at "
                                f"offset {where[ids[0]]} in the final log")
        known = self.ids(ACKED) | self.ids(MAYBE) | self.ids(REFUSED)
        strangers = sorted(set(seen) - known)
        if strangers:
            problems.append(f"{len(strangers)} ids in the final log were never sent: {strangers[:10]}")
        return problems[:50]


class ReaderThread(threading.Thread):
    """Fetches the partition from its current leader, from offset 0, until stopped."""

    def __init__(self, brokers, topic: str, partition: int, *, max_size: int = 64 << 10) -> None:
        super().__init__(name=f"reader-{topic}-{partition}", daemon=True)
        self.meta = metadata(brokers)
        self.topic, self.partition, self.max_size = topic, partition, max_size
        self.offset = 0
        self.seen: dict[int, int] = {}
        self.fetches = 0
        self.errors: Counter = Counter()
        self.crc_failures: list[str] = []
        self.above_hw: list[str] = []
        self.changed: list[str] = []
        self.bad_errors: list[str] = []
        self._stop_event = threading.Event()
        self.crashed: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                try:
                    addr = self.meta.leader(self.topic, self.partition)
                except (IngestError, ValueError) as exc:
                    self.errors[type(exc).__name__] += 1
                    self.meta.invalidate(self.topic)
                    self._stop_event.wait(0.1)
                    continue
                try:
                    with socket.create_connection((addr.host, addr.port), timeout=10) as s:
                        while not self._stop_event.is_set() and self._fetch_once(s, addr.broker_id):
                            pass
                except (OSError, ConnectionError, IngestError) as exc:
                    self.errors[type(exc).__name__] += 1
                self.meta.invalidate(self.topic)
                self._stop_event.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.crashed = exc
            log.exception("reader thread crashed")

    def _ask(self, s: socket.socket, req, cls):
        s.sendall(req.encode())
        return cls.decode(p.recv_response(s))

    def _fetch_once(self, s: socket.socket, broker_id: int) -> bool:
        """One FETCH + OFFSETS on the leader's connection; False to look the leader up again."""
        off = self.offset
        resp = self._ask(s, p.FetchRequest(self.topic, self.partition, off, self.max_size), p.FetchResponse)
        self.fetches += 1
        if resp.error:
            self.errors[error_name(resp.error)] += 1
            if resp.error not in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE):
                # a committed offset is valid on every later leader: anything else is a broken promise
                self.bad_errors.append(f"FETCH {self.topic}-{self.partition}@{off} from leader {broker_id}: "
                                       f"{error_name(resp.error)}")
            return False
        data = resp.message_set
        r = scan(data)
        if r.error is not None and not r.cut_off:
            self.crc_failures.append(f"FETCH {self.topic}-{self.partition}@{off} from broker {broker_id} "
                                     f"({len(data)} bytes): {r.error}")
        msgs = list(iter_messages(data[:r.end], off))
        if not msgs:
            self._stop_event.wait(0.02)
            return True
        end = msgs[-1].next_offset
        hw_resp = self._ask(s, p.OffsetsRequest(self.topic, self.partition, p.LATEST_TIME, 1), p.OffsetsResponse)
        if hw_resp.error == 0 and hw_resp.offsets and end > hw_resp.offsets[0]:
            self.above_hw.append(f"FETCH {self.topic}-{self.partition}@{off} from broker {broker_id} returned "
                                 f"messages up to {end}, but its high watermark right after was "
                                 f"{hw_resp.offsets[0]}")
        for m in msgs:
            i = payload_id(m.payload)
            prev = self.seen.setdefault(m.offset, i)
            if prev != i:
                self.changed.append(f"offset {m.offset}: first read id {prev}, later id {i} (broker {broker_id})")
        self.offset = end
        self._stop_event.wait(0.01)
        return True

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)

    def check(self, final: dict[int, int]) -> list[str]:
        """Problems: CRC failures, reads above the high watermark, messages read that are gone, fetch
        errors other than "not (or no) leader" (e.g. OFFSET_OUT_OF_RANGE at an offset read before)."""
        problems = [f"reader thread crashed: {self.crashed!r}"] if self.crashed else []
        problems += self.crc_failures[:10] + self.above_hw[:10] + self.changed[:10] + self.bad_errors[:10]
        gone = [(off, i) for off, i in sorted(self.seen.items()) if final.get(off) != i]
        if gone:
            problems.append(f"{len(gone)} messages a consumer read are not at their offset in the final log "
                            f"(first: offset {gone[0][0]} id {gone[0][1]}, final has "
                            f"{final.get(gone[0][0])})")
        return problems
