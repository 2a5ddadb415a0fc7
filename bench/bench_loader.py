"""Loader throughput, broker -> destination, against the physical limit in the same run.

    .venv/bin/python bench/bench_loader.py [--count 1000000] [--partitions 2] [--decoders compiled,python]
    .venv/bin/python bench/bench_loader.py --candidates [--count 100000]

``--candidates`` measures the compiled Avro-to-Arrow readers that could replace the
row decoder (see :mod:`loader_candidates` beside this file) on the real event schemas
instead of running a load.

Produces ``--count`` events of 200 bytes (framed payload) to a real broker
process, then times a whole load run (plan, Spark tasks fetching with CRC checks,
Avro decoding, hour bucketing, writing staged files, the commit) on a local[2]
SparkSession, for Avro and for Parquet output. The reference ("limit") is the
same already-decoded records written straight to disk in this process by
fastavro / pyarrow with the same codec: what remains when fetching, decoding,
Spark and the commit cost nothing. Prints a table and the ratios (loader / limit).
Parquet runs once per ``--decoders`` entry (the loader's ``decoder`` key), each with its
own limit run just before it, so the decoders are compared in the same run.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BENCH_SCHEMA = {
    "type": "record", "name": "BenchEvent", "namespace": "ingest.bench",
    "fields": [
        {"name": "header", "type": {"type": "record", "name": "EventHeader", "namespace": "ingest.events", "fields": [
            {"name": "time", "type": "long"}, {"name": "server", "type": "string"},
            {"name": "service", "type": "string"}, {"name": "session", "type": "string"},
            {"name": "seq", "type": "long"}]}},
        {"name": "member_id", "type": "long"},
        {"name": "page_key", "type": "string"},
        {"name": "body", "type": "string"},
    ],
}
PAYLOAD_BYTES = 200


def make_payloads(serializer, n: int, start_ms: int) -> list[bytes]:
    session = str(uuid.uuid4())
    base = {"header": {"time": start_ms, "server": "app001.prod", "service": "bench", "session": session, "seq": 0},
            "member_id": 12345, "page_key": "profile-view", "body": ""}
    pad = PAYLOAD_BYTES - len(serializer.serialize(base))
    out = []
    for i in range(n):
        rec = {"header": {"time": start_ms + i * 7, "server": "app001.prod", "service": "bench", "session": session,
                          "seq": i}, "member_id": i % 100_000, "page_key": "profile-view", "body": "x" * pad}
        out.append(serializer.serialize(rec))
    return out


def limit_run(records: list[dict], fmt: str, out_dir: Path, codec: str) -> float:
    """Seconds to write already-decoded records straight to one local file."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.loader.writers import arrow_schema

    path = out_dir / f"limit.{fmt}"
    gc.collect()
    began = time.perf_counter()
    if fmt == "avro":
        with open(path, "wb") as f:
            fastavro.writer(f, fastavro.parse_schema(BENCH_SCHEMA), records, codec=codec)
    else:
        schema = arrow_schema(BENCH_SCHEMA)
        with pq.ParquetWriter(path, schema, compression=codec) as w:
            for i in range(0, len(records), 131_072):
                w.write_table(pa.Table.from_pylist(records[i:i + 131_072], schema=schema))
    elapsed = time.perf_counter() - began
    path.unlink()
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--formats", default="avro,parquet")
    ap.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value")
    ap.add_argument("--decoders", default="compiled", help="Parquet column decoders to run, comma-separated")
    ap.add_argument("--candidates", action="store_true", help="measure compiled Avro readers instead of a load")
    args = ap.parse_args()
    if args.candidates:
        sys.path.insert(0, str(REPO / "bench"))
        from loader_candidates import main as candidates_main

        return candidates_main(min(args.count, 200_000))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import logging

    logging.basicConfig(level=logging.INFO if os.environ.get("BENCH_VERBOSE") else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s")

    from ingest.client.producer import Producer
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer, EventSerializer
    from ingest.loader.config import LOADER_CONFIG
    from ingest.loader.job import run_load
    from tests.harness.brokers import BrokerProcess
    from tests.harness.registry import RegistryProcess
    from tests.harness.spark import make_session

    load0 = os.getloadavg()
    cpu_model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?")
    results_machine = {"nproc": os.cpu_count(), "cpu": cpu_model,
                       "ram_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
                       "load_start": [round(x, 2) for x in load0]}
    work = Path(tempfile.mkdtemp(prefix="bench-loader-"))
    broker = BrokerProcess(0, work / "broker", overrides={
        "num.partitions": args.partitions, "log.flush.interval": 100_000, "log.default.flush.interval.ms": 200,
        "log.default.flush.scheduler.interval.ms": 100}).start()
    registry = RegistryProcess(work / "registry").start()
    results: dict = {"count": args.count, "payload_bytes": PAYLOAD_BYTES, "partitions": args.partitions,
                     "machine": results_machine}
    try:
        client = RegistryClient(registry.url)
        ser = EventSerializer(client, "bench-value", BENCH_SCHEMA)
        t0 = time.perf_counter()
        payloads = make_payloads(ser, args.count, 1_795_000_000_000)
        results["serialize_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        with Producer({"broker.list": f"0:{broker.host}:{broker.port}", "max.message.size": 10_000_000}) as prod:
            for i in range(0, len(payloads), 1000):
                prod.send("bench", payloads[i:i + 1000], key=str(i // 1000))
        results["produce_s"] = round(time.perf_counter() - t0, 2)
        deser = EventDeserializer(client)
        t0 = time.perf_counter()
        records = [deser.deserialize(p) for p in payloads]
        results["decode_only_s"] = round(time.perf_counter() - t0, 2)
        log_bytes = sum(len(p) + 10 for p in payloads)
        results["log_bytes"] = log_bytes
        del payloads
        spark = make_session()
        for kv in args.conf:
            k, _, v = kv.partition("=")
            spark.conf.set(k, v)
        # Warm up: one tiny load so Spark's one-time start of Python workers and of the
        # data source planner is not charged to the measured runs.
        with Producer({"broker.list": f"0:{broker.host}:{broker.port}"}) as prod:
            prod.send("warmup", [ser.serialize({"header": {"time": 0, "server": "s", "service": "b", "session": "w",
                                                           "seq": 0}, "member_id": 1, "page_key": "p", "body": ""})])
        from ingest.client.simple_consumer import SimpleConsumer

        with SimpleConsumer(broker.host, broker.port) as c:
            deadline = time.monotonic() + 30
            while sum(p.latest for p in c.metadata(["warmup"]).topics.get("warmup", [])) == 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("warm-up message never became visible")
                time.sleep(0.1)
        run_load(LOADER_CONFIG.parse({"destination": str(work / "warm"), "brokers": f"{broker.host}:{broker.port}",
                                      "registry.url": registry.url, "topics": "warmup"}), spark)
        runs = [(fmt, d) for fmt in args.formats.split(",")
                for d in (args.decoders.split(",") if fmt == "parquet" else ["compiled"])]
        names = [f"{f}[{d}]" if f == "parquet" else f for f, d in runs]
        names = [n if names.count(n) == 1 else f"{n} #{names[:i].count(n) + 1}" for i, n in enumerate(names)]
        for (fmt, decoder), name in zip(runs, names):
            codec = "snappy"
            load_before = round(os.getloadavg()[0], 2)
            limit_s = limit_run(records, fmt, work, codec)
            dest = work / f"out-{fmt}"
            cfg = LOADER_CONFIG.parse({
                "destination": str(dest), "brokers": f"{broker.host}:{broker.port}", "registry.url": registry.url,
                "format": fmt, "avro.codec": codec, "parquet.compression": codec, "topics": "bench",
                "max.bytes.per.task": 1 << 40, "decoder": decoder})
            t0 = time.perf_counter()
            res = run_load(cfg, spark)
            load_s = time.perf_counter() - t0
            assert res.record["totals"]["messages"] == args.count, res.record["totals"]
            fmt = name
            results[fmt] = {
                "load_avg_before": load_before,
                "decoders_ran": sorted({d for p in res.record["partitions"] for d in p.get("decoders", ())}),
                "loader_s": round(load_s, 2), "loader_msg_s": round(args.count / load_s),
                "loader_mb_s": round(log_bytes / load_s / 1e6, 1),
                "limit_s": round(limit_s, 2), "limit_msg_s": round(args.count / limit_s),
                "ratio": round(limit_s / load_s, 3), "files": res.record["totals"]["files"],
                "task_s": [round(p["duration_ms"] / 1000, 2) for p in res.record["partitions"] if p["tasks"]],
                "task_cpu_s": [round(p.get("cpu_ms", 0) / 1000, 2) for p in res.record["partitions"] if p["tasks"]],
            }
            results[fmt]["task_cpu_us_per_msg"] = round(sum(results[fmt]["task_cpu_s"]) / args.count * 1e6, 2)
            shutil.rmtree(dest, ignore_errors=True)
        spark.stop()
    finally:
        broker.stop()
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print("\n" + json.dumps(results, indent=1))
    m = results["machine"]
    print(f"\nmachine: nproc {m['nproc']}, {m['cpu']}, {m['ram_gb']} GB RAM; load average at start "
          f"{m['load_start']}, at end {m['load_end']}")
    print(f"{'format':<18} {'loader msg/s':>13} {'loader MB/s':>12} {'limit msg/s':>12} {'ratio':>7} "
          f"{'task us CPU/msg':>16} {'load avg':>9}")
    for fmt in names:
        r = results[fmt]
        print(f"{fmt:<18} {r['loader_msg_s']:>13,} {r['loader_mb_s']:>12} {r['limit_msg_s']:>12,} {r['ratio']:>7.1%} "
              f"{r['task_cpu_us_per_msg']:>16} {r['load_avg_before']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
