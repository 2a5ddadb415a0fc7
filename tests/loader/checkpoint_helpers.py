"""Commits for the checkpoint tests, made through the real commit protocol (staged bytes, manifest, publish)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ingest.clock import FakeClock
from ingest.loader import commit, layout
from ingest.loader.records import FileRecord, OffsetRecord
from ingest.lost_ranges import LostRange
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.compaction.helpers import HOUR_START_MS, encode, record

TOPICS = ("views", "clicks")
PER_COMMIT = 100  # offsets per partition per load


def staged(storage, run_id: str, topic: str, partition: int, start: int, end: int, *, hour: int = 0,
           kind: str = "data", n: int | None = None, sources=()) -> FileRecord:
    """Stage one small real Parquet file (or quarantine JSON lines) and return its manifest entry."""
    hour_ms = HOUR_START_MS + hour * 3_600_000
    dt, h = layout.hour_bucket(hour_ms)
    if kind == "quarantine":
        path = layout.quarantine_file_path(topic, 0, partition, start, end)
        data = b'{"offset": %d}\n' % start
    else:
        path = layout.data_file_path(topic, dt, h, layout.data_file_name(topic, 0, partition, start, end, "parquet", n))
        data = encode([record(f"{topic}-{partition}", s) for s in range(start, start + 3)], "parquet")
    rel = commit.staging_relpath(run_id, f"t-{os.path.basename(path)}{layout.STAGED_SUFFIX}")
    storage.write_bytes(storage.join(rel), data)
    return FileRecord(path=path, topic=topic, broker_id=-1 if sources else 0, partition=-1 if sources else partition,
                      start_offset=start, end_offset=end, rows=3 if kind == "data" else 1, format="parquet" if kind == "data" else "jsonl",
                      dt=dt, hour=h, bytes=len(data), schema_id=1, min_time_ms=hour_ms, max_time_ms=hour_ms + 2000,
                      kind=kind, staging=rel, run_id=run_id, sources=tuple(sources))


def history(root: Path | str, steps: int, interval: int) -> list[int]:
    """Commit ``steps`` operations (loads of two topics, a replay, a compaction, a reset, losses, quarantine)
    to ``root`` with ``state.checkpoint.interval`` = ``interval``; returns the seq after each step.

    The same arguments always give the same manifests (a fake clock, fixed run ids), so a destination
    built with checkpoints can be compared with one built without.
    """
    st = open_storage(str(root))
    clock = FakeClock(HOUR_START_MS + 100 * 3_600_000)
    offsets = {(t, 0, p): OffsetRecord(t, 0, p, 0) for t in TOPICS for p in (0, 1)}
    seqs = []
    for i in range(steps):
        run_id = f"run-{i:03d}"
        added, removed, lost = [], [], []
        kind = "load"
        if i % 7 == 5:  # replay p0 of views from its first load: withdraw that file, reload under a new name
            kind = "load"
            state = LoaderState.load(st)
            old = [f for f in state.files("views") if f.partition == 0 and f.start_offset == 0]
            removed = [f.path for f in old]
            added = [staged(st, run_id, "views", 0, 0, PER_COMMIT, n=i)]
        elif i % 7 == 6:  # compact every committed data file of clicks hour 0 into one
            state = LoaderState.load(st)
            old = [f for f in state.files("clicks") if f.hour == layout.hour_bucket(HOUR_START_MS)[1]
                   and f.dt == layout.hour_bucket(HOUR_START_MS)[0]]
            if old:
                new = staged(st, run_id, "clicks", 0, min(f.start_offset for f in old), max(f.end_offset for f in old),
                             n=i, sources=[(0, f.partition, f.start_offset, f.end_offset) for f in old])
                commit.replace_files(st, [f.path for f in old], [new], run_id=run_id, clock=clock,
                                     checkpoint_interval=interval)
                seqs.append(LoaderState.load(st).seq)
                clock.sleep(60)
                continue
        elif i % 11 == 10:  # reset-offsets: views p1 back by one load, its newest file withdrawn
            kind = "reset"
            state = LoaderState.load(st)
            newest = max((f for f in state.files("views") if f.partition == 1), key=lambda f: f.end_offset)
            removed = [newest.path]
            offsets[("views", 0, 1)] = OffsetRecord("views", 0, 1, newest.start_offset)
        else:
            for t in TOPICS:
                for p in (0, 1):
                    o = offsets[(t, 0, p)].offset
                    added.append(staged(st, run_id, t, p, o, o + PER_COMMIT, hour=i % 3))
                    offsets[(t, 0, p)] = OffsetRecord(t, 0, p, o + PER_COMMIT, HOUR_START_MS + i, (o, 3))
            if i % 4 == 3:
                added.append(staged(st, run_id, "views", 1, offsets[("views", 0, 1)].offset, offsets[("views", 0, 1)].offset + 1,
                                    kind="quarantine"))
            if i % 5 == 4:
                lost.append(LostRange("clicks", 0, 1, 10_000 + i, 10_050 + i, 50, 5, HOUR_START_MS, HOUR_START_MS + 1,
                                      run_id, HOUR_START_MS + i, messages_exact=bool(i % 2),
                                      session_bounds=(("s", 1, None),)))
        commit.commit_files(st, kind=kind, run_id=run_id, offsets=list(offsets.values()), added=added,
                            removed=removed, lost_ranges=lost, clock=clock, checkpoint_interval=interval)
        commit.gc_staging(st, [run_id])
        seqs.append(LoaderState.load(st).seq)
        clock.sleep(60)
    return seqs


def view(state: LoaderState) -> dict:
    """Everything a reader can ask a state, in plain values."""
    return {
        "seq": state.seq, "offsets": dict(state.offsets), "files": state.files(kind=None),
        "by_topic": {t: state.files(t, kind=None) for t in TOPICS},
        "data": state.files(), "quarantine": state.files(kind="quarantine"),
        "partition": {(t, p): state.files_of_partition((t, 0, p)) for t in TOPICS for p in (0, 1)},
        "lost": state.lost_ranges(), "runs": state.runs(), "unpublished": state.unpublished,
        "paths": {f.path: state.full_path(f) for f in state.files(kind=None)}, "topics": state.topics(),
    }


def full_fold(root: Path, scratch: Path) -> dict:
    """The oracle: the state of a copy of ``root`` without any checkpoint (every manifest folded)."""
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(root, scratch, symlinks=True)
    shutil.rmtree(scratch / layout.CHECKPOINTS_DIR, ignore_errors=True)
    v = view(LoaderState.load(open_storage(str(scratch))))
    v["paths"] = {p: full[len(str(scratch)):] for p, full in v["paths"].items()}
    return v


def relative(v: dict, root: Path) -> dict:
    v = dict(v)
    v["paths"] = {p: full[len(str(root)):] for p, full in v["paths"].items()}
    return v


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, bytes (files) and mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (p.is_dir(), None if p.is_dir() else p.read_bytes(), st.st_mtime_ns)
    return out
