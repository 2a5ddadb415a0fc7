"""One loader task without Spark, timed and optionally profiled: where a task's time goes.

    .venv/bin/python bench/profile_loader_task.py [--count 1000000] [--format parquet] [--profile]

Produces ``--count`` 200-byte events (bench_loader's schema) to one partition of a
real broker process, then runs :func:`ingest.loader.task.run_task` over the whole
range in this process (fetch with CRC checks, decode, hour bucketing, staged
files) and prints microseconds per message; with ``--profile`` the top of a
cProfile by internal time.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--format", default="parquet")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    from bench_loader import BENCH_SCHEMA, make_payloads

    from ingest.client.producer import Producer
    from ingest.client.simple_consumer import SimpleConsumer
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventSerializer
    from ingest.loader.plan import TaskRange
    from ingest.loader.task import TaskSettings, run_task
    from tests.harness.brokers import BrokerProcess
    from tests.harness.registry import RegistryProcess

    work = Path(tempfile.mkdtemp(prefix="profile-task-"))
    broker = BrokerProcess(0, work / "broker", overrides={"num.partitions": 1, "log.flush.interval": 100_000}).start()
    registry = RegistryProcess(work / "registry").start()
    try:
        ser = EventSerializer(RegistryClient(registry.url), "bench-value", BENCH_SCHEMA)
        payloads = make_payloads(ser, args.count, 1_795_000_000_000)
        with Producer({"broker.list": f"0:{broker.host}:{broker.port}", "max.message.size": 10_000_000}) as prod:
            for i in range(0, len(payloads), 1000):
                prod.send("bench", payloads[i:i + 1000])
        want = sum(len(p) + 10 for p in payloads)
        del payloads
        with SimpleConsumer(broker.host, broker.port) as c:
            deadline = time.monotonic() + 60
            while (end := c.latest_offset("bench", 0)) < want:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"log at {end} of {want} bytes after 60 s")
                time.sleep(0.1)
        task = TaskRange(task_id=0, topic="bench", broker_id=0, host=broker.host, port=broker.port, partition=0,
                         start=0, end=end)
        settings = TaskSettings(destination=str(work / "dest"), run_id="profile", format=args.format,
                                registry_url=registry.url)
        prof = cProfile.Profile() if args.profile else None
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        outcome = run_task(task, settings)
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = outcome.summary.messages
        assert n == args.count, outcome.summary
        print(f"{args.format}: {n:,} messages in {wall:.2f} s wall ({n / wall:,.0f} msg/s), "
              f"{cpu / n * 1e6:.2f} us CPU per message{' (profiled)' if prof else ''}")
        if prof:
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    finally:
        broker.stop()
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
