"""Reading the loader's state never changes the destination, even mid roll-forward.

A real commit is SIGKILLed inside its publish (``INGEST_FAULTS=mid-publish``):
one added file is renamed into place, the others are still staged, the file the
commit withdraws (a replay) is still on disk, and no ``.published`` marker
exists. Every reader (LoaderState, ``loader status``, the audit's state read,
compaction's plan and ``compaction status``, the demo summary) must leave every
path, byte and mtime as it was and still report the committed data exactly once;
the next writer rolls the commit forward.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest.clock import FakeClock
from ingest.loader import commit, layout, manifests
from ingest.loader.records import FileRecord, OffsetRecord
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.compaction.helpers import HOUR_START_MS, encode, hour_dir, record
from tests.loader.checkpoint_helpers import snapshot

pytestmark = pytest.mark.processes  # a Python subprocess killed mid-commit

REPO = Path(__file__).resolve().parents[2]
TOPIC = "page-views"
ALL_IDS = {("s-a" if seq % 2 else "s-b", seq) for seq in range(250)}
AFTER_HOUR = HOUR_START_MS + 2 * 3_600_000

# The subprocess is the committing writer; it SIGKILLs itself at the crash point.
_COMMITTER = """
import json, sys
from ingest.loader.commit import commit_files
from ingest.loader.records import FileRecord, OffsetRecord
from ingest.storage import open_storage
spec = json.loads(sys.argv[1])
commit_files(open_storage(spec["root"]), kind="load", run_id=spec["run_id"],
             offsets=[OffsetRecord(**o) for o in spec["offsets"]],
             added=[FileRecord.from_json(f) for f in spec["added"]], removed=spec["removed"])
"""


def _staged_file(storage, run_id, partition, start, end, seqs, n=None) -> FileRecord:
    dt, hour = layout.hour_bucket(HOUR_START_MS)
    name = layout.data_file_name(TOPIC, 0, partition, start, end, "parquet", n)
    staged = commit.staging_relpath(run_id, f"t0-a0-{name}")
    data = encode([record("s-a" if s % 2 else "s-b", s) for s in seqs], "parquet")
    storage.write_bytes(storage.join(staged), data)
    return FileRecord(path=layout.data_file_path(TOPIC, dt, hour, name), topic=TOPIC, broker_id=0,
                      partition=partition, start_offset=start, end_offset=end, rows=len(seqs), format="parquet",
                      dt=dt, hour=hour, bytes=len(data), schema_id=1, min_time_ms=HOUR_START_MS,
                      max_time_ms=HOUR_START_MS + 3_599_999, staging=staged, run_id=run_id)


def _half_rolled_forward(root: Path) -> dict[str, str]:
    """Commit 1 (A, B, C) fully; commit 2 (replay of C as C', plus D, E) killed mid-publish."""
    st = open_storage(str(root))
    a = _staged_file(st, "load-1", 0, 0, 1000, range(0, 50))
    b = _staged_file(st, "load-1", 1, 0, 1000, range(50, 100))
    c = _staged_file(st, "load-1", 0, 1000, 2000, range(100, 150))
    commit.commit_files(st, kind="load", run_id="load-1", added=[a, b, c],
                        offsets=[OffsetRecord(TOPIC, 0, 0, 2000), OffsetRecord(TOPIC, 0, 1, 1000)])
    commit.gc_staging(st, ["load-1"])
    d = _staged_file(st, "load-2", 0, 2000, 3000, range(150, 200))
    c2 = _staged_file(st, "load-2", 0, 1000, 2000, range(100, 150), n=2)  # the replayed range, reloaded
    e = _staged_file(st, "load-2", 1, 1000, 2000, range(200, 250))
    spec = {"root": str(root), "run_id": "load-2", "removed": [c.path],
            "added": [f.to_json() for f in (d, c2, e)],
            "offsets": [OffsetRecord(TOPIC, 0, 0, 3000).to_json(), OffsetRecord(TOPIC, 0, 1, 2000).to_json()]}
    env = dict(os.environ, INGEST_FAULTS="mid-publish",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _COMMITTER, json.dumps(spec)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr  # really SIGKILLed inside the publish
    # The crash left exactly the half-finished roll-forward this test is about.
    assert st.exists(st.join(d.path)) and not st.exists(st.join(d.staging))
    assert st.exists(st.join(c2.staging)) and st.exists(st.join(e.staging)) and not st.exists(st.join(e.path))
    assert st.exists(st.join(c.path))  # withdrawn by commit 2, not yet deleted
    assert not manifests.is_published(st, 2)
    return {"A": a.path, "B": b.path, "C": c.path, "C2": c2.path, "D": d.path, "E": e.path}


def _ids_of(paths) -> list[tuple[str, int]]:
    return [(r["header"]["session"], r["header"]["seq"]) for p in paths for r in pq.read_table(p).to_pylist()]


@pytest.fixture
def half(tmp_path):
    root = tmp_path / "dest"
    paths = _half_rolled_forward(root)
    return root, paths, snapshot(root)


def test_every_reader_leaves_the_destination_untouched_and_sees_the_commit(half, brokers, tmp_path, capsys):
    from ingest.audit.inputs import load_state
    from ingest.cli import main
    from ingest.compaction.config import COMPACTION_CONFIG
    from ingest.compaction.plan import Settings, plan_hours
    from ingest.demo.summary import loaded_rows
    from ingest.loader.status import partition_status, status
    from ingest.loader.plan import PartitionSnapshot
    from tests.loader.helpers import loader_config

    root, paths, before = half
    committed = sorted(paths[k] for k in ("A", "B", "C2", "D", "E"))

    state = LoaderState.load(open_storage(str(root)))
    assert state.seq == 2 and state.unpublished == (2,)
    assert [f.path for f in state.files(TOPIC)] == committed  # C withdrawn, C' / E committed while staged
    assert state.offset(TOPIC, 0, 0) == 3000 and state.offset(TOPIC, 0, 1) == 2000
    ids = _ids_of(state.full_path(f) for f in state.files(TOPIC))
    assert len(ids) == len(set(ids)) and set(ids) == ALL_IDS  # exactly once, read where the bytes are

    audit = load_state(str(root))
    assert audit.commit_seq == 2 and sorted(f.path for f in audit.files) == sorted(state.full_path(p) for p in committed)
    audited = _ids_of(f.path for f in audit.files)
    assert len(audited) == len(set(audited)) and set(audited) == ALL_IDS

    cfg = COMPACTION_CONFIG.parse({"destination": str(root), "compaction.require.audit": "false"})
    plans, _ = plan_hours(LoaderState.load(open_storage(str(root))), Settings.from_config(cfg), AFTER_HOUR)
    assert [sorted(f.path for f in p.files) for p in plans] == [committed]
    assert main(["compaction", "status", "--set", f"destination={root}"]) == 0
    assert "5 file(s)" in capsys.readouterr().out

    assert loaded_rows(root) == {TOPIC: 250}

    config = loader_config(root, brokers, "http://127.0.0.1:9", topics=TOPIC)
    # the brokers have no such topic: each committed partition is listed as left out, offsets kept
    rows = status(config)
    assert sorted((r.topic, r.broker_id, r.partition, r.committed) for r in rows) == [
        (TOPIC, 0, 0, 3000), (TOPIC, 0, 1, 2000)]
    assert all(r.left_out == "no broker that answered serves it" and r.latest is None for r in rows)
    snap = PartitionSnapshot(TOPIC, 0, 0, "127.0.0.1", 9, earliest=0, latest=3000)
    assert partition_status(config, state, snap, AFTER_HOUR).committed == 3000
    conf = tmp_path / "loader.properties"
    conf.write_text(f"destination={root}\nbrokers={brokers[0].host}:{brokers[0].port}\nregistry.url=http://x\n")
    assert main(["loader", "status", "--config", str(conf), "--json"]) == 0
    capsys.readouterr()

    assert snapshot(root) == before  # no path, byte or mtime changed


@pytest.mark.parametrize("writer", ["roll_forward", "compaction"])
def test_the_next_writer_rolls_forward_exactly_once(half, writer):
    from ingest.compaction.config import COMPACTION_CONFIG
    from ingest.compaction.runner import run

    root, paths, _ = half
    st = open_storage(str(root))
    if writer == "roll_forward":
        assert commit.roll_forward(st) == [2]
        expected = sorted(os.path.basename(paths[k]) for k in ("A", "B", "C2", "D", "E"))
    else:
        cfg = COMPACTION_CONFIG.parse({"destination": str(root), "compaction.require.audit": "false"})
        [out] = run(cfg, clock=FakeClock(AFTER_HOUR))
        assert out["action"] == "compacted" and out["files_in"] == 5 and out["duplicates"] == 0
        expected = None
    state = LoaderState.load(st)
    assert state.unpublished == () and manifests.is_published(st, 2)
    on_disk = sorted(p.name for p in hour_dir(root, TOPIC).iterdir())
    assert on_disk == (expected or sorted(os.path.basename(f.path) for f in state.files(TOPIC)))
    assert all(state.full_path(f) == st.join(f.path) for f in state.files(TOPIC))  # every file in place
    assert not (root / layout.STAGING_DIR / "load-2").exists()
    ids = _ids_of(state.full_path(f) for f in state.files(TOPIC))
    assert len(ids) == len(set(ids)) == 250 and set(ids) == ALL_IDS
