"""Benchmark: the produce path's cost of broker-tier audit counts (``audit.counts.enable``).

Run: ``.venv/bin/python bench/bench_broker_tier_counts.py [--count N] [--rounds R]``. One process tree: a real
registry and two real brokers (tests/harness/), one counting and one not, stopped at exit. Each round sends
the same ``N`` 200-byte messages with confluent-kafka (bench_kafka's produce acks=1 row: linger.ms 5,
acks=1, no compression, partition 0) to each broker in turn, alternating which goes first, and records the
messages per second and the broker's CPU per message (from /proc). Printed: every round, then the medians
and the ratios counting / not counting. A last row sends records whose timestamps straddle two windows in
every batch (the timestamp walk on every batch: the worst case).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peers import kafka_clients as kc  # noqa: E402
from bench.peers.process import cpu_seconds  # noqa: E402
from bench.peers.run import payloads  # noqa: E402
from tests.harness.brokers import BrokerProcess, stop_all  # noqa: E402
from tests.harness.registry import RegistryProcess  # noqa: E402


def produce_straddling(bootstrap: str, topic: str, msgs: list[bytes]) -> float:
    """``msgs`` with timestamps alternating between two windows (every batch is walked); seconds."""
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "queue.buffering.max.messages": 1000000})
    p.list_topics(topic, timeout=10)
    base = (int(time.time() * 1000) // 600_000) * 600_000
    t0 = time.perf_counter()
    for i, m in enumerate(msgs):
        while True:
            try:
                p.produce(topic, m, partition=0, timestamp=base - 1 + (i & 1))
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    msgs = payloads(args.count)
    work = Path(tempfile.mkdtemp(prefix="bench-tier-counts-"))
    registry = RegistryProcess(work / "registry").start()
    brokers = {
        "plain": BrokerProcess(0, work / "plain", overrides={"num.partitions": 1}),
        "counting": BrokerProcess(1, work / "counting", overrides={
            "num.partitions": 1, "audit.counts.enable": "true", "schema.registry.url": registry.url,
            "audit.counts.interval.ms": 10_000}),
    }
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in brokers}
    try:
        for b in brokers.values():
            b.start()
        for r in range(args.rounds):
            order = list(brokers) if r % 2 == 0 else list(reversed(brokers))
            for name in order:
                b = brokers[name]
                bootstrap = f"127.0.0.1:{b.kafka_port}"
                topic = f"t-r{r}"
                kc.wait_topic(bootstrap, topic, 1)
                c0 = cpu_seconds(b.pid)
                res = kc.produce(bootstrap, topic, msgs, "1")
                server_us = (cpu_seconds(b.pid) - c0) / args.count * 1e6
                rows[name].append((args.count / res["seconds"], server_us))
                print(f"round {r + 1} {name:<9} {args.count / res['seconds']:>10,.0f} msg/s  "
                      f"broker {server_us:6.2f} µs/msg", flush=True)
        med = {k: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v)) for k, v in rows.items()}
        print(f"\nmedian of {args.rounds} rounds, {args.count} messages of 200 bytes, confluent-kafka acks=1:")
        for k, (rate, us) in med.items():
            print(f"  {k:<9} {rate:>10,.0f} msg/s  broker {us:6.2f} µs/msg")
        print(f"  counting / plain: throughput {med['counting'][0] / med['plain'][0]:.3f}, "
              f"broker CPU per message {med['counting'][1] / med['plain'][1]:.3f}")
        worst = {}
        for name in ("plain", "counting"):
            b = brokers[name]
            bootstrap = f"127.0.0.1:{b.kafka_port}"
            kc.wait_topic(bootstrap, "straddle", 1)
            c0 = cpu_seconds(b.pid)
            secs = produce_straddling(bootstrap, "straddle", msgs)
            worst[name] = (args.count / secs, (cpu_seconds(b.pid) - c0) / args.count * 1e6)
            print(f"straddling windows {name:<9} {worst[name][0]:>10,.0f} msg/s  broker {worst[name][1]:6.2f} µs/msg")
        print(f"  counting / plain (every batch walked): throughput {worst['counting'][0] / worst['plain'][0]:.3f}, "
              f"broker CPU per message {worst['counting'][1] / worst['plain'][1]:.3f}")
    finally:
        stop_all(list(brokers.values()))
        registry.stop()


if __name__ == "__main__":
    main()
