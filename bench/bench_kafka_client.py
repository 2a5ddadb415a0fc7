"""The product's Kafka-protocol client against confluent-kafka (librdkafka), same broker, one run.

One Tansu broker (an independent Kafka-protocol broker in Rust, tests/harness/tansu.py; in-memory
storage) on loopback. Rows alternate between the two clients, each best of ``--repeat``, a fresh
one-partition topic per row, 200-byte messages (``--size``):

- produce, acks=1, ``linger.ms`` 5: ours with ``send`` per message (``batch.size`` ``--batch-bytes``)
  and flush; ours with ``produce`` (the caller hands a list of values per batch: the batch API);
  confluent-kafka ``Producer.produce`` per message, ``poll(0)`` every 1,000, ``flush``.
- consume from earliest: ours ``fetch`` (whole batches, each CRC-32C checked, records counted from the
  batch headers); ours ``fetch`` and every record's value read (``FetchedBatches.records``);
  confluent-kafka ``Consumer.consume(1000)`` after ``assign`` at offset 0 (librdkafka checks CRCs
  only with ``check.crcs=true``; its default false is kept, as a user gets it).

Prints msg/s per row, the ratio ours/confluent-kafka per row, client CPU µs per message and the
load average. Every count is checked (the consumer reads exactly the messages produced). Tansu is
stopped at the end, also on an exception or Ctrl-C (and by the test harness reaper if this process
dies).

Usage::

    .venv/bin/python bench/bench_kafka_client.py [--count 200000] [--repeat 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingest.client.kafka.fetcher import KafkaFetcher  # noqa: E402
from ingest.client.kafka.producer import KafkaProducer  # noqa: E402
from tests.harness.tansu import TansuBroker  # noqa: E402


def _timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    n = fn()
    return n, time.perf_counter() - wall, time.process_time() - cpu


def ours_send(broker, topic, values, batch_bytes):
    def run():
        with KafkaProducer(bootstrap_servers=broker.bootstrap, acks="1", linger_ms=5, batch_size=batch_bytes,
                           max_request_size=max(batch_bytes * 2, 1 << 20)) as p:
            send = p.send
            for v in values:
                send(topic, v, partition=0)
            return sum(d.records for d in p.flush())
    return run


def ours_produce(broker, topic, values, per_batch):
    def run():
        with KafkaProducer(bootstrap_servers=broker.bootstrap, acks="1",
                           max_request_size=max(per_batch * (len(values[0]) + 16) * 2, 1 << 20)) as p:
            return sum(p.produce(topic, 0, values[i:i + per_batch]).records
                       for i in range(0, len(values), per_batch))
    return run


def confluent_produce(broker, topic, values):
    import confluent_kafka  # bench-only peer

    def run():
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 5})
        done = [0]

        def ack(err, _msg):
            if err is None:
                done[0] += 1
        for i, v in enumerate(values):
            while True:
                try:
                    p.produce(topic, v, partition=0, on_delivery=ack)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 1000 == 999:
                p.poll(0)
        p.flush(120)
        return done[0]
    return run


def ours_fetch(broker, topic, n, read_values):
    def run():
        got, offset = 0, 0
        with KafkaFetcher(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=100,
                          max_partition_fetch_bytes=4 << 20) as f:
            while got < n:
                batch = f.fetch(topic, 0, offset)
                if read_values:
                    got += sum(1 for r in batch.records() if r.value is not None)
                else:
                    got += batch.record_count
                offset = batch.next_offset
        return got
    return run


def confluent_consume(broker, topic, n):
    import confluent_kafka  # bench-only peer

    def run():
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}",
                                      "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        try:
            c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
            got = 0
            while got < n:
                for m in c.consume(1000, 1.0):
                    if m.error() is None:
                        got += 1
            return got
        finally:
            c.close()
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-bytes", type=int, default=1 << 20, help="our batch.size for the send() row")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    n = args.count
    values = [(b"%010d" % i) + os.urandom(args.size - 10) for i in range(n)]
    per_batch = max(1, args.batch_bytes // (args.size + 10))
    broker = TansuBroker().start()
    rows: dict[str, list[tuple[float, float]]] = {}
    try:
        topics = iter(range(10 ** 6))

        def row(name, make, expect):
            topic = f"{name}-{next(topics)}"
            broker.create_topic(topic, 1)
            got, wall, cpu = _timed(make(topic))
            if got != expect:
                raise SystemExit(f"{name}: {got} messages, expected {expect}")
            rows.setdefault(name, []).append((n / wall, cpu / n * 1e6))
            return topic

        for _ in range(args.repeat):
            row("produce ours send()", lambda t: ours_send(broker, t, values, args.batch_bytes), n)
            row("produce confluent-kafka", lambda t: confluent_produce(broker, t, values), n)
            filled = row("produce ours produce()", lambda t: ours_produce(broker, t, values, per_batch), n)
            for name, make in (("consume ours fetch (batches)", lambda t: ours_fetch(broker, filled, n, False)),
                               ("consume confluent-kafka", lambda t: confluent_consume(broker, filled, n)),
                               ("consume ours fetch + records", lambda t: ours_fetch(broker, filled, n, True))):
                got, wall, cpu = _timed(make(filled))
                if got != n:
                    raise SystemExit(f"{name}: {got} messages, expected {n}")
                rows.setdefault(name, []).append((n / wall, cpu / n * 1e6))
    finally:
        broker.stop()
    best = {name: max(r) for name, r in rows.items()}
    print(f"{n} messages of {args.size} bytes, one partition, Tansu {broker.port}, best of {args.repeat}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'row':34} {'msg/s':>12} {'client CPU us/msg':>18}")
    for name, (rate, cpu) in best.items():
        print(f"{name:34} {rate:12,.0f} {cpu:18.2f}")
    ratios = {
        "produce send() / confluent": best["produce ours send()"][0] / best["produce confluent-kafka"][0],
        "produce produce() / confluent": best["produce ours produce()"][0] / best["produce confluent-kafka"][0],
        "consume batches / confluent": best["consume ours fetch (batches)"][0] / best["consume confluent-kafka"][0],
        "consume records / confluent": best["consume ours fetch + records"][0] / best["consume confluent-kafka"][0],
    }
    for name, ratio in ratios.items():
        print(f"ratio {name:32} {ratio:6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"best": best, "ratios": ratios, "count": n}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
