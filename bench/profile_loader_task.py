"""One loader task without Spark, timed and optionally profiled: where a task's time goes.

    .venv/bin/python bench/profile_loader_task.py [--count 1000000] [--format parquet] [--profile]
        [--decoder compiled|python|both] [--rounds 1]

Produces ``--count`` 200-byte events (bench_loader's schema) to one partition of a
real broker process, then runs :func:`ingest.loader.task.run_task` over the whole
range in this process (fetch with CRC checks, decode, hour bucketing, staged
files) and prints microseconds per message; with ``--profile`` the top of a
cProfile by internal time. ``--decoder both`` runs the task with the compiled and the Python
column decoder (the loader's ``decoder`` key) alternately, ``--rounds`` times each, over the same
log, and prints the ratio of their CPU per message (compiled / python).
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
    ap.add_argument("--decoder", choices=("compiled", "python", "both"), default="compiled")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    import os

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
        decoders = ("compiled", "python") if args.decoder == "both" else (args.decoder,)
        best: dict[str, float] = {}
        for r in range(args.rounds):
            for decoder in decoders:
                settings = TaskSettings(destination=str(work / "dest"), run_id=f"profile-{decoder}-{r}",
                                        format=args.format, registry_url=registry.url, decoder=decoder)
                prof = cProfile.Profile() if args.profile else None
                load = os.getloadavg()[0]
                t0, c0 = time.perf_counter(), time.process_time()
                if prof:
                    prof.enable()
                outcome = run_task(task, settings)
                if prof:
                    prof.disable()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                n = outcome.summary.messages
                assert n == args.count, outcome.summary
                ran = outcome.summary.decoder or "row"
                us = cpu / n * 1e6
                best[decoder] = min(best.get(decoder, us), us)
                print(f"{args.format}, decoder {decoder} (ran: {ran}): {n:,} messages in {wall:.2f} s wall "
                      f"({n / wall:,.0f} msg/s), {us:.2f} us CPU per message{' (profiled)' if prof else ''}, "
                      f"load average {load:.2f}")
                if prof:
                    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        if len(best) == 2:
            print(f"best us CPU per message: compiled {best['compiled']:.2f}, python {best['python']:.2f}, "
                  f"compiled / python {best['compiled'] / best['python']:.3f}")
    finally:
        broker.stop()
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
