"""Audit runtime over ~1.5M loaded ids, side by side with the bare Spark distinct count of the same files.

    .venv/bin/python bench/bench_audit.py [--events 1500000] [--format parquet|avro]
                     [--jit c1,default] [--repeat 1] [--old TREE]

Builds a destination in the loader's layout (files committed through the loader's
commit protocol, monitoring events in the audit topic), then times, in one
local[2] SparkSession:

- reference: ``spark.read.parquet(files).select(header.session, header.seq)`` grouped by
  window and id, then by window (the bare distinct count: one group per id);
- the same count with the ids grouped 64 seqs to a block (``bit_or`` of each seq's bit, summed
  ``bit_count``: the way the audit counts, ``ingest/audit/id_blocks.py``), the least work a
  per-window distinct count needs when ids are numbered consecutively;
- the audit: ``ingest.audit.job.run_audit`` (state, monitoring, distinct counts,
  reconciliation, missing-id samples for one lossy window, revision written).

Each runs three times in turn (reference, blocks, audit) and the last round counts: every
measurement has run twice before in the JVM, so its code is compiled whatever ran before it.

Prints seconds, messages/s, the ratios audit / reference and audit / blocks, and the CPU seconds
each took in this process and the driver JVM (local[2]'s tasks run there): other load on a shared
machine stretches wall time, not the work done.

``--jit`` names the driver JVM's JIT per measurement: ``default`` (tiered, C1 and C2, what
spark-submit starts without options) or ``c1`` (``-XX:TieredStopAtLevel=1``, the option
docs/audit.md gives for short audits). With more than one, or ``--repeat`` above 1, each
measurement runs in its own process (its own JVM), the order alternating, on the same built
destination, and a last table compares them. ``--old TREE`` (a checkout of an earlier commit,
e.g. ``git archive COMMIT | tar -x -C /tmp/old``) adds, per JIT, the same measurement with the
audit code imported from that tree (this script's own file runs in both), alternating with this
tree's, and the table gives the ratio of the two audits. The session is built like the job's
(``ingest.jobs_support.build_spark``: Spark's default shuffle partitions, UI off, UTC).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The tree whose ingest package is measured: this one, or --old's (set for its child processes).
sys.path.insert(0, os.environ.get("BENCH_AUDIT_TREE") or str(Path(__file__).resolve().parents[1]))

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


JIT = {"default": "", "c1": "-XX:TieredStopAtLevel=1"}


def session(jit: str):
    """A local[2] session built as jobs/audit.py builds its own, with the driver JVM's JIT of ``jit``."""
    from ingest.jobs_support import build_spark

    conf = {"spark.master": "local[2]", "spark.driver.memory": "1g"}
    if JIT[jit]:
        conf["spark.driver.extraJavaOptions"] = JIT[jit]  # the JVM is started with these options
    return build_spark(conf, "bench-audit")


def compare(args) -> None:
    """Each (tree, jit, repeat) in a child process over one built destination, alternating; a table of medians."""
    root = Path(tempfile.mkdtemp(prefix="bench-audit-")) / "dest"
    t = time.perf_counter()
    paths, n = build(root, args.events, args.format)
    print(f"built {n:,} loaded events in {len(paths)} {args.format} files in {time.perf_counter() - t:.1f} s")
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    trees = [("this", None)] + ([("old", str(Path(args.old).resolve()))] if args.old else [])
    variants = [(f"{jit}" if tree is None else f"{jit}/{label}", jit, tree)
                for jit in args.jit.split(",") for label, tree in trees]
    results: dict[str, list[dict]] = {v[0]: [] for v in variants}
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("SPARK_SUBMIT_OPTS", None)
    try:
        _alternate(args, root, variants, results, env)
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
    print(f"\nmedian of {args.repeat} run(s), {n:,} ids, seconds; load average at end "
          f"{open('/proc/loadavg').read().split()[:3]}")
    print(f"{'variant':<12}{'reference':>11}{'audit':>9}{'ratio':>8}{'CPU ref':>9}{'CPU audit':>11}{'CPU ratio':>11}"
          f"{'blocks ref':>12}{'ratio':>8}{'CPU ratio':>11}")
    for name, runs in results.items():
        ref = statistics.median(r["reference"] for r in runs)
        aud = statistics.median(r["audit"] for r in runs)
        ratio = statistics.median(r["audit"] / r["reference"] for r in runs)
        cref = statistics.median(r["reference_cpu"] for r in runs)
        caud = statistics.median(r["audit_cpu"] for r in runs)
        cratio = statistics.median(r["audit_cpu"] / r["reference_cpu"] for r in runs)
        blk = statistics.median(r["reference_blocks"] for r in runs)
        bratio = statistics.median(r["audit"] / r["reference_blocks"] for r in runs)
        bcratio = statistics.median(r["audit_cpu"] / r["reference_blocks_cpu"] for r in runs)
        print(f"{name:<12}{ref:>11.2f}{aud:>9.2f}{ratio:>7.2f}x{cref:>9.2f}{caud:>11.2f}{cratio:>10.2f}x"
              f"{blk:>12.2f}{bratio:>7.2f}x{bcratio:>10.2f}x")
    samples = {json.dumps(r["sample"]) for runs in results.values() for r in runs}
    if len(samples) != 1:
        raise RuntimeError(f"the runs' missing-id samples differ: {sorted(samples)}")
    print(f"every run's missing-id sample: {samples.pop()}")
    for jit in args.jit.split(","):
        if f"{jit}/old" in results:
            pairs = [a["audit"] / b["audit"] for a, b in zip(results[jit], results[f"{jit}/old"])]
            print(f"{jit}: audit this / old {statistics.median(pairs):.2f} (per round "
                  f"{', '.join(f'{p:.2f}' for p in pairs)})")


def _alternate(args, root: Path, variants: list[tuple], results: dict[str, list[dict]], env: dict) -> None:
    for i in range(args.repeat):
        for name, jit, tree in (variants if i % 2 == 0 else variants[::-1]):
            cmd = [sys.executable, __file__, "--format", args.format, "--jit", jit, "--child", str(root)]
            child_env = dict(env, BENCH_AUDIT_TREE=tree) if tree else {k: v for k, v in env.items()
                                                                       if k != "BENCH_AUDIT_TREE"}
            if tree:
                child_env["PYTHONPATH"] = tree
            r = subprocess.run(cmd, env=child_env, cwd=tree, capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                raise RuntimeError(f"{name}: exit {r.returncode}\n{r.stderr[-3000:]}")
            res = json.loads(r.stdout.strip().splitlines()[-1])
            results[name].append(res)
            print(f"  {name} run {i + 1}: reference {res['reference']:.2f} s, audit {res['audit']:.2f} s, "
                  f"ratio {res['audit'] / res['reference']:.2f}x; CPU s reference {res['reference_cpu']:.2f}, "
                  f"audit {res['audit_cpu']:.2f} ({res['audit_cpu'] / res['reference_cpu']:.2f}x); as blocks "
                  f"{res['reference_blocks']:.2f} s; steps {res['steps']}; "
                  f"load {open('/proc/loadavg').read().split()[:3]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--format", choices=("parquet", "avro"), default="parquet")
    ap.add_argument("--jit", default="c1", help="comma list of " + ", ".join(JIT))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--old", metavar="TREE", help="also measure the audit code of this tree (a checkout)")
    ap.add_argument("--child", metavar="DEST", help=argparse.SUPPRESS)  # one measurement over a built destination
    args = ap.parse_args()
    bad = [j for j in args.jit.split(",") if j not in JIT]
    if bad:
        ap.error(f"unknown --jit {bad}; known: {', '.join(JIT)}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.child is None and ("," in args.jit or args.repeat > 1 or args.old):
        return compare(args)
    from pyspark.sql import functions as F

    from ingest.audit.config import AUDIT_CONFIG
    from ingest.audit.job import run_audit
    from ingest.audit.inputs import load_state
    from ingest.clock import FakeClock

    if args.child:
        root = Path(args.child)
        data = [f for f in load_state(str(root)).files if f.topic == "pageviews"]
        paths, n = [f.spark_path for f in data], sum(f.rows for f in data)
    else:
        root = Path(tempfile.mkdtemp(prefix="bench-audit-")) / "dest"
        t = time.perf_counter()
        paths, n = build(root, args.events, args.format)
        print(f"built {n:,} loaded events in {len(paths)} {args.format} files in {time.perf_counter() - t:.1f} s")
    spark = session(args.jit)
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

    def reference_blocks() -> int:
        """The same distinct count with the ids grouped 64 seqs to a block (the audit's own way of counting)."""
        if args.format == "parquet":
            df = spark.read.parquet(*paths).select(F.col("header.session").alias("session"),
                                                   F.col("header.seq").alias("seq"), F.col("header.time").alias("time"))
        else:
            df = read_ids_df()
        w = (F.floor(F.col("time") / W) * W).alias("w")
        blocks = df.groupBy(w, "session", F.shiftright("seq", 6).alias("block")).agg(
            F.bit_or(F.expr("shiftleft(1L, CAST(seq & 63 AS INT))")).alias("mask"))
        return len(blocks.groupBy("w").agg(F.sum(F.bit_count("mask"))).collect())

    def read_ids_df():
        from ingest.audit.inputs import read_ids, load_state

        return read_ids(spark, [f for f in load_state(str(root)).files if f.topic == "pageviews"])

    def audit():
        return run_audit(spark, cfg, clock=FakeClock(T0 + 7 * W), from_ms=T0, to_ms=T0 + 6 * W, write_history=False)

    jvm_stat = Path(f"/proc/{spark._jvm.java.lang.ProcessHandle.current().pid()}/stat")

    def cpu_s() -> float:
        """CPU seconds of this process and the driver JVM (where local[2]'s tasks run): a shared machine's
        other load changes wall time but not the work done."""
        fields = jvm_stat.read_text().rsplit(")", 1)[1].split()
        return time.process_time() + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    results, cpu = {}, {}
    # Three rounds, the last one's times kept: each measurement has run twice before in this JVM, so
    # the JIT has compiled what it runs (the audit's aggregation is not the reference's).
    for _ in range(3):
        for name, fn in (("reference", reference), ("reference_blocks", reference_blocks), ("audit", audit)):
            t, c = time.perf_counter(), cpu_s()
            out = fn()
            results[name] = time.perf_counter() - t
            cpu[name] = cpu_s() - c
            if name == "audit":
                loss = [r for r in out.rows if r["missing"]]
                assert len(loss) == 1 and loss[0]["missing"] == 5, out.rows
                sample = loss[0]["missing_id_sample"]
                steps = out.inputs["step_seconds"]
    ref, aud = results["reference"], results["audit"]
    if args.child:
        print(json.dumps({"reference": ref, "audit": aud, "steps": steps, "sample": sample,
                          "reference_cpu": cpu["reference"], "audit_cpu": cpu["audit"],
                          "reference_blocks": results["reference_blocks"],
                          "reference_blocks_cpu": cpu["reference_blocks"]}))
        spark.stop()
        return
    print("audit steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
    print(f"reference distinct count per window: {ref:6.2f} s  {n / ref:>12,.0f} ids/s")
    print(f"audit (all steps):                   {aud:6.2f} s  {n / aud:>12,.0f} ids/s")
    print(f"ratio audit / reference: {aud / ref:.2f}x; CPU s (driver + JVM): reference {cpu['reference']:.2f}, "
          f"audit {cpu['audit']:.2f}, ratio {cpu['audit'] / cpu['reference']:.2f}x")
    blk = results["reference_blocks"]
    print(f"distinct count as 64-seq blocks: {blk:6.2f} s; audit / it {aud / blk:.2f}x, CPU "
          f"{cpu['audit'] / cpu['reference_blocks']:.2f}x")
    spark.stop()


if __name__ == "__main__":
    main()
