"""Compaction throughput and peak memory vs plain rewrites of the same hour, side by side in one run.

    .venv/bin/python bench/bench_compaction.py [--files 48] [--rows 20000] [--url-bytes 0] [--repeat 3]

One hour of ``--files`` committed Parquet (and Avro) files of ``--rows`` page-view
events each (1 % at-least-once duplicates), as the hourly loads leave it
(``--url-bytes N`` pads each event's url with N random hex characters: wide rows). Rows:

- whole: read every file, concatenate, write one file (pyarrow / fastavro), no
  deduplication, no commit: the plain rewrite that holds the hour in memory;
- stream: the same rewrite streaming (pyarrow ``iter_batches`` into one
  ``ParquetWriter``; fastavro reader into fastavro writer): the floor of
  "merge N files into one" in bounded memory;
- compaction: ``ingest.compaction`` end to end (plan from the loader state,
  stream, dedupe by (session, seq), write near the target, one atomic commit).

Each measurement runs in its own child process (one process tree), so each peak RSS
(``VmHWM``) is its own: printed as the peak and as the growth over the child's
RSS after its imports. Prints rows/s, MB/s of input, the throughput ratio to each
reference, and the peaks. Best of ``--repeat`` runs each, alternating. Never fails by time.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.compaction.helpers import HOUR_START_MS, commit_hour_files, committed_paths, record  # noqa: E402

WHAT = ("whole", "stream", "compaction")


def build(root: Path, fmt: str, files: int, rows: int, url_bytes: int) -> None:
    out, seq = [], 0
    pad = os.urandom(url_bytes // 2 + 1).hex()[:url_bytes]
    for f in range(files):
        recs = [record(f"s-{seq // 100_000}", seq + i) for i in range(rows)]
        if url_bytes:
            for r in recs:
                r["url"] += pad
        recs += recs[: rows // 100]  # 1 % duplicates
        seq += rows
        out.append((f % 4, f * 10_000_000, f * 10_000_000 + 9_999_999, recs))
    commit_hour_files(root, out, fmt)


def whole(paths: list[str], fmt: str, out: Path) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.concat_tables([pq.read_table(p) for p in paths]), out, compression="snappy")
        return
    import fastavro

    rows, schema = [], None
    for p in paths:
        with open(p, "rb") as f:
            r = fastavro.reader(f)
            schema = schema or r.writer_schema
            rows.extend(r)
    with open(out, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), rows, codec="deflate")


def stream(paths: list[str], fmt: str, out: Path) -> None:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(out, pq.read_schema(paths[0]), compression="snappy") as writer:
            for p in paths:
                for batch in pq.ParquetFile(p).iter_batches(use_threads=False):
                    writer.write_batch(batch)
        return
    import fastavro

    with open(paths[0], "rb") as f:
        schema = fastavro.reader(f).writer_schema

    def records():
        for p in paths:
            with open(p, "rb") as f:
                yield from fastavro.reader(f)

    with open(out, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), records(), codec="deflate")


def _hwm_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


def child(what: str, fmt: str, work: Path, out: Path) -> dict:
    """One measurement in this process: seconds, peak RSS and RSS after imports (KB)."""
    import fastavro  # noqa: F401  (imports before the baseline)
    import pyarrow.parquet  # noqa: F401

    from ingest.clock import FakeClock
    from ingest.compaction.config import COMPACTION_CONFIG
    from ingest.compaction.runner import run

    base = _hwm_kb()
    t = time.perf_counter()
    if what == "compaction":
        cfg = COMPACTION_CONFIG.parse({"destination": str(work), "compaction.require.audit": "false"})
        [r] = [r for r in run(cfg, clock=FakeClock(HOUR_START_MS + 2 * 3_600_000)) if r["action"] == "compacted"]
        rows = r["rows_out"]
    else:
        paths = committed_paths(work)
        (whole if what == "whole" else stream)(paths, fmt, out)
        rows = -1
    return {"s": time.perf_counter() - t, "peak_kb": _hwm_kb(), "base_kb": base, "rows_out": rows}


def measure(what: str, fmt: str, work: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", what, fmt, str(work), str(out)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0:
        raise SystemExit(f"{what} {fmt} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=48)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--url-bytes", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=4, metavar=("WHAT", "FORMAT", "DIR", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        what, fmt, work, out = args.child
        print(json.dumps(child(what, fmt, Path(work), Path(out))))
        return
    print(f"{args.files} files x {args.rows} rows (+1% duplicates), url +{args.url_bytes} bytes, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'format':<8} {'what':<11} {'rows/s':>12} {'MB/s in':>9} {'vs whole':>9} {'vs stream':>10} "
          f"{'peak RSS MB':>12} {'growth MB':>10}")
    for fmt in ("parquet", "avro"):
        base = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
        try:
            template = base / "template"
            build(template, fmt, args.files, args.rows, args.url_bytes)
            in_bytes = sum(os.path.getsize(p) for p in committed_paths(template))
            rows_in = args.files * (args.rows + args.rows // 100)
            best: dict[str, dict] = {}
            for i in range(args.repeat):
                for what in WHAT:
                    work = base / f"{what}-{i}"
                    shutil.copytree(template, work)
                    m = measure(what, fmt, work, base / f"{what}-{i}.{fmt}")
                    if what == "compaction":
                        assert m["rows_out"] == args.files * args.rows, m
                    if what not in best or m["s"] < best[what]["s"]:
                        best[what] = {**m, "growth_kb": max(0, m["peak_kb"] - m["base_kb"])}
                    if what in best and m["peak_kb"] > best[what]["peak_kb"]:
                        best[what].update(peak_kb=m["peak_kb"], growth_kb=max(0, m["peak_kb"] - m["base_kb"]))
                    shutil.rmtree(work, ignore_errors=True)
            for what in WHAT:
                m = best[what]
                print(f"{fmt:<8} {what:<11} {rows_in / m['s']:>12,.0f} {in_bytes / m['s'] / 1e6:>9.1f} "
                      f"{best['whole']['s'] / m['s']:>9.2f} {best['stream']['s'] / m['s']:>10.2f} "
                      f"{m['peak_kb'] / 1024:>12.0f} {m['growth_kb'] / 1024:>10.0f}")
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
