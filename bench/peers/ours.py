"""This product in the peer benchmark: one real broker process and the ingest producer/consumer.

The broker is ``ingest broker start`` (``tests.harness.brokers.BrokerProcess``) with the settings
of bench/bench_clients.py: one partition, one network thread, the log flushed every 10,000
messages or 1 s (asynchronous flushing, as the paper configured every system). The producer is
``ingest.client.Producer`` (sync; ``batch`` messages per PRODUCE request, ``request.required.acks``
0 or 1); the consumer is ``SimpleConsumer.fetch`` with pulls of 200 KB (about 975 messages of 200
bytes), CRC-validated, and -- when the client has it -- ``SimpleConsumer.fetch_batch``.
"""
from __future__ import annotations

import logging
import time

from bench.peers.process import ServerGroup
from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from tests.harness.brokers import BrokerProcess

log = logging.getLogger(__name__)

PULL_BYTES = 200 * 1024
#: the broker of the client benchmarks: flushed every 10,000 messages or 1 s, one network thread
SETTINGS = {
    "num.partitions": 1, "log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
    "log.default.flush.scheduler.interval.ms": 200, "num.threads": 1,
    "log.file.size": 1 << 30, "socket.send.buffer": 1 << 20, "socket.receive.buffer": 1 << 20,
}


def produce_sync(config: dict, topic: str, msgs: list[bytes], batch: int) -> float:
    """Seconds for a sync ``Producer`` with ``config`` to send ``msgs``, ``batch`` per PRODUCE request.

    Raises RuntimeError if the producer counted a failed send.
    """
    with Producer({**config, "producer.type": "sync", "batch.size": batch}) as p:
        t0 = time.perf_counter()
        if batch == 1:
            for m in msgs:
                p.send(topic, [m])
        else:
            for i in range(0, len(msgs), batch):
                p.send(topic, msgs[i:i + batch])
        elapsed = time.perf_counter() - t0
        if p.stats["failed"]:
            raise RuntimeError(f"producer failures: {p.stats}")
    return elapsed


class Ours:
    """One ``ingest broker start`` process on 127.0.0.1."""

    name = "this product"

    def __init__(self, workdir: str, *, extra: dict | None = None, root: str | None = None) -> None:
        """``extra``: server.properties keys beside the benchmark's own; ``root``: the checkout to run."""
        self.broker = BrokerProcess(0, workdir, root=root, overrides={**SETTINGS, **(extra or {})})
        self.server = ServerGroup("ingest broker")
        self.version = "this checkout"
        self.has_fetch_batch = False

    def start(self) -> "Ours":
        self.broker.start()
        self.server.adopt(self.broker.pid)
        self.has_fetch_batch = hasattr(SimpleConsumer, "fetch_batch")  # the batch API, where it has landed
        return self

    def server_cpu(self) -> float:
        return self.server.cpu_seconds()

    def stop(self) -> list[int]:
        code = self.broker.stop()
        if code not in (0, None):
            log.warning("broker exited with %s", code)
        return self.server.stop()

    def produce(self, topic: str, msgs: list[bytes], batch: int, mode: str) -> float:
        """``batch`` messages per PRODUCE request; ``mode`` "ack" waits for each response (acks=1)."""
        if mode not in ("none", "ack"):
            raise ValueError(f"mode {mode!r}: allowed are none, ack (the broker has no transactions)")
        return produce_sync({"broker.list": self.broker.address, "request.required.acks": 1 if mode == "ack" else 0},
                            topic, msgs, batch)

    def wait_visible(self, topic: str, count: int, msg_bytes: int, timeout: float = 120) -> None:
        """Wait until the log's end offset covers ``count`` messages (the flush makes them visible)."""
        with SimpleConsumer(self.broker.host, self.broker.port) as c:
            deadline = time.monotonic() + timeout
            while c.latest_offset(topic, 0) < count * msg_bytes:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}: {c.latest_offset(topic, 0)} of {count * msg_bytes} bytes visible")
                time.sleep(0.05)

    def consume(self, topic: str, count: int, keep: bool = False) -> tuple[float, int, int, list[bytes]]:
        """``fetch`` pulls of 200 KB: (seconds, messages, payload bytes, payloads if ``keep``)."""
        kept: list[bytes] = []
        with SimpleConsumer(self.broker.host, self.broker.port, fetch_size=PULL_BYTES) as c:
            t0 = time.perf_counter()
            offset, n, total = 0, 0, 0
            while n < count:
                r = c.fetch(topic, 0, offset)
                if not r.messages:
                    raise RuntimeError(f"{topic}: empty fetch at offset {offset} after {n} messages")
                for m in r.messages:
                    total += len(m.payload)  # touch every message, as an application would
                if keep:
                    kept.extend(bytes(m.payload) for m in r.messages)
                n += len(r.messages)
                offset = r.next_offset
            elapsed = time.perf_counter() - t0
        return elapsed, n, total, kept

    def consume_batches(self, topic: str, count: int, keep: bool = False) -> tuple[float, int, int, list[bytes]]:
        """The same with ``fetch_batch`` (one validated ``MessageBatch`` per pull) and its ``payloads()``,
        when the client has them (the consumer batch API)."""
        return read_batches(self.broker.host, self.broker.port, topic, count, keep)


def read_batches(host: str, port: int, topic: str, count: int, keep: bool = False
                 ) -> tuple[float, int, int, list[bytes]]:
    """Partition 0 of ``topic`` from offset 0 with ``fetch_batch`` pulls of 200 KB until ``count`` messages:
    (seconds, messages, payload bytes, payloads if ``keep``)."""
    kept: list[bytes] = []
    with SimpleConsumer(host, port, fetch_size=PULL_BYTES) as c:
        t0 = time.perf_counter()
        offset, n, total = 0, 0, 0
        while n < count:
            b = c.fetch_batch(topic, 0, offset)
            k = len(b)
            if not k:
                raise RuntimeError(f"{topic}: empty batch at offset {offset} after {n} messages")
            views = b.payloads()  # every payload as a memoryview into the fetched buffer
            for p in views:
                total += len(p)  # touch every message, as an application would
            if keep:
                kept.extend(bytes(p) for p in views)
            n += k
            offset = b.next_offset
        elapsed = time.perf_counter() - t0
    return elapsed, n, total, kept
