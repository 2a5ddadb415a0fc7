"""The plan's DELETED_SEGMENTS questions: asked once per broker (pipelined) against one by one.

    .venv/bin/python bench/bench_deleted_segments.py [--topics 25] [--repeat 5]

Starts one broker (no ZooKeeper; 4 KiB segments, 16 KiB size retention checked every 200 ms), produces to
``--topics`` Kafka 0.7 topics of 4 partitions until retention deleted segments of every partition, then
asks the gap question of every partition (``[0, log start)``, what a first load asks) both ways in the same
process, alternating, ``--repeat`` times each: with the questions given to
:func:`ingest.loader.discover.deleted_segments_asker` (one connection, pipelined), and without them (each
question alone on a connection of its own, as the plan asked before). Checks that both get the same records,
prints the median of each and the ratio, with the machine and the load average at start and end. Never part
of a test run's timing.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingest.client.simple_consumer import SimpleConsumer  # noqa: E402
from ingest.loader import discover  # noqa: E402
from ingest.loader.config import LOADER_CONFIG  # noqa: E402
from ingest.loader.plan import gap_questions  # noqa: E402
from tests.harness.brokers import BrokerProcess  # noqa: E402
from tests.mirror.mirror_setup import produce  # noqa: E402

PARTITIONS = 4


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _ask_all(config, questions, batched: bool) -> tuple[float, list]:
    t0 = time.perf_counter()
    ask = discover.deleted_segments_asker(config, questions if batched else ())
    answers = [ask(s, a, b) for s, a, b in questions]
    return time.perf_counter() - t0, answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=25)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; load average at start {_load()}")
    with tempfile.TemporaryDirectory(prefix="bench-deleted-") as work:
        broker = BrokerProcess(0, Path(work), overrides={
            "num.partitions": PARTITIONS, "log.file.size": 4096, "log.retention.size": 4 * 4096,
            "log.retention.check.interval.ms": 200, "log.flush.interval": 1}).start()
        try:
            parts = [(f"bd-{t}", p) for t in range(args.topics) for p in range(PARTITIONS)]
            for _ in range(40):
                for t, p in parts:
                    produce(broker, t, p, [bytes(200)] * 3)
            deadline = time.monotonic() + 300
            with SimpleConsumer(broker.host, broker.port) as c:
                while not all(c.earliest_offset(t, p) > 0 for t, p in parts):
                    if time.monotonic() > deadline:
                        raise SystemExit("retention did not reach every partition within 300 s")
                    time.sleep(0.5)
            config = LOADER_CONFIG.parse({"destination": str(Path(work) / "out"),
                                          "brokers": f"{broker.host}:{broker.port}",
                                          "registry.url": "http://127.0.0.1:9"}, source="bench")
            found = discover.discover_all(config)
            questions = gap_questions(found.snapshots, {}, {}, "earliest")
            assert len(questions) == len(parts), (len(questions), len(parts))
            times: dict[bool, list[float]] = {True: [], False: []}
            answers: dict[bool, list] = {}
            for _ in range(args.repeat):
                for batched in (False, True):
                    took, answers[batched] = _ask_all(config, questions, batched)
                    times[batched].append(took)
            assert answers[True] == answers[False] and all(answers[True]), "the two ways answered differently"
        finally:
            broker.stop()
    alone, batched = statistics.median(times[False]), statistics.median(times[True])
    print(f"{len(questions)} partitions with a retention gap on 1 broker, {args.repeat} runs each, median:")
    print(f"  one by one (a connection each): {alone * 1000:8.1f} ms")
    print(f"  per broker, pipelined:          {batched * 1000:8.1f} ms")
    print(f"  ratio one by one / per broker:  {alone / batched:8.1f}x")
    print(f"load average at end {_load()}")


if __name__ == "__main__":
    main()
