"""Benchmark: envelope + Avro serde and the event producer's monitoring overhead, side by side.

Run: ``.venv/bin/python bench/bench_events.py [--events N]``. Everything runs in one
process tree: an in-process registry, one real broker subprocess
(tests/harness/brokers.py). Ratios compare within this run:

- serialize: EventSerializer.serialize (header filled by HeaderFactory, framing) vs bare
  fastavro.schemaless_writer of the same record (the physical floor of this format);
- deserialize: EventDeserializer.deserialize vs bare fastavro.schemaless_reader;
- produce: EventProducer (headers + serde + monitoring counts) vs the same EventProducer with
  monitoring off vs the plain Producer sending pre-serialized payloads, async, batch 200.

Each figure is the best of 3 interleaved rounds (the machine's 2 cores are shared).
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

from ingest.client.producer import Producer  # noqa: E402
from ingest.clock import SYSTEM_CLOCK  # noqa: E402
from ingest.events.envelope import HeaderFactory, ProducerIdentity  # noqa: E402
from ingest.events.event_producer import EventProducer  # noqa: E402
from ingest.events.loadgen import EventGenerator  # noqa: E402
from ingest.events.registry import SchemaRegistry  # noqa: E402
from ingest.events.registry_client import RegistryClient  # noqa: E402
from ingest.events.registry_server import RegistryServer  # noqa: E402
from ingest.events.registry_store import DirectoryStore  # noqa: E402
from ingest.events.schemas import load_schema  # noqa: E402
from ingest.events.serde import EventDeserializer, EventSerializer  # noqa: E402
from tests.harness.brokers import BrokerProcess  # noqa: E402


def rate(n: int, fn) -> float:
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    n = ap.parse_args().events
    tmp = Path(tempfile.mkdtemp(prefix="bench-events-"))
    server = RegistryServer(SchemaRegistry(DirectoryStore(tmp / "registry"))).start()
    registry = RegistryClient(server.url)
    schema = load_schema("page_view")
    records = EventGenerator(seed=1).batch(n)
    hf = HeaderFactory(ProducerIdentity.new("bench"), SYSTEM_CLOCK)
    full = [{**r, "header": hf.next()} for r in records]
    ser = EventSerializer(registry, "bench-value", schema)
    parsed = fastavro.parse_schema(schema)

    def bare_write():
        for r in full:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, r)
            buf.getvalue()

    def ours_write():
        for r in records:
            ser.serialize({**r, "header": hf.next()})

    payloads = [ser.serialize(r) for r in full]
    de = EventDeserializer(registry)

    def bare_read():
        for p in payloads:
            fastavro.schemaless_reader(io.BytesIO(p[5:]), parsed)

    def ours_read():
        for i, p in enumerate(payloads):
            de.deserialize(p, topic="t", offset=i)

    results = {}
    for _ in range(3):
        for name, fn in (("serialize bare fastavro", bare_write), ("serialize EventSerializer", ours_write),
                         ("deserialize bare fastavro", bare_read), ("deserialize EventDeserializer", ours_read)):
            results[name] = max(results.get(name, 0.0), rate(n, fn))

    broker = BrokerProcess(0, tmp / "broker", overrides={"num.partitions": 2, "log.flush.interval": 1000,
                                                         "log.default.flush.interval.ms": 1000}).start()
    try:
        cfg = {"broker.list": broker.address, "producer.type": "async", "batch.size": 200, "queue.time": 50}

        def plain():
            p = Producer(cfg)
            for i in range(0, n, 200):
                p.send("bench-plain", payloads[i:i + 200])
            p.close()

        def events(monitoring: bool):
            def run():
                ep = EventProducer(cfg, registry, monitoring_enable=monitoring, service_name="bench")
                for i in range(0, n, 200):
                    ep.send("bench-events", records[i:i + 200])
                st = ep.close()
                assert st["acked"] == n, st
            return run

        # 2 shared cores: interleave 3 rounds and keep each variant's best
        variants = {"produce plain Producer (pre-serialized)": plain,
                    "produce EventProducer, monitoring off": events(False),
                    "produce EventProducer, monitoring on": events(True)}
        for _ in range(3):
            for name, fn in variants.items():
                results[name] = max(results.get(name, 0.0), rate(n, fn))
    finally:
        broker.stop()
        server.stop()

    print(f"{n} page-view events of ~{sum(map(len, payloads)) // n} bytes framed")
    for k, v in results.items():
        print(f"  {k:45s} {v:12,.0f} events/s")
    print(f"  serialize ratio (ours / bare)        {results['serialize EventSerializer'] / results['serialize bare fastavro']:.2f}")
    print(f"  deserialize ratio (ours / bare)      {results['deserialize EventDeserializer'] / results['deserialize bare fastavro']:.2f}")
    print(f"  produce ratio monitoring on / off    {results['produce EventProducer, monitoring on'] / results['produce EventProducer, monitoring off']:.2f}")
    print(f"  produce ratio events / plain         {results['produce EventProducer, monitoring on'] / results['produce plain Producer (pre-serialized)']:.2f}")


if __name__ == "__main__":
    main()
