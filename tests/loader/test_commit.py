"""The commit protocol on local storage: commit point, roll-forward, replacement, conflicts."""
from __future__ import annotations

import pytest

from ingest.clock import FakeClock
from ingest.errors import CommitConflictError, CommitError
from ingest.loader import commit, layout
from ingest.loader.commit import commit_files, replace_files, roll_forward
from ingest.loader.records import FileRecord, Manifest, OffsetRecord
from ingest.loader.state import LoaderState
from ingest.storage import open_storage


def _stage(storage, run_id, name, data=b"x"):
    rel = commit.staging_relpath(run_id, name)
    storage.write_bytes(storage.join(rel), data)
    return rel


def _rec(storage, run_id, start, end, hour=1):
    name = layout.data_file_name("t", 0, 0, start, end, "avro")
    return FileRecord(
        path=layout.data_file_path("t", "2026-11-22", hour, name), topic="t", broker_id=0, partition=0,
        start_offset=start, end_offset=end, rows=1, format="avro", dt="2026-11-22", hour=hour,
        staging=_stage(storage, run_id, f"a0-{name}", f"{start}-{end}".encode()), run_id=run_id,
    )


def test_commit_publishes_files_and_offsets_together(tmp_path):
    st = open_storage(str(tmp_path))
    rec = _rec(st, "r1", 0, 100)
    commit_files(st, kind="load", run_id="r1", offsets=[OffsetRecord("t", 0, 0, 100)], added=[rec], expected_seq=0,
                 clock=FakeClock())
    state = LoaderState.load(st)
    assert state.seq == 1 and state.offset("t", 0, 0) == 100
    assert [f.path for f in state.files()] == [rec.path]
    assert st.read_bytes(state.full_path(rec)) == b"0-100"
    assert not st.exists(st.join(rec.staging))


def test_manifest_without_publish_is_committed_and_rolled_forward_by_the_next_writer(tmp_path):
    st = open_storage(str(tmp_path))
    rec = _rec(st, "r1", 0, 100)
    m = Manifest(seq=1, kind="load", run_id="r1", committed_at_ms=1, offsets=(OffsetRecord("t", 0, 0, 100),), added=(rec,))
    commit.write_manifest(st, m)  # crash right after the commit point
    assert not st.exists(st.join(rec.path))
    state = LoaderState.load(st)  # committed already; the reader finds the bytes in staging
    assert state.files()[0].path == rec.path and state.unpublished == (1,)
    assert st.read_bytes(state.full_path(rec)) == b"0-100"
    assert not st.exists(st.join(rec.path))  # and moved nothing
    assert roll_forward(st) == [1]
    assert st.read_bytes(st.join(rec.path)) == b"0-100"
    assert roll_forward(st) == []  # idempotent


def test_second_commit_of_same_seq_conflicts(tmp_path):
    st = open_storage(str(tmp_path))
    commit_files(st, kind="reset", run_id="a", offsets=[OffsetRecord("t", 0, 0, 5)], expected_seq=0)
    with pytest.raises(CommitConflictError, match="another job committed"):
        commit_files(st, kind="reset", run_id="b", offsets=[OffsetRecord("t", 0, 0, 9)], expected_seq=0)
    m = Manifest(seq=1, kind="load", run_id="c", committed_at_ms=1, offsets=())
    with pytest.raises(CommitConflictError, match="concurrent commit"):
        commit.write_manifest(st, m)
    assert LoaderState.load(st).offset("t", 0, 0) == 5


def test_replace_files_swaps_old_set_for_new_in_one_commit(tmp_path):
    st = open_storage(str(tmp_path))
    a, b = _rec(st, "r1", 0, 100), _rec(st, "r1", 100, 200)
    commit_files(st, kind="load", run_id="r1", offsets=[OffsetRecord("t", 0, 0, 200)], added=[a, b])
    merged = FileRecord(
        path="t/dt=2026-11-22/hour=01/t.compacted.avro", topic="t", broker_id=-1, partition=-1, start_offset=0,
        end_offset=200, rows=2, format="avro", staging=_stage(st, "c1", "merged", b"ab"),
        sources=((0, 0, 0, 100), (0, 0, 100, 200)),
    )
    replace_files(st, [a.path, b.path], [merged], run_id="c1")
    state = LoaderState.load(st)
    assert [f.path for f in state.files()] == [merged.path]
    assert state.offset("t", 0, 0) == 200
    assert not st.exists(st.join(a.path)) and st.exists(st.join(merged.path))
    assert state.files_of_partition(("t", 0, 0)) == [merged]
    with pytest.raises(CommitError, match="not committed"):
        replace_files(st, [a.path], [], run_id="c2")


def test_same_named_file_is_replaced_on_replay(tmp_path):
    st = open_storage(str(tmp_path))
    commit_files(st, kind="load", run_id="r1", offsets=[OffsetRecord("t", 0, 0, 100)], added=[_rec(st, "r1", 0, 100)])
    again = _rec(st, "r2", 0, 100)
    st.write_bytes(st.join(again.staging), b"new", overwrite=True)
    commit_files(st, kind="load", run_id="r2", offsets=[OffsetRecord("t", 0, 0, 100)], added=[again], removed=[again.path])
    state = LoaderState.load(st)
    assert len(state.files()) == 1 and st.read_bytes(state.full_path(again)) == b"new"


def test_load_commit_rebases_over_a_concurrent_compaction_only(tmp_path):
    from ingest.loader.job import rebase_target

    st = open_storage(str(tmp_path))
    a = _rec(st, "r1", 0, 100)
    commit_files(st, kind="load", run_id="r1", offsets=[OffsetRecord("t", 0, 0, 100)], added=[a])
    merged = FileRecord(path="t/dt=2026-11-22/hour=01/t.c.avro", topic="t", broker_id=-1, partition=-1,
                        start_offset=0, end_offset=100, rows=1, format="avro",
                        staging=_stage(st, "c1", "m"), sources=((0, 0, 0, 100),))
    replace_files(st, [a.path], [merged], run_id="c1")
    assert rebase_target(st, 1, removed=[]) == 2
    with pytest.raises(CommitConflictError, match="compaction"):
        rebase_target(st, 1, removed=[a.path])
    commit_files(st, kind="reset", run_id="x", offsets=[OffsetRecord("t", 0, 0, 0)])
    with pytest.raises(CommitConflictError, match="reset"):
        rebase_target(st, 1, removed=[])
