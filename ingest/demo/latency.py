"""End-to-end latency of the demo: producer send -> visible in the offline cluster.

A consumer group on the offline cluster (a thread of the demo) reads the
mirrored topics from the beginning; for every message it compares the event's
``header.time`` (set by the producer when it sends) with the moment the consumer
received it. Everything between is in the number: the producer's batching
(``queue.time``), the source broker's flush, the mirror's fetch and conditional
append, the offline broker's flush, and the consumer's own fetch back-off, as
the paper's "~10 s on average" also measured end to end.

Concurrency: one thread iterates the streams and appends to a list; the demo's
thread reads ``count`` and, after :meth:`LatencyProbe.stop`, the percentiles.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

from ingest.errors import ConsumerTimeoutError, IngestError
from ingest.events.header_reader import HeaderReader
from ingest.events.registry_client import RegistryClient

log = logging.getLogger(__name__)

PAPER_AVERAGE_S = 10.0


@dataclass(frozen=True)
class LatencySummary:
    count: int
    median_s: float
    p99_s: float
    mean_s: float
    max_s: float

    def line(self) -> str:
        return (f"end-to-end latency (producer send -> visible in the offline cluster): median {self.median_s:.2f} s, "
                f"p99 {self.p99_s:.2f} s, mean {self.mean_s:.2f} s, max {self.max_s:.2f} s over {self.count} messages "
                f"(paper: ~{PAPER_AVERAGE_S:.0f} s average)")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending, non-empty list."""
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(latencies_ms: list[int]) -> LatencySummary | None:
    if not latencies_ms:
        return None
    values = sorted(v / 1000.0 for v in latencies_ms)
    return LatencySummary(len(values), percentile(values, 50), percentile(values, 99),
                          sum(values) / len(values), values[-1])


class LatencyProbe:
    """Consumes ``topics`` (a regex) from the offline cluster and records receive time - header.time."""

    def __init__(self, zk_connect: str, registry_url: str, topics: str, *, group: str = "demo-latency") -> None:
        from ingest.client.consumer_group import ConsumerConnector  # deferred: kazoo, only for this topology

        self.connector = ConsumerConnector({
            "zk.connect": zk_connect, "groupid": group, "autooffset.reset": "smallest",
            "consumer.timeout.ms": 300, "backoff.increment.ms": 50, "autocommit.enable": False})
        self.headers = HeaderReader(RegistryClient(registry_url))
        self.topics = topics
        self.latencies_ms: list[int] = []
        self.first_event_ms: int | None = None  # the earliest header.time seen
        self.undecodable = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-probe", daemon=True)

    @property
    def count(self) -> int:
        return len(self.latencies_ms)

    def start(self) -> "LatencyProbe":
        # the demo's console shows steps, not the consumer group's rebalances
        logging.getLogger("ingest.client").setLevel(logging.WARNING)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            (stream,) = self.connector.create_streams_by_filter(self.topics, 1)
            while not self._stop.is_set():
                try:
                    for msg in stream:
                        received_ms = int(time.time() * 1000)
                        self._record(msg.payload, received_ms)
                        if self._stop.is_set():
                            break
                except ConsumerTimeoutError:
                    continue
        except IngestError as exc:  # reported by the demo as "no latency measured"
            log.error("latency probe stopped: %s", exc)

    def _record(self, payload: bytes, received_ms: int) -> None:
        try:
            header = self.headers.read(payload)
        except (IngestError, ValueError):
            header = None
        if header is None:
            self.undecodable += 1
            return
        self.latencies_ms.append(max(0, received_ms - header.time))
        if self.first_event_ms is None or header.time < self.first_event_ms:
            self.first_event_ms = header.time

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.count < count and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.count >= count

    def stop(self) -> LatencySummary | None:
        """Stop consuming (idempotent) and summarize what was measured."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            try:
                self.connector.shutdown()
            except IngestError as exc:
                log.warning("latency probe shutdown: %s", exc)
        return summarize(list(self.latencies_ms))
