"""The Kafka-protocol clients of bench/bench_kafka.py: confluent-kafka (librdkafka) producer and consumers,
kafka-python's and aiokafka's consumers.

Producer: values of 200 bytes without a key, to partition 0, ``linger.ms`` 5, ``compression.type``
none, ``acks`` 1 or all, librdkafka's defaults otherwise (``batch.size`` 1 MB, ``batch.num.messages``
10,000, up to 1,000,000 requests in flight per connection, no idempotence). Delivery reports come
only for failures (``delivery.report.only.error``), so the application runs no Python callback per
message, as a producer that only counts errors would. A full local queue
(``queue.buffering.max.messages``, 100,000) is waited out with ``poll``. The clock runs from the first
``produce()`` until ``flush()`` returned with nothing left. librdkafka's statistics give the Produce
requests it sent and their bytes: the request size the loopback limit is measured with.

Consumer (:func:`consume`): ``assign`` of partition 0 from ``OFFSET_BEGINNING``, then either
``consume(10000, ...)`` (the batch API, ``loop="batch"``) or ``poll()`` one message at a time
(``loop="poll"``) until N messages, each one's error checked and its value's length summed (every
message touched, as an application would); ``enable.auto.commit`` false (a consumer that assigns
needs no group coordinator; docs/kafka-protocol.md on librdkafka's close). ``tuned`` sets
``fetch.queue.backoff.ms`` to 10 (:data:`TUNED_CONSUMER`); without it every setting is librdkafka's
default, whose 1 s fetch backoff paces a consumer that reads a backlog (docs/performance.md). The
connection is made before the clock starts. After the N-th message, one more second of polling must
bring nothing: exactly N.

:func:`consume_kafka_python` and :func:`consume_aiokafka` read the same way with those clients' batch
calls (``poll(max_records=10000)``, ``getmany(max_records=10000)``) and their default settings.

The clients' own ceilings: :func:`enqueue_seconds`, the ``produce()`` calls alone, against a producer
that has no broker to send to (everything stays in librdkafka's queue, then is purged);
:func:`dequeue_seconds`, the ``consume(10000)`` calls alone, over messages librdkafka has already
fetched into its local queue.
"""
from __future__ import annotations

import json
import logging
import time

import confluent_kafka as ck

from bench.peers.process import free_port
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

LINGER_MS = 5
CONSUME_BATCH = 10_000
STALL_S = 30.0
#: librdkafka stops fetching a partition whose local queue holds ``queued.min.messages`` (100,000) or
#: ``queued.max.messages.kbytes`` (64 MB), and then waits ``fetch.queue.backoff.ms`` (1,000 ms by default)
#: before its next fetch, although the application drains the queue in a tenth of that: a consumer
#: reading a backlog lowers the backoff, as librdkafka's CONFIGURATION.md advises for "long (~1s) delays"
TUNED_CONSUMER = {"fetch.queue.backoff.ms": 10}


class _RdKafkaLog:
    """librdkafka's log lines, as confluent-kafka hands them to a ``logger``: the first of each facility
    (FAIL, ...) at once, repeats counted (a port that refuses connections makes a line per reconnect)."""

    def __init__(self) -> None:
        self.limited = RateLimitedLog(log, interval_s=10.0)

    def log(self, level: int, fmt: str, facility: str, name: str, msg: str) -> None:
        self.limited.log(level, "librdkafka", facility, "%s %s: %s", name, facility, msg)


_RDKAFKA_LOG = _RdKafkaLog()
# the brokers' stop closes idle connections: not news
QUIET = {"log.connection.close": False, "logger": _RDKAFKA_LOG}


def _producer_config(bootstrap: str, acks: str) -> dict:
    return {"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS, "compression.type": "none", "acks": acks,
            "delivery.report.only.error": True, "statistics.interval.ms": 1000, **QUIET}


def wait_topic(bootstrap: str, topic: str, replicas: int, timeout: float = 60.0) -> dict:
    """Ask Metadata for ``topic`` until its partition 0 has a leader and ``replicas`` in-sync replicas.

    Asking creates the topic where the broker auto-creates topics (a producer's Metadata allows it).
    Returns ``{"leader", "replicas", "isr"}``; raises RuntimeError naming what was seen at the deadline.
    """
    p = ck.Producer({"bootstrap.servers": bootstrap, **QUIET})
    seen = "no answer"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                md = p.list_topics(topic, timeout=5)
                t = md.topics.get(topic)
                if t is None or t.error is not None:
                    seen = f"topic error {t.error if t else 'absent'}"
                elif 0 not in t.partitions:
                    seen = f"partitions {sorted(t.partitions)}"
                else:
                    part = t.partitions[0]
                    seen = f"leader {part.leader}, replicas {part.replicas}, isr {part.isrs}"
                    if part.leader >= 0 and len(part.isrs) >= replicas:
                        return {"leader": part.leader, "replicas": list(part.replicas), "isr": list(part.isrs)}
            except ck.KafkaException as exc:
                seen = str(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: partition 0 without a leader and {replicas} in-sync replica(s) "
                                   f"after {timeout:.0f} s ({seen})")
            time.sleep(0.2)
    finally:
        p.flush(0)


def produce(bootstrap: str, topic: str, msgs: list[bytes], acks: str) -> dict:
    """Send ``msgs`` to partition 0 of ``topic``; returns seconds, failures and the requests' sizes.

    Raises RuntimeError if a delivery failed or messages were left unsent after 120 s of flush.
    """
    failures: list[str] = []
    stats: list[dict] = []

    def on_delivery(err, msg):
        failures.append(str(err))

    cfg = _producer_config(bootstrap, acks)
    cfg.update({"on_delivery": on_delivery, "stats_cb": lambda s: stats.append(json.loads(s))})
    p = ck.Producer(cfg)
    try:
        p.list_topics(topic, timeout=10)  # connected, metadata known: the clock times the messages only
        send, poll = p.produce, p.poll
        t0 = time.perf_counter()
        for m in msgs:
            try:
                send(topic, m, partition=0)
            except BufferError:  # the local queue is full: let librdkafka send, then go on
                while True:
                    poll(0.001)
                    try:
                        send(topic, m, partition=0)
                        break
                    except BufferError:
                        continue
        left = p.flush(120)
        seconds = time.perf_counter() - t0
        if left or failures:
            raise RuntimeError(f"{topic}: {left} message(s) unsent after flush, {len(failures)} delivery "
                               f"failure(s){': ' + failures[0] if failures else ''}")
        requests, sent = _produce_requests(p, stats)
    finally:
        p.flush(0)
    return {"seconds": seconds, "requests": requests, "request_bytes": sent / requests if requests else None}


def _produce_requests(p: ck.Producer, stats: list[dict]) -> tuple[int, int]:
    """(Produce requests sent, bytes sent to the brokers) from the next statistics callback."""
    had = len(stats)
    deadline = time.monotonic() + 3
    while len(stats) == had and time.monotonic() < deadline:
        p.poll(0.1)
    if not stats:
        return 0, 0
    brokers = [b for b in stats[-1].get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
    return (sum(b.get("req", {}).get("Produce", 0) for b in brokers), sum(b.get("txbytes", 0) for b in brokers))


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    """(log start offset, high watermark) of partition 0, as the broker answers ListOffsets."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-watermarks",
                     "enable.auto.commit": False, **QUIET})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def _consumer(bootstrap: str, tuned: bool, extra: dict | None = None) -> ck.Consumer:
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka", "enable.auto.commit": False,
                        **(TUNED_CONSUMER if tuned else {}), **(extra or {}), **QUIET})


def consume(bootstrap: str, topic: str, count: int, keep: bool = False, loop: str = "batch",
            tuned: bool = True) -> tuple[float, int, int, list[bytes]]:
    """Read partition 0 of ``topic`` from the earliest offset: (seconds, messages, value bytes, values if ``keep``).

    ``loop``: "batch" (``consume(10000)``) or "poll" (``poll()``, one message a call); ``tuned``:
    :data:`TUNED_CONSUMER`, else librdkafka's defaults.

    Raises RuntimeError on a message error, on no progress for 30 s, and when more than ``count``
    messages are there.
    """
    if loop not in ("batch", "poll"):
        raise ValueError(f"loop {loop!r}: allowed are batch, poll")
    kept: list[bytes] = []
    c = _consumer(bootstrap, tuned)
    try:
        c.list_topics(topic, timeout=10)
        n, total = 0, 0
        t0 = time.perf_counter()
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        last = time.monotonic()
        if loop == "poll":
            poll = c.poll
            while n < count:
                m = poll(1.0)
                if m is None:
                    if time.monotonic() - last > STALL_S:
                        raise RuntimeError(f"{topic}: nothing more after {n} of {count} messages in {STALL_S:.0f} s")
                    continue
                if m.error() is not None:
                    raise RuntimeError(f"{topic}: consumer error after {n} messages: {m.error()}")
                v = m.value()
                total += len(v)
                if keep:
                    kept.append(v)
                n += 1
                last = time.monotonic()
        while n < count:
            batch = c.consume(min(CONSUME_BATCH, count - n), 1.0)
            if not batch:
                if time.monotonic() - last > STALL_S:
                    raise RuntimeError(f"{topic}: nothing more after {n} of {count} messages in {STALL_S:.0f} s")
                continue
            for m in batch:
                if m.error() is not None:
                    raise RuntimeError(f"{topic}: consumer error after {n} messages: {m.error()}")
                total += len(m.value())
            if keep:
                kept.extend(m.value() for m in batch)
            n += len(batch)
            last = time.monotonic()
        seconds = time.perf_counter() - t0
        extra = [m for m in c.consume(1000, 1.0) if m.error() is None]
        if extra:
            raise RuntimeError(f"{topic}: {len(extra)} message(s) beyond the {count} produced, from offset "
                               f"{extra[0].offset()}")
    finally:
        c.close()
    return seconds, n, total, kept


def dequeue_seconds(bootstrap: str, topic: str, count: int, timeout: float = 120.0) -> float:
    """Seconds of ``consume(10000)`` calls alone over ``count`` messages of partition 0 already in librdkafka's queue.

    The local queue is made large enough for all of them (``queued.min.messages``,
    ``queued.max.messages.kbytes`` at their maxima); the statistics say when every message is fetched
    (serving them takes one message per look, left out of the clock). Raises RuntimeError when they
    are not all fetched within ``timeout`` or fewer than ``count`` come out.
    """
    stats: list[dict] = []
    c = _consumer(bootstrap, True, {"queued.min.messages": min(max(count, 1), 10_000_000),
                                    "queued.max.messages.kbytes": 2_097_151, "statistics.interval.ms": 100,
                                    "stats_cb": lambda s: stats.append(json.loads(s))})
    try:
        c.list_topics(topic, timeout=10)
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        taken = 0
        deadline = time.monotonic() + timeout
        while True:
            time.sleep(0.1)
            taken += len(c.consume(1, 0))  # serves the statistics events queued with the messages
            part = stats[-1].get("topics", {}).get(topic, {}).get("partitions", {}).get("0", {}) if stats else {}
            if part.get("fetchq_cnt", 0) + taken >= count:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: {part.get('fetchq_cnt', 0) + taken} of {count} messages fetched "
                                   f"into the local queue after {timeout:.0f} s")
        n, total = taken, 0
        t0 = time.perf_counter()
        while n < count:
            batch = c.consume(min(CONSUME_BATCH, count - n), 1.0)
            if not batch:
                raise RuntimeError(f"{topic}: the local queue ran dry after {n} of {count} messages")
            for m in batch:
                if m.error() is not None:
                    raise RuntimeError(f"{topic}: consumer error after {n} messages: {m.error()}")
                total += len(m.value())
            n += len(batch)
        return time.perf_counter() - t0
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, count: int, keep: bool = False
                         ) -> tuple[float, int, int, list[bytes]]:
    """As :func:`consume` with kafka-python's ``KafkaConsumer.poll(max_records=10000)``, its default settings."""
    from kafka import KafkaConsumer, TopicPartition

    kept: list[bytes] = []
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        c.topics()  # connected, metadata known
        n, total = 0, 0
        t0 = time.perf_counter()
        last = time.monotonic()
        while n < count:
            for records in c.poll(timeout_ms=1000, max_records=min(CONSUME_BATCH, count - n)).values():
                for r in records:
                    total += len(r.value)
                if keep:
                    kept.extend(r.value for r in records)
                n += len(records)
                last = time.monotonic()
            if time.monotonic() - last > STALL_S:
                raise RuntimeError(f"{topic}: nothing more after {n} of {count} messages in {STALL_S:.0f} s")
        seconds = time.perf_counter() - t0
        extra = sum(len(rs) for rs in c.poll(timeout_ms=1000).values())
        if extra:
            raise RuntimeError(f"{topic}: {extra} message(s) beyond the {count} produced")
    finally:
        c.close()
    return seconds, n, total, kept


def consume_aiokafka(bootstrap: str, topic: str, count: int, keep: bool = False
                     ) -> tuple[float, int, int, list[bytes]]:
    """As :func:`consume` with aiokafka's ``getmany(max_records=10000)``, its default settings."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        kept: list[bytes] = []
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()  # connected, metadata known
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            n, total = 0, 0
            t0 = time.perf_counter()
            await c.seek_to_beginning(tp)
            last = time.monotonic()
            while n < count:
                got = await c.getmany(tp, timeout_ms=1000, max_records=min(CONSUME_BATCH, count - n))
                for records in got.values():
                    for r in records:
                        total += len(r.value)
                    if keep:
                        kept.extend(r.value for r in records)
                    n += len(records)
                    last = time.monotonic()
                if time.monotonic() - last > STALL_S:
                    raise RuntimeError(f"{topic}: nothing more after {n} of {count} messages in {STALL_S:.0f} s")
            seconds = time.perf_counter() - t0
            extra = sum(len(rs) for rs in (await c.getmany(tp, timeout_ms=1000)).values())
            if extra:
                raise RuntimeError(f"{topic}: {extra} message(s) beyond the {count} produced")
            return seconds, n, total, kept
        finally:
            await c.stop()

    return asyncio.run(run())


def enqueue_seconds(topic: str, msgs: list[bytes]) -> float:
    """Seconds of the ``produce()`` calls alone: a producer with nowhere to send keeps every message queued."""
    p = ck.Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "linger.ms": LINGER_MS,
                     "compression.type": "none", "acks": 1, "queue.buffering.max.messages": max(len(msgs), 1),
                     "message.timeout.ms": 600_000, "log_level": 0, **QUIET})
    try:
        send = p.produce
        t0 = time.perf_counter()
        for m in msgs:
            send(topic, m, partition=0)
        return time.perf_counter() - t0
    finally:
        p.purge()
        p.flush(0)
