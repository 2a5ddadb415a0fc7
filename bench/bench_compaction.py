"""Compaction throughput vs its reference, side by side in one process.

    .venv/bin/python bench/bench_compaction.py [--files 48] [--rows 20000] [--repeat 3]

One hour of ``--files`` committed Parquet (and Avro) files of ``--rows`` page-view
events each (1 % at-least-once duplicates), as the hourly loads leave it. Rows:

- reference: read every file, concatenate, write one file (pyarrow / fastavro),
  no deduplication, no commit: the floor for "merge N files into one";
- compaction: ``ingest.compaction`` end to end (plan from the loader state,
  read, dedupe by (session, seq), write near the target, one atomic commit).

Prints rows/s and MB/s of input for both and the ratio (compaction / reference).
Best of ``--repeat`` runs each, alternating. Never part of the test suite.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.clock import FakeClock  # noqa: E402
from ingest.compaction.config import COMPACTION_CONFIG  # noqa: E402
from ingest.compaction.runner import run  # noqa: E402
from tests.compaction.helpers import HOUR_START_MS, commit_hour_files, committed_paths, record  # noqa: E402


def build(root: Path, fmt: str, files: int, rows: int) -> None:
    out, seq = [], 0
    for f in range(files):
        recs = [record(f"s-{seq // 100_000}", seq + i) for i in range(rows)]
        recs += recs[: rows // 100]  # 1 % duplicates
        seq += rows
        out.append((f % 4, f * 10_000_000, f * 10_000_000 + 9_999_999, recs))
    commit_hour_files(root, out, fmt)


def reference(paths: list[str], fmt: str, out: Path) -> int:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables([pq.read_table(p) for p in paths])
        pq.write_table(table, out, compression="snappy")
        return table.num_rows
    import fastavro

    rows, schema = [], None
    for p in paths:
        with open(p, "rb") as f:
            r = fastavro.reader(f)
            schema = schema or r.writer_schema
            rows.extend(r)
    with open(out, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), rows, codec="deflate")
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=48)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{args.files} files x {args.rows} rows (+1% duplicates), load average {os.getloadavg()[0]:.1f}")
    print(f"{'format':<8} {'what':<12} {'rows/s':>12} {'MB/s in':>9} {'ratio':>7}")
    for fmt in ("parquet", "avro"):
        base = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
        try:
            template = base / "template"
            build(template, fmt, args.files, args.rows)
            paths = committed_paths(template)
            in_bytes = sum(os.path.getsize(p) for p in paths)
            rows_in = args.files * (args.rows + args.rows // 100)
            best = {"reference": 1e9, "compaction": 1e9}
            for i in range(args.repeat):
                t = time.perf_counter()
                reference(paths, fmt, base / f"ref-{i}.{fmt}")
                best["reference"] = min(best["reference"], time.perf_counter() - t)
                work = base / f"run-{i}"
                shutil.copytree(template, work)
                cfg = COMPACTION_CONFIG.parse({"destination": str(work), "compaction.require.audit": "false"})
                t = time.perf_counter()
                [r] = [r for r in run(cfg, clock=FakeClock(HOUR_START_MS + 2 * 3_600_000)) if r["action"] == "compacted"]
                best["compaction"] = min(best["compaction"], time.perf_counter() - t)
                assert r["rows_out"] == args.files * args.rows, r
            for what in ("reference", "compaction"):
                s = best[what]
                ratio = best["reference"] / s
                print(f"{fmt:<8} {what:<12} {rows_in / s:>12,.0f} {in_bytes / s / 1e6:>9.1f} {ratio:>7.2f}")
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
