"""What a replay into a compacted hour adds at its commit: the rewrite of the compacted file, vs compacting it.

    .venv/bin/python bench/bench_replay_rewrite.py [--files 24] [--rows 20000] [--repeat 2]

One hour of ``--files`` committed files of ``--rows`` page-view events each (four
partitions, as the hourly loads leave it) is compacted into one file. A replay
then reloads partition 0 from its second range on: its staged files hold those
rows again. Rows:

- compaction: ``ingest.compaction`` end to end on the hour (the reference: what
  the hour cost to compact in the first place);
- rewrite: ``ingest.loader.replay.rewrite_compacted``, the driver's extra work at
  the replay's commit: read the reloaded ids from the staged files, read the
  compacted file, write it again without them.

Prints rows/s of the compacted file for both and the ratio (rewrite / compaction
time). Best of ``--repeat``. Never part of the test suite.
"""
from __future__ import annotations

import argparse
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
from ingest.loader import commit, layout  # noqa: E402
from ingest.loader.plan import LoadPlan, PartitionPlan, PartitionSnapshot  # noqa: E402
from ingest.loader.records import FileRecord  # noqa: E402
from ingest.loader.replay import rewrite_compacted  # noqa: E402
from ingest.loader.state import LoaderState  # noqa: E402
from ingest.storage import open_storage  # noqa: E402
from tests.compaction.helpers import HOUR_START_MS, commit_hour_files, encode, record  # noqa: E402

TOPIC = "page-views"
SPAN = 10_000_000


def build(root: Path, fmt: str, files: int, rows: int) -> list[list[dict]]:
    out, seq, per_file = [], 0, []
    for f in range(files):
        recs = [record(f"s-{seq // 100_000}", seq + i) for i in range(rows)]
        seq += rows
        per_file.append(recs)
        out.append((f % 4, f * SPAN, f * SPAN + SPAN - 1, recs))
    commit_hour_files(root, out, fmt, topic=TOPIC)
    return per_file


def stage_reload(root: Path, fmt: str, per_file: list[list[dict]], run_id: str) -> tuple[list[FileRecord], int]:
    """Partition 0's files from its second on (files 4, 8, ...), staged as one reloaded file."""
    st = open_storage(str(root))
    recs = [r for f in range(4, len(per_file), 4) for r in per_file[f]]
    dt, hour = layout.hour_bucket(HOUR_START_MS)
    name = layout.data_file_name(TOPIC, 0, 0, 4 * SPAN, len(per_file) * SPAN, fmt)
    staged = commit.staging_relpath(run_id, layout.staged_name(name))
    st.mkdirs(st.join(commit.staging_relpath(run_id)))
    st.write_bytes(st.join(staged), encode(recs, fmt))
    return [FileRecord(path=layout.data_file_path(TOPIC, dt, hour, name), topic=TOPIC, broker_id=0, partition=0,
                       start_offset=4 * SPAN, end_offset=len(per_file) * SPAN, rows=len(recs), format=fmt, dt=dt,
                       hour=hour, staging=staged)], len(recs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    total = args.files * args.rows
    print(f"{args.files} files x {args.rows} rows compacted, partition 0 replayed from its 2nd range; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'format':<8} {'what':<11} {'seconds':>8} {'rows/s':>12} {'ratio':>7}")
    for fmt in ("parquet", "avro"):
        base = Path(tempfile.mkdtemp(prefix="bench-replay-"))
        try:
            best = {"compaction": 1e9, "rewrite": 1e9}
            for i in range(args.repeat):
                work = base / f"run-{i}"
                per_file = build(work, fmt, args.files, args.rows)
                cfg = COMPACTION_CONFIG.parse({"destination": str(work), "compaction.require.audit": "false",
                                               "compaction.target.bytes": str(16 << 30)})
                t = time.perf_counter()
                run(cfg, clock=FakeClock(HOUR_START_MS + 2 * 3_600_000))
                best["compaction"] = min(best["compaction"], time.perf_counter() - t)
                st = open_storage(str(work))
                state = LoaderState.load(st)
                added, reloaded = stage_reload(work, fmt, per_file, "replay")
                snap = PartitionSnapshot(TOPIC, 0, 0, "h", 1, earliest=0, latest=args.files * SPAN)
                plan = LoadPlan("replay", state.seq, (PartitionPlan(snap, args.files * SPAN, 4 * SPAN,
                                                                    args.files * SPAN, replay=True),))
                t = time.perf_counter()
                withdrawn, [new] = rewrite_compacted(st, plan, state, added)
                best["rewrite"] = min(best["rewrite"], time.perf_counter() - t)
                assert new.rows == total - reloaded, (new.rows, total, reloaded)
            for what in ("compaction", "rewrite"):
                s = best[what]
                print(f"{fmt:<8} {what:<11} {s:>8.2f} {total / s:>12,.0f} {s / best['compaction']:>7.2f}")
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
