"""One rule for what a replay withdraws, shared by the load's --reset-offsets and reset-offsets."""
from __future__ import annotations

import pytest

from ingest.loader import commit, layout
from ingest.loader.plan import LoadPlan, PartitionPlan, PartitionSnapshot
from ingest.loader.records import FileRecord, OffsetRecord
from ingest.loader.reset import partition_ranges, removed_by_replay, snap_to_files, withdrawn_by_replay
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

P0, P1 = ("t", 0, 0), ("t", 0, 1)


def _file(storage, run_id, partition, start, end, hour=1) -> FileRecord:
    name = layout.data_file_name("t", 0, partition, start, end, "avro")
    staged = commit.staging_relpath(run_id, name)
    storage.write_bytes(storage.join(staged), b"x")
    return FileRecord(path=layout.data_file_path("t", "2026-11-22", hour, name), topic="t", broker_id=0,
                      partition=partition, start_offset=start, end_offset=end, rows=1, format="avro",
                      dt="2026-11-22", hour=hour, staging=staged, run_id=run_id)


def _compacted(storage, run_id, sources, hour=1) -> FileRecord:
    staged = commit.staging_relpath(run_id, "m.avro")
    storage.write_bytes(storage.join(staged), b"m")
    return FileRecord(path=f"t/dt=2026-11-22/hour={hour:02d}/t.compacted.{run_id}.avro", topic="t", broker_id=-1,
                      partition=-1, start_offset=min(s[2] for s in sources), end_offset=max(s[3] for s in sources),
                      rows=2, format="avro", staging=staged, run_id=run_id, sources=tuple(sources))


@pytest.fixture
def st(tmp_path):
    return open_storage(str(tmp_path))


def _loaded(st, files) -> LoaderState:
    commit.commit_files(st, kind="load", run_id="r1", offsets=[OffsetRecord(*P0, 300), OffsetRecord(*P1, 300)],
                        added=files)
    return LoaderState.load(st)


def _plan(key, start) -> LoadPlan:
    snap = PartitionSnapshot(key[0], key[1], key[2], "h", 1, earliest=0, latest=300)
    return LoadPlan("run", 1, (PartitionPlan(snap, 300, start, 300, replay=True),))


def test_replay_withdraws_the_partitions_files_from_its_start_only(st):
    f = [_file(st, "r1", 0, 0, 100), _file(st, "r1", 0, 100, 200), _file(st, "r1", 0, 200, 300),
         _file(st, "r1", 1, 100, 200)]
    state = _loaded(st, f)
    assert withdrawn_by_replay(state, P0, 100) == [f[1].path, f[2].path]
    assert withdrawn_by_replay(state, P0, 300) == []
    assert removed_by_replay(_plan(P0, 100), state) == withdrawn_by_replay(state, P0, 100)  # the load's path


def test_a_compacted_file_wholly_before_the_replay_start_stays(st):
    """The load's old copy of this rule refused any partition holding a compacted file."""
    a, b = _file(st, "r1", 0, 0, 100), _file(st, "r1", 1, 0, 100)
    state = _loaded(st, [a, b, _file(st, "r1", 0, 100, 200, hour=2)])
    merged = _compacted(st, "c1", [(0, 0, 0, 100), (0, 1, 0, 100)])
    commit.replace_files(st, [a.path, b.path], [merged], run_id="c1")
    state = LoaderState.load(st)
    assert partition_ranges(merged, P0) == [(0, 100)] and partition_ranges(merged, P1) == [(0, 100)]
    later = [f.path for f in state.files_of_partition(P0) if f.start_offset == 100]
    assert withdrawn_by_replay(state, P0, 100) == later
    assert removed_by_replay(_plan(P0, 100), state) == later


def test_a_compacted_file_is_never_withdrawn_whole_by_the_rule(st):
    """It holds other ranges too (here p1's, starting before the replay): the load that reloads p0's
    range rewrites it instead (tests/loader/test_replay_rewrite.py); the old rule refused the replay."""
    a, b = _file(st, "r1", 0, 100, 200), _file(st, "r1", 1, 0, 100)
    _loaded(st, [a, b])
    merged = _compacted(st, "c1", [(0, 0, 100, 200), (0, 1, 0, 100)])
    commit.replace_files(st, [a.path, b.path], [merged], run_id="c1")
    state = LoaderState.load(st)
    assert merged.start_offset == 0  # p1's range; p0's starts at 100
    assert withdrawn_by_replay(state, P0, 150) == []
    assert removed_by_replay(_plan(P0, 150), state) == []
    assert withdrawn_by_replay(state, P0, 100) == []


def test_snap_uses_the_partitions_own_ranges_of_a_compacted_file(st):
    merged = FileRecord(path="x", topic="t", broker_id=-1, partition=-1, start_offset=0, end_offset=500, rows=1,
                        format="avro", sources=((0, 0, 100, 200), (0, 1, 0, 500)))
    assert snap_to_files(150, 0, [merged], P0) == 100
    assert snap_to_files(150, 120, [merged], P0) == 200
    assert snap_to_files(300, 0, [merged], P0) == 300  # inside p1's range only: not p0's business
