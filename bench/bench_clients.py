"""Producer and consumer throughput over loopback against a real broker process.

Reproduces the shape of the Kafka paper's experiments (NetDB 2011, section 5):
one producer publishing COUNT messages of 200 bytes with batch sizes 1 and 50,
and one consumer reading them back with pulls of up to ~200 KB. Measured in
the same run: the physical limit, i.e. raw loopback TCP throughput for the same
bytes (``sendall`` of 256 KB chunks / ``recv_into`` 1 MB, the same socket
primitives the clients use). Prints msg/s, MB/s, ratios against the paper's
50,000 / 400,000 / 22,000 msg/s and against the limit, then a cProfile of the
batch-1 producer and the consumer (where the time goes).

Usage::

    .venv/bin/python bench/bench_clients.py [--count 1000000] [--profile-count 100000] [--markdown]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.limits import loopback_seconds  # noqa: E402
from ingest.client.producer import Producer  # noqa: E402
from ingest.client.simple_consumer import SimpleConsumer  # noqa: E402
from ingest.records.message import HEADER_SIZE  # noqa: E402
from tests.harness.brokers import BrokerProcess  # noqa: E402

PAYLOAD_SIZE = 200
PULL_BYTES = 200 * 1024
PAPER = {"batch1": 50_000, "batch50": 400_000, "consumer": 22_000}


def start_broker(workdir: str) -> BrokerProcess:
    # Flush every 10,000 messages or 1 s (the paper's broker flushed in batches too);
    # the consumer phase waits until everything is flushed and visible.
    return BrokerProcess(0, workdir, overrides={
        "num.partitions": 1, "log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
        "log.default.flush.scheduler.interval.ms": 200, "num.threads": 1,
        "log.file.size": 1 << 30, "socket.send.buffer": 1 << 20, "socket.receive.buffer": 1 << 20,
    }).start()


def broker_cpu(broker: BrokerProcess) -> float:
    """CPU seconds (user + system) used so far by the broker process."""
    fields = Path(f"/proc/{broker.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def payloads(count: int) -> list[bytes]:
    base = os.urandom(PAYLOAD_SIZE * 64)
    return [base[(i % 64) * PAYLOAD_SIZE:(i % 64 + 1) * PAYLOAD_SIZE] for i in range(count)]


def produce(broker: BrokerProcess, topic: str, msgs: list[bytes], batch: int, acks: int,
            mode: str = "sync") -> float:
    cfg = {"broker.list": broker.address, "request.required.acks": acks, "producer.type": mode,
           "batch.size": batch, "queue.time": 100, "queue.size": 100_000}
    with Producer(cfg) as p:
        t0 = time.perf_counter()
        if mode == "async":
            for m in msgs:
                p.send(topic, [m])
            p.flush()
        elif batch == 1:
            for m in msgs:
                p.send(topic, [m])
        else:
            for i in range(0, len(msgs), batch):
                p.send(topic, msgs[i:i + batch])
        elapsed = time.perf_counter() - t0
        assert p.stats["failed"] == 0, p.stats
    return elapsed


def wait_visible(broker: BrokerProcess, topic: str, nbytes: int, timeout: float = 120) -> None:
    with SimpleConsumer(broker.host, broker.port) as c:
        deadline = time.monotonic() + timeout
        while c.latest_offset(topic, 0) < nbytes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: only {c.latest_offset(topic, 0)} of {nbytes} bytes visible")
            time.sleep(0.05)


def consume(broker: BrokerProcess, topic: str, count: int) -> tuple[float, int]:
    with SimpleConsumer(broker.host, broker.port, fetch_size=PULL_BYTES) as c:
        t0 = time.perf_counter()
        offset, n, total = 0, 0, 0
        while n < count:
            r = c.fetch(topic, 0, offset)
            for m in r.messages:
                total += len(m.payload)  # touch every message, as an application would
            n += len(r.messages)
            offset = r.next_offset
        elapsed = time.perf_counter() - t0
    assert total == count * PAYLOAD_SIZE
    return elapsed, n


def consume_batch(broker: BrokerProcess, topic: str, count: int) -> tuple[float, int]:
    """The consumer of :func:`consume` through ``fetch_batch``: one validated MessageBatch per pull."""
    with SimpleConsumer(broker.host, broker.port, fetch_size=PULL_BYTES) as c:
        t0 = time.perf_counter()
        offset, n, total = 0, 0, 0
        while n < count:
            b = c.fetch_batch(topic, 0, offset)
            k = len(b)
            total += b.bounds[k] - b.bounds[0] - b.header_size * k  # the payload bytes, from the batch
            n += k
            offset = b.next_offset
        elapsed = time.perf_counter() - t0
    assert total == count * PAYLOAD_SIZE
    return elapsed, n


def profile(fn, top: int = 12) -> str:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    return "\n".join(lines[start:start + top + 1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="messages per experiment")
    ap.add_argument("--profile-count", type=int, default=100_000, help="messages in the profiled runs")
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args(argv)
    count = args.count
    msgs = payloads(count)
    msg_bytes = HEADER_SIZE + PAYLOAD_SIZE
    total_bytes = count * msg_bytes
    rows = []

    cpu_mark = {}

    def mark():
        cpu_mark["client"], cpu_mark["broker"] = time.process_time(), broker_cpu(broker)

    def row(name, seconds, n, paper=None):
        rate = n / seconds
        mbs = n * msg_bytes / seconds / 1e6
        client_cpu = time.process_time() - cpu_mark["client"]
        broker_s = broker_cpu(broker) - cpu_mark["broker"]
        rows.append((name, n, seconds, rate, mbs, paper, client_cpu / n * 1e6, broker_s / n * 1e6))
        mark()

    with tempfile.TemporaryDirectory(prefix="bench-clients-") as work:
        broker = start_broker(work)
        try:
            print(f"broker pid {broker.pid} on port {broker.port}; {count:,} messages of {PAYLOAD_SIZE} bytes; "
                  f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
            mark()
            row("producer batch 1, no ack (PRODUCE)", produce(broker, "b1", msgs, 1, 0), count, PAPER["batch1"])
            row("producer batch 50, no ack (PRODUCE)", produce(broker, "b50", msgs, 50, 0), count,
                PAPER["batch50"])
            row("producer batch 50, acked (PRODUCE_ACK)", produce(broker, "b50a", msgs, 50, 1), count,
                PAPER["batch50"])
            small = max(1, count // 10)
            row("producer batch 1, acked (PRODUCE_ACK)", produce(broker, "b1a", msgs[:small], 1, 1), small,
                PAPER["batch1"])
            row("producer async batch.size=50, acked", produce(broker, "b50q", msgs, 50, 1, "async"), count,
                PAPER["batch50"])
            wait_visible(broker, "b50a", total_bytes)
            mark()
            secs, n = consume(broker, "b50a", count)
            row(f"consumer, pulls of {PULL_BYTES // 1024} KB", secs, n, PAPER["consumer"])
            secs, n = consume_batch(broker, "b50a", count)
            row(f"consumer fetch_batch, pulls of {PULL_BYTES // 1024} KB", secs, n, PAPER["consumer"])
            limit_s = loopback_seconds(total_bytes)
            limit_mbs = total_bytes / limit_s / 1e6
            rows.append(("physical limit: raw loopback TCP, same bytes", count, limit_s, count / limit_s,
                         limit_mbs, None, None, None))
            prof_text = ""
            if not args.no_profile:
                pc = min(args.profile_count, count)
                prof_text += f"\n### cProfile: producer batch 1, no ack, {pc:,} messages (by own time)\n\n```\n"
                prof_text += profile(lambda: produce(broker, "p1", msgs[:pc], 1, 0)) + "\n```\n"
                prof_text += f"\n### cProfile: consumer, {count:,} messages (by own time)\n\n```\n"
                prof_text += profile(lambda: consume(broker, "b50a", count)) + "\n```\n"
        finally:
            code = broker.stop()
            if code not in (0, None):
                print(f"warning: broker exited with {code}", file=sys.stderr)

    print()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    print("| experiment | messages | seconds | msg/s | MB/s | vs paper | vs loopback limit "
          "| client CPU µs/msg | broker CPU µs/msg |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, n, secs, rate, mbs, paper, ccpu, bcpu in rows:
        vs_paper = f"{rate / paper:.2f}x of {paper:,}" if paper else ""
        cpu = f"{ccpu:.1f} | {bcpu:.1f}" if ccpu is not None else " | "
        print(f"| {name} | {n:,} | {secs:.2f} | {rate:,.0f} | {mbs:,.1f} | {vs_paper} | {mbs / limit_mbs:.3f} "
              f"| {cpu} |")
    print(prof_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
