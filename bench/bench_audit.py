"""Audit runtime over ~1.5M loaded ids, side by side with the bare Spark distinct count of the same files.

    .venv/bin/python bench/bench_audit.py [--events 1500000] [--format parquet|avro]

Builds a destination in the loader's layout (files committed through the loader's
commit protocol, monitoring events in the audit topic), then times, in one
local[2] SparkSession:

- reference: ``spark.read.parquet(files).select(header.session, header.seq)`` grouped by
  window and id, then by window (the least work any distinct count per window needs);
- the audit: ``ingest.audit.job.run_audit`` (state, monitoring, distinct counts,
  reconciliation, missing-id samples for one lossy window, revision written).

Prints seconds, messages/s and the ratio audit / reference.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

W = 600_000
T0 = 1_763_798_400_000
AUDIT_TOPIC = "audit-monitoring"


def header_table(session: str, seqs: range, time0: int) -> pa.Table:
    n = len(seqs)
    seq = pa.array(seqs, pa.int64())
    header = pa.StructArray.from_arrays(
        [pa.array(range(time0, time0 + n), pa.int64()), pa.array(["host-1"] * n, pa.string()),
         pa.array(["web"] * n, pa.string()), pa.array([session] * n, pa.string()), seq],
        names=["time", "server", "service", "session", "seq"])
    return pa.table({"header": header, "member_id": seq, "page_key": pa.array(["home"] * n, pa.string()),
                     "url": pa.array(["/feed"] * n, pa.string()), "response_ms": pa.array([7] * n, pa.int32())})


def build(root: Path, n_events: int, fmt: str) -> tuple[list[str], int]:
    from ingest.loader import commit, layout
    from ingest.loader.records import FileRecord, OffsetRecord
    from ingest.storage import open_storage

    storage = open_storage(str(root))
    sessions, windows = 10, 6
    per = n_events // (sessions * windows)
    added, mons, paths = [], [], []
    run_id = "bench"
    offset = 0
    report_seq = {}
    for s in range(sessions):
        sid = f"session-{s:02d}"
        for w in range(windows):
            lost = 5 if (s, w) == (0, 2) else 0  # one window loses 5 messages
            keep = range(w * per + lost, (w + 1) * per)
            table = header_table(sid, keep, T0 + w * W + lost)
            name = layout.data_file_name("pageviews", 0, s, offset, offset + len(keep), fmt)
            rel = layout.data_file_path("pageviews", "2025-11-22", 8, name)
            staged = commit.staging_relpath(run_id, name)
            buf = io.BytesIO()
            if fmt == "parquet":
                pq.write_table(table, buf)
            else:
                schema = {"type": "record", "name": "PV", "fields": [
                    {"name": "header", "type": {"type": "record", "name": "H", "fields": [
                        {"name": "time", "type": "long"}, {"name": "server", "type": "string"},
                        {"name": "service", "type": "string"}, {"name": "session", "type": "string"},
                        {"name": "seq", "type": "long"}]}},
                    {"name": "member_id", "type": "long"}, {"name": "page_key", "type": "string"},
                    {"name": "url", "type": "string"}, {"name": "response_ms", "type": "int"}]}
                fastavro.writer(buf, fastavro.parse_schema(schema), table.to_pylist(), codec="null")
            storage.write_bytes(storage.join(staged), buf.getvalue())
            added.append(FileRecord(path=rel, topic="pageviews", broker_id=0, partition=s, start_offset=offset,
                                    end_offset=offset + len(keep), rows=len(keep), format=fmt, dt="2025-11-22",
                                    hour=8, staging=staged, run_id=run_id))
            paths.append(storage.join(rel))
            offset += len(keep)
            report_seq[sid] = report_seq.get(sid, 0) + 1
            mons.append({"header": {"time": T0 + (w + 1) * W, "server": "host-1", "service": "web", "session": sid,
                                    "seq": 10**9 + w},
                         "event_id": f"{sid}-{w}", "producer_session_id": sid, "producer_server": "host-1",
                         "service": "web", "report_seq": report_seq[sid], "topic": "pageviews",
                         "window_start_ms": T0 + w * W, "window_end_ms": T0 + (w + 1) * W, "window_size_ms": W,
                         "revision": 1, "count_attempted": per, "count_acked": per, "count_failed": 0,
                         "bytes_acked": per * 100, "seq_min": w * per, "seq_max": (w + 1) * per - 1,
                         "is_final": True, "heartbeat": False, "emitted_at_ms": T0 + (w + 1) * W})
    mon_schema = pa.schema([("header", pa.struct([("time", pa.int64()), ("server", pa.string()), ("service", pa.string()),
                                                  ("session", pa.string()), ("seq", pa.int64())]))]
                           + [(k, pa.int32() if k == "revision" else pa.bool_() if isinstance(v, bool)
                               else pa.int64() if isinstance(v, int) else pa.string())
                              for k, v in mons[0].items() if k != "header"])
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(mons, schema=mon_schema), buf)
    name = layout.data_file_name(AUDIT_TOPIC, 0, 0, 0, len(mons), "parquet")
    staged = commit.staging_relpath(run_id, name)
    storage.write_bytes(storage.join(staged), buf.getvalue())
    added.append(FileRecord(path=layout.data_file_path(AUDIT_TOPIC, "2025-11-22", 9, name), topic=AUDIT_TOPIC,
                            broker_id=0, partition=0, start_offset=0, end_offset=len(mons), rows=len(mons),
                            format="parquet", dt="2025-11-22", hour=9, staging=staged, run_id=run_id))
    commit.commit_files(storage, kind="load", run_id=run_id, offsets=[OffsetRecord("pageviews", 0, 0, offset)],
                        added=added, expected_seq=0)
    return paths, offset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--format", choices=("parquet", "avro"), default="parquet")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from ingest.audit.config import AUDIT_CONFIG
    from ingest.audit.job import run_audit
    from ingest.clock import FakeClock
    from tests.harness.spark import make_session

    root = Path(tempfile.mkdtemp(prefix="bench-audit-")) / "dest"
    t = time.perf_counter()
    paths, n = build(root, args.events, args.format)
    print(f"built {n:,} loaded events in {len(paths)} {args.format} files in {time.perf_counter() - t:.1f} s")
    spark = make_session()
    spark.range(10).count()  # JVM warm-up outside the timings
    cfg = AUDIT_CONFIG.parse({"destination": str(root), "grace.ms": 0, "window.lookback": 0})

    def reference() -> int:
        from ingest.audit.inputs import read_ids, load_state

        if args.format == "parquet":
            df = spark.read.parquet(*paths).select(F.col("header.session").alias("session"),
                                                   F.col("header.seq").alias("seq"), F.col("header.time").alias("time"))
        else:
            df = read_ids(spark, [f for f in load_state(str(root)).files if f.topic == "pageviews"])
        w = (F.floor(F.col("time") / W) * W).alias("w")
        return len(df.groupBy(w, "session", "seq").count().groupBy("w").count().collect())

    def audit():
        return run_audit(spark, cfg, clock=FakeClock(T0 + 7 * W), from_ms=T0, to_ms=T0 + 6 * W, write_history=False)

    results = {}
    for name, fn in (("reference", reference), ("audit", audit), ("reference", reference), ("audit", audit)):
        t = time.perf_counter()
        out = fn()
        results[name] = time.perf_counter() - t  # second (warm) run wins
        if name == "audit":
            loss = [r for r in out.rows if r["missing"]]
            assert len(loss) == 1 and loss[0]["missing"] == 5, out.rows
        if name == "audit":
            steps = out.inputs["step_seconds"]
    ref, aud = results["reference"], results["audit"]
    print("audit steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
    print(f"reference distinct count per window: {ref:6.2f} s  {n / ref:>12,.0f} ids/s")
    print(f"audit (all steps):                   {aud:6.2f} s  {n / aud:>12,.0f} ids/s")
    print(f"ratio audit / reference: {aud / ref:.2f}x")
    spark.stop()


if __name__ == "__main__":
    main()
