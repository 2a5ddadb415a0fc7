"""Loader throughput, broker -> destination, against the physical limit in the same run.

    .venv/bin/python bench/bench_loader.py [--count 1000000] [--partitions 2] [--decoders compiled,python]
    .venv/bin/python bench/bench_loader.py --candidates [--count 100000]

``--candidates`` measures the compiled Avro-to-Arrow readers that could replace the
row decoder (see :mod:`loader_candidates` beside this file) on the real event schemas
instead of running a load.

Produces ``--count`` events of 200 bytes (framed payload) to a real broker
process, twice: to a 0.7 topic (``bench``: 0.7 message sets, the product's 0.7
producer, batches of 1,000) and to a Kafka-format topic (``bench-kafka``: record
batches v2, confluent-kafka through the broker's Kafka listener, uncompressed, the
same keys, each record's timestamp its event's time). Then times a whole load run
of each (plan, Spark tasks fetching with CRC checks, Avro decoding, hour bucketing,
writing staged files, the commit) on a local[2] SparkSession, for Avro and for
Parquet output. The reference ("limit") is the same already-decoded records
written straight to disk in this process by fastavro / pyarrow with the same codec:
what remains when fetching, decoding, Spark and the commit cost nothing; for the
Kafka-format topic the records carry the five record columns the loader writes
for it (``_key``, ``_headers``, ``_timestamp``, ``_partition``, ``_offset``:
ingest/loader/record_columns.py), so its limit writes the same rows. Every load
must commit exactly ``--count`` rows. Prints a table with the ratios (loader /
limit) and, per format, the Kafka-format load against the 0.7 load.
Parquet runs once per ``--decoders`` entry (the loader's ``decoder`` key), each with its
own limit run just before it, so the decoders are compared in the same run.
"""
from __future__ import annotations

import argparse
import functools
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
#: the topic of each kind of log
TOPICS = {"0.7": "bench", "kafka": "bench-kafka"}


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


def key_of(i: int) -> str:
    """The key of event ``i`` (both kinds): 1,000 events a key, as the 0.7 producer's batches."""
    return str(i // 1000)


def produce_kafka(bootstrap: str, topic: str, payloads: list[bytes], start_ms: int) -> list[tuple[int, int]]:
    """Every payload as one record through confluent-kafka (acks=all, uncompressed), keyed by
    :func:`key_of` and partitioned by the key's CRC-32 as the 0.7 producer does (librdkafka's
    ``consistent``), its timestamp its event's time; returns each record's (partition, offset)."""
    from confluent_kafka import Producer as KafkaProducer

    where: list = [None] * len(payloads)
    errors: list = []

    def done(i, err, msg):
        if err is not None:
            errors.append(err)
        else:
            where[i] = (msg.partition(), msg.offset())

    p = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none",
                       "partitioner": "consistent", "queue.buffering.max.messages": 200_000})
    for i, payload in enumerate(payloads):
        while True:
            try:
                p.produce(topic, payload, key=key_of(i).encode(), timestamp=start_ms + i * 7,
                          on_delivery=functools.partial(done, i))
                break
            except BufferError:   # the local queue is full: let deliveries drain it
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120) != 0 or errors or None in where:
        raise RuntimeError(f"confluent-kafka did not deliver every record to {topic}: {errors[:3]}")
    return where


def limit_run(records: list[dict], fmt: str, out_dir: Path, codec: str, schema: dict = BENCH_SCHEMA) -> float:
    """Seconds to write already-decoded records (of ``schema``) straight to one local file."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.loader.writers import arrow_schema

    path = out_dir / f"limit.{fmt}"
    gc.collect()
    began = time.perf_counter()
    if fmt == "avro":
        with open(path, "wb") as f:
            fastavro.writer(f, fastavro.parse_schema(schema), records, codec=codec)
    else:
        arrow = arrow_schema(schema)
        with pq.ParquetWriter(path, arrow, compression=codec) as w:
            for i in range(0, len(records), 131_072):
                w.write_table(pa.Table.from_pylist(records[i:i + 131_072], schema=arrow))
    elapsed = time.perf_counter() - began
    path.unlink()
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--formats", default="avro,parquet")
    ap.add_argument("--kinds", default="0.7,kafka", help="topic kinds to load: 0.7 (message sets), kafka "
                                                         "(record batches)")
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
    from ingest.loader.record_columns import with_record_columns
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage
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
    kinds = args.kinds.split(",")
    formats = args.formats.split(",")
    if set(kinds) - set(TOPICS):
        raise SystemExit(f"--kinds {args.kinds!r}: allowed are {', '.join(TOPICS)}")
    results: dict = {"count": args.count, "payload_bytes": PAYLOAD_BYTES, "partitions": args.partitions,
                     "machine": results_machine}
    bootstrap = f"{broker.host}:{broker.kafka_port}"
    # events' times from 3 h ago (6.7 min into an hour, 7 ms apart): recent, because a Kafka-format
    # log's retention goes by its records' timestamps (they are the events' times here)
    start_ms = (int(time.time() * 1000) // 3_600_000 - 3) * 3_600_000 + 400_000
    try:
        client = RegistryClient(registry.url)
        ser = EventSerializer(client, "bench-value", BENCH_SCHEMA)
        t0 = time.perf_counter()
        payloads = make_payloads(ser, args.count, start_ms)
        results["serialize_s"] = round(time.perf_counter() - t0, 2)
        log_bytes: dict[str, int] = {}
        if "0.7" in kinds:
            t0 = time.perf_counter()
            with Producer({"broker.list": f"0:{broker.host}:{broker.port}", "max.message.size": 10_000_000}) as prod:
                for i in range(0, len(payloads), 1000):
                    prod.send(TOPICS["0.7"], payloads[i:i + 1000], key=key_of(i))
            results["produce_s"] = round(time.perf_counter() - t0, 2)
            log_bytes["0.7"] = sum(len(p) + 10 for p in payloads)
        where: list[tuple[int, int]] = []
        if "kafka" in kinds:
            t0 = time.perf_counter()
            where = produce_kafka(bootstrap, TOPICS["kafka"], payloads, start_ms)
            results["produce_kafka_s"] = round(time.perf_counter() - t0, 2)
            log_bytes["kafka"] = sum(f.stat().st_size for f in (work / "broker").rglob("*.log")
                                     if f.parent.name.startswith(TOPICS["kafka"] + "-"))
        deser = EventDeserializer(client)
        t0 = time.perf_counter()
        records = [deser.deserialize(p) for p in payloads]
        results["decode_only_s"] = round(time.perf_counter() - t0, 2)
        results["log_bytes"] = log_bytes
        del payloads
        spark = make_session()
        for kv in args.conf:
            k, _, v = kv.partition("=")
            spark.conf.set(k, v)
        # Warm up: one tiny load of each kind so Spark's one-time start of Python workers, of the
        # data source planner and the clients' imports are not charged to the measured runs.
        warm = ser.serialize({"header": {"time": 0, "server": "s", "service": "b", "session": "w", "seq": 0},
                              "member_id": 1, "page_key": "p", "body": ""})
        with Producer({"broker.list": f"0:{broker.host}:{broker.port}"}) as prod:
            prod.send("warmup", [warm])
        if "kafka" in kinds:
            produce_kafka(bootstrap, "warmup-kafka", [warm], 0)
        from ingest.client.simple_consumer import SimpleConsumer

        with SimpleConsumer(broker.host, broker.port) as c:
            deadline = time.monotonic() + 30
            while sum(p.latest for p in c.metadata(["warmup"]).topics.get("warmup", [])) == 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("warm-up message never became visible")
                time.sleep(0.1)
        run_load(LOADER_CONFIG.parse({"destination": str(work / "warm"), "brokers": f"{broker.host}:{broker.port}",
                                      "bootstrap.servers": bootstrap if "kafka" in kinds else "",
                                      "registry.url": registry.url, "topics": "warmup|warmup-kafka"}), spark)
        # Parquet once per decoder; a row is named "parquet[decoder]" when more than one runs
        decoders = args.decoders.split(",")
        runs = [(fmt, d) for fmt in formats for d in (decoders if fmt == "parquet" else ["compiled"])]
        names = [f"{f}[{d}]" if f == "parquet" and len(decoders) > 1 else f for f, d in runs]
        names = [n if names.count(n) == 1 else f"{n} #{names[:i].count(n) + 1}" for i, n in enumerate(names)]
        for kind in kinds:
            schema = BENCH_SCHEMA
            if kind == "kafka":
                # the rows the loader writes for a Kafka-format topic: the event and its record's columns
                schema = with_record_columns(BENCH_SCHEMA)
                for i, r in enumerate(records):
                    r.update(_key=key_of(i).encode(), _headers=[], _timestamp=start_ms + i * 7,
                             _partition=where[i][0], _offset=where[i][1])
            source = ({"brokers": f"{broker.host}:{broker.port}"} if kind == "0.7" else
                      {"brokers": "", "bootstrap.servers": bootstrap})
            for (fmt, decoder), name in zip(runs, names):
                codec = "snappy"
                load_before = round(os.getloadavg()[0], 2)
                limit_s = limit_run(records, fmt, work, codec, schema)
                dest = work / f"out-{kind}-{fmt}"
                cfg = LOADER_CONFIG.parse({
                    "destination": str(dest), **source, "registry.url": registry.url,
                    "format": fmt, "avro.codec": codec, "parquet.compression": codec, "topics": TOPICS[kind],
                    "max.bytes.per.task": 1 << 40, "decoder": decoder})
                t0 = time.perf_counter()
                res = run_load(cfg, spark)
                load_s = time.perf_counter() - t0
                assert res.record["totals"]["messages"] == args.count, res.record["totals"]
                rows = sum(f.rows for f in LoaderState.load(open_storage(str(dest))).files(TOPICS[kind]))
                assert rows == args.count, f"{kind} {fmt}: {rows} rows in the committed files, {args.count} produced"
                r = results.setdefault(kind, {})[name] = {
                    "load_avg_before": load_before,
                    "decoders_ran": sorted({d for p in res.record["partitions"] for d in p.get("decoders", ())}),
                    "loader_s": round(load_s, 2), "loader_msg_s": round(args.count / load_s),
                    "loader_mb_s": round(log_bytes[kind] / load_s / 1e6, 1),
                    "limit_s": round(limit_s, 2), "limit_msg_s": round(args.count / limit_s),
                    "ratio": round(limit_s / load_s, 3), "files": res.record["totals"]["files"], "rows": rows,
                    "task_s": [round(p["duration_ms"] / 1000, 2) for p in res.record["partitions"] if p["tasks"]],
                    "task_cpu_s": [round(p.get("cpu_ms", 0) / 1000, 2) for p in res.record["partitions"]
                                   if p["tasks"]],
                }
                r["task_cpu_us_per_msg"] = round(sum(r["task_cpu_s"]) / args.count * 1e6, 2)
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
    print(f"{'topic':<6} {'format':<18} {'loader msg/s':>13} {'loader MB/s':>12} {'limit msg/s':>12} {'ratio':>7} "
          f"{'task us CPU/msg':>16} {'rows':>10}")
    for kind in kinds:
        for fmt in names:
            r = results[kind][fmt]
            print(f"{kind:<6} {fmt:<18} {r['loader_msg_s']:>13,} {r['loader_mb_s']:>12} {r['limit_msg_s']:>12,} "
                  f"{r['ratio']:>7.1%} {r['task_cpu_us_per_msg']:>16} {r['rows']:>10,}")
    if len(kinds) == 2:
        for fmt in names:
            a, b = results["0.7"][fmt], results["kafka"][fmt]
            print(f"kafka/0.7 {fmt}: loader msg/s {b['loader_msg_s'] / a['loader_msg_s']:.2f}, "
                  f"task CPU/msg {b['task_cpu_us_per_msg'] / max(a['task_cpu_us_per_msg'], 1e-9):.2f}, "
                  f"limit msg/s {b['limit_msg_s'] / a['limit_msg_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
