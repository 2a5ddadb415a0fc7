"""Benchmark: the mirror tier's per-message cost of counting (header reads, PartitionCounter.count).

Run: ``.venv/bin/python bench/bench_tier_counts.py [--messages N]``. An in-process registry;
no broker. Per example schema (page_view, click, service_metric):

- ``read``: HeaderReader.read (all five header fields) per payload;
- ``time_of``: HeaderReader.time_of (the counting path) with event times 1 ms apart (every
  message a new millisecond: the cache never hits) and with 50 messages per millisecond
  (a busy producer);
- ``fastavro``: fastavro.schemaless_reader of the whole record (what the fast path avoids);
- ``count``: PartitionCounter.count of 1000-message sets, plain and gzip, in messages/s,
  next to ``iter_messages`` alone over the same sets (the floor: walking the set).

Each figure is the best of 7 rounds of process CPU time (the machine's 2 cores are shared).
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro  # noqa: E402

from ingest.clock import FakeClock  # noqa: E402
from ingest.events.header_reader import HeaderReader  # noqa: E402
from ingest.events.loadgen import EventGenerator  # noqa: E402
from ingest.events.registry import SchemaRegistry  # noqa: E402
from ingest.events.registry_client import RegistryClient  # noqa: E402
from ingest.events.registry_server import RegistryServer  # noqa: E402
from ingest.events.registry_store import DirectoryStore  # noqa: E402
from ingest.events.schemas import load_schema  # noqa: E402
from ingest.events.serde import EventSerializer  # noqa: E402
from ingest.mirror.tier_counts import PartitionCounter  # noqa: E402
from ingest.records.message import CODEC_GZIP, CODEC_NONE  # noqa: E402
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set  # noqa: E402

T0 = 1_763_800_000_000
SESSION = "0b7f2a36-5b0e-4c55-9d8b-6a1f0c0e9a11"


def best(fn, rounds: int = 7) -> float:
    out = []
    for _ in range(rounds):
        t = time.process_time()  # CPU time of this process: the other helpers' load skews wall time
        fn()
        out.append(time.process_time() - t)
    return min(out)


def payloads(ser: EventSerializer, name: str, n: int, per_ms: int) -> list[bytes]:
    gen = EventGenerator(name, seed=1)
    return [ser.serialize({**gen.make(), "header": {"time": T0 + i // per_ms, "server": "web-17.dc1",
                                                   "service": "frontend", "session": SESSION, "seq": i}})
            for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000)
    n = ap.parse_args().messages
    tmp = Path(tempfile.mkdtemp(prefix="bench-tiers-"))
    server = RegistryServer(SchemaRegistry(DirectoryStore(tmp / "registry"))).start()
    registry = RegistryClient(server.url)
    try:
        print(f"{'schema':15s} {'read':>8s} {'time_of new ms':>15s} {'time_of 50/ms':>14s} {'fastavro':>9s}  (us/payload)")
        for name in ("page_view", "click", "service_metric"):
            schema = load_schema(name)
            ser = EventSerializer(registry, f"{name}-value", schema)
            parsed = fastavro.parse_schema(schema)
            distinct, busy = payloads(ser, name, n, 1), payloads(ser, name, n, 50)

            def run(fn, ps):
                def go():
                    reader = HeaderReader(registry)  # a fresh reader per round: its time cache starts empty
                    f = getattr(reader, fn)
                    f(ps[0])
                    for p in ps:
                        f(p)
                return best(go) / len(ps) * 1e6

            fa = best(lambda: [fastavro.schemaless_reader(io.BytesIO(p[5:]), parsed) for p in distinct]) / n * 1e6
            print(f"{name:15s} {run('read', distinct):8.2f} {run('time_of', distinct):15.2f} "
                  f"{run('time_of', busy):14.2f} {fa:9.2f}")
        ser = EventSerializer(registry, "page_view-value", load_schema("page_view"))
        for per_ms in (1, 50):
            ps = payloads(ser, "page_view", n, per_ms)
            for codec in (CODEC_NONE, CODEC_GZIP):
                sets = [encode_message_set(ps[i:i + 1000], codec) for i in range(0, n, 1000)]

                def count():
                    c = PartitionCounter(session="s", topic="t", source="dc1", mirror_server="m", window_ms=600_000,
                                         interval_ms=60_000, header_reader=HeaderReader(registry),
                                         clock=FakeClock(T0), state=None)
                    for s in sets:
                        c.count(s)

                def walk():
                    for s in sets:
                        for _ in iter_messages(s):
                            pass

                tc, tw = best(count), best(walk)
                print(f"count page_view {per_ms:2d}/ms {'gzip' if codec else 'none':4s}: {n / tc:9.0f} msg/s "
                      f"({tc / n * 1e6:.2f} us/msg; iter_messages alone {n / tw:9.0f} msg/s, {tw / n * 1e6:.2f} us/msg)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
