"""Loader state read and planning time against the number of commits.

    .venv/bin/python bench/bench_state.py [--commits 100,10000,100000] [--partitions 2] [--repeat 3]

Builds, per commit count, a destination on local storage as a year (or ten) of
hourly loads leaves it: every commit is one load of ``--partitions`` partitions
of one topic, written with the real :class:`~ingest.loader.records.Manifest`
encoder straight to ``_ingest/commits/`` with its ``.published`` marker (no
Spark, no brokers: building 100,000 commits takes seconds, running 100,000
loads would take days). Every 1,000th commit records a lost range. When the
tree has checkpoints (:mod:`ingest.loader.checkpoint`), the destination is then
left as the writers leave it: a checkpoint at the last multiple of
``state.checkpoint.interval`` and the manifests it covers archived (the build
then folds every manifest once, as the first checkpoint of an old destination
does).

Rows, best of ``--repeat`` (fresh process state each time, OS page cache warm):

- ``load``: :meth:`LoaderState.load` (what the audit, ``loader status`` and the
  loader's planning read first);
- ``plan``: ``load`` + the plan's pure part (:func:`ingest.loader.plan.build_plan`
  for every partition with brokers answering from memory), i.e. planning
  without the network;
- ``files``: ``load`` + ``state.files()``, the full list of committed files
  (what compaction and the audit need; proportional to the live files, here
  ``partitions x commits``).

Prints the ratio of each row at the largest count to the smallest.

``--runs 100,1000`` measures instead the audit history and the compaction
records at that many audit / compaction runs, without and with their
checkpoints (same code; "without" is a destination whose writers never
checkpointed, as before checkpoints existed): ``latest_rows`` (``ingest audit show``),
``run_revision`` of the newest run (compaction's audit gate) and
``reconcile`` (the start of every compaction run). Never part of the test suite.
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

from ingest.loader import layout  # noqa: E402
from ingest.loader.plan import PartitionSnapshot, build_plan  # noqa: E402
from ingest.loader.records import FileRecord, Manifest, OffsetRecord
from ingest.lost_ranges import LostRange  # noqa: E402
from ingest.loader.state import LoaderState  # noqa: E402
from ingest.storage import open_storage  # noqa: E402

try:
    from ingest.loader import checkpoint, checkpoint_writer  # noqa: E402
except ImportError:  # measuring the tree before checkpoints (commit 3caf980)
    checkpoint = checkpoint_writer = None

TOPIC = "page-views"
START_MS = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
PER_HOUR = 10_000  # offsets (bytes) per partition per hour


def manifest(seq: int, partitions: int) -> Manifest:
    hour_ms = START_MS + (seq - 1) * 3_600_000
    dt, hour = layout.hour_bucket(hour_ms)
    start, end = (seq - 1) * PER_HOUR, seq * PER_HOUR
    added = tuple(
        FileRecord(path=layout.data_file_path(TOPIC, dt, hour, layout.data_file_name(TOPIC, 0, p, start, end, "parquet")),
                   topic=TOPIC, broker_id=0, partition=p, start_offset=start, end_offset=end, rows=100,
                   format="parquet", dt=dt, hour=hour, bytes=4_000, schema_id=1, min_time_ms=hour_ms,
                   max_time_ms=hour_ms + 3_599_999, run_id=f"load-{seq}")
        for p in range(partitions))
    lost = ()
    if seq % 1000 == 0:
        lost = (LostRange(TOPIC, 0, 0, start - 100, start, 100, 1, hour_ms - 1, hour_ms, f"load-{seq}", hour_ms),)
    offsets = tuple(OffsetRecord(TOPIC, 0, p, end, hour_ms + 3_599_999, (start, 100)) for p in range(partitions))
    return Manifest(seq=seq, kind="load", run_id=f"load-{seq}", committed_at_ms=hour_ms + 3_600_000,
                    offsets=offsets, added=added, lost_ranges=lost)


def build(root: Path, commits: int, partitions: int) -> None:
    """``commits`` published load commits, written where the committer leaves them.

    With checkpoints: the manifests the newest checkpoint covers are written straight to the
    archive (where ``checkpoint_writer.archive`` would have moved them, at most
    ``interval`` at a time), then that checkpoint is written by the real writer.
    """
    covered = 0
    if checkpoint_writer is not None:
        covered = commits - commits % checkpoint.DEFAULT_INTERVAL
    for seq in range(1, commits + 1):
        archived = seq < covered
        m = root / (layout.archived_manifest_path(seq) if archived else layout.manifest_path(seq))
        if seq == 1 or m.parent != prev:
            m.parent.mkdir(parents=True, exist_ok=True)
            prev = m.parent
        m.write_bytes(manifest(seq, partitions).to_bytes())
        (root / (layout.archived_marker_path(seq) if archived else layout.published_marker(seq))).write_bytes(b"")
    (root / layout.COMMITS_DIR).mkdir(parents=True, exist_ok=True)
    if covered:
        checkpoint_writer.write_checkpoint(open_storage(str(root)), covered)


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def measure(root: Path, partitions: int, repeat: int) -> dict[str, float]:
    storage = open_storage(str(root))
    snaps = [PartitionSnapshot(TOPIC, 0, p, "127.0.0.1", 9092, earliest=0, latest=10**12) for p in range(partitions)]

    def plan():
        state = LoaderState.load(storage)
        p = build_plan(run_id="bench", base_seq=state.seq, snapshots=snaps, committed=state.offsets,
                       committed_files=lambda key: state.files_of_partition(key))
        assert len(p.partitions) == partitions

    def files():
        assert len(LoaderState.load(storage).files()) > 0

    rows = {"load": lambda: LoaderState.load(storage), "plan": plan, "files": files}
    return {name: min(timed(fn) for _ in range(repeat)) for name, fn in rows.items()}


def measure_runs(base: Path, runs: int, repeat: int) -> dict[str, float]:
    """Audit history and compaction records after ``runs`` runs: {row: seconds}, without then with checkpoints."""
    from ingest.audit import history
    from ingest.clock import FakeClock
    from ingest.compaction import records

    dest = base / f"runs{runs}"
    st = open_storage(str(dest))
    interval = history.INTERVAL
    history.INTERVAL = 10**9  # as before checkpoints existed
    try:
        for i in range(runs):
            rows = [{"topic": "t", "row_type": "window", "producer": None, "window_start_ms": (i + k) * 600_000,
                     "status": "COMPLETE", "judged": True} for k in range(6)]
            history.write_revision(str(dest), rows, run_id=f"a{i}", audited_at_ms=START_MS + i * 3_600_000,
                                   range_start_ms=0, range_end_ms=1)
            records.write_record(st, {"id": f"c{START_MS + i * 3_600_000:013d}-{i:08x}", "state": "committed",
                                      "old": [f"x{i}.parquet"] * 24, "new": [f"y{i}.parquet"]})
    finally:
        history.INTERVAL = interval
    state = LoaderState.load(st)
    clock = FakeClock(START_MS)

    def rows_of():
        return {"latest_rows": lambda: history.latest_rows(str(dest)),
                "run_revision": lambda: history.run_revision(str(dest), f"a{runs - 1}"),
                "reconcile": lambda: [r for r in records.read_records(st) if r["state"] == "started"]}

    out = {f"{k} before": min(timed(fn) for _ in range(repeat)) for k, fn in rows_of().items()}
    history.maybe_checkpoint(st)
    records.reconcile(st, state, clock)
    out.update({f"{k} after": min(timed(fn) for _ in range(repeat)) for k, fn in rows_of().items()})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", default="100,10000,100000")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="build under this directory and keep it")
    ap.add_argument("--runs", help="measure the audit history and compaction records at these run counts instead")
    args = ap.parse_args(argv)
    if args.runs:
        base = Path(tempfile.mkdtemp(prefix="bench-runs-"))
        try:
            for n in (int(c) for c in args.runs.split(",")):
                r = measure_runs(base, n, args.repeat)
                print(f"{n:>6} runs: " + "  ".join(f"{k} {v * 1000:8.2f} ms" for k, v in r.items()), flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus: {os.cpu_count()}")
        return 0
    counts = [int(c) for c in args.commits.split(",")]
    base = Path(args.keep or tempfile.mkdtemp(prefix="bench-state-"))
    results = {}
    try:
        for n in counts:
            root = base / f"c{n}"
            if root.exists():
                shutil.rmtree(root)
            began = time.perf_counter()
            build(root, n, args.partitions)
            built = time.perf_counter() - began
            results[n] = measure(root, args.partitions, args.repeat)
            r = results[n]
            # Mid-interval: 50 more commits after the checkpoint, which readers fold one by one.
            for seq in range(n + 1, n + 51):
                (root / layout.manifest_path(seq)).write_bytes(manifest(seq, args.partitions).to_bytes())
                (root / layout.published_marker(seq)).write_bytes(b"")
            mid = measure(root, args.partitions, args.repeat)
            r.update({"load+50": mid["load"], "plan+50": mid["plan"]})
            print(f"{n:>7} commits (built in {built:5.1f} s): load {r['load'] * 1000:9.2f} ms  "
                  f"plan {r['plan'] * 1000:9.2f} ms  files {r['files'] * 1000:9.2f} ms  |  +50 commits: "
                  f"load {mid['load'] * 1000:8.2f} ms  plan {mid['plan'] * 1000:8.2f} ms", flush=True)
            if not args.keep:
                shutil.rmtree(root)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    lo, hi = min(counts), max(counts)
    for name in ("load", "plan", "files", "load+50", "plan+50"):
        print(f"ratio {name} {hi}/{lo} commits: {results[hi][name] / results[lo][name]:.2f}x")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
