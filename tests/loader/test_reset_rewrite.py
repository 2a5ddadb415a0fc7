"""The rewrite of a compacted file whose ranges a load reloads (ingest.loader.replay), on real files.

A compacted hour is built with the compaction tests' helpers (real Avro/Parquet files committed
through the loader's commit protocol, merged by the real compaction run); a "reload" is a staged file
of the same rows, as a load task leaves it. Exact ids throughout.
"""
from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest

from ingest.loader.row_ids import message_ids, without_ids
from ingest.loader import commit, layout
from ingest.loader.plan import LoadPlan, PartitionPlan, PartitionSnapshot
from ingest.loader.records import FileRecord
from ingest.loader.replay import rewrite_compacted, rewrite_path, trim_sources
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.compaction.helpers import HOUR_START_MS, encode, make_hour, record
from tests.compaction.test_compaction import compact

TOPIC = "page-views"
PER_FILE = 10


def file_ids(f: int) -> list[tuple[str, int]]:
    """The ids make_hour puts in its file ``f`` (no duplicates with dup_every above the row count)."""
    return [("s-a" if s % 2 else "s-b", s) for s in range(f * PER_FILE, (f + 1) * PER_FILE)]


@pytest.fixture(params=["avro", "parquet"])
def hour(request, tmp_path):
    """Six files, partitions 0,1,0,1,0,1 at offsets f*1000..f*1000+999, compacted into one file."""
    make_hour(tmp_path, request.param, files=6, per_file=PER_FILE, dup_every=10**9)
    assert compact(tmp_path)[TOPIC]["action"] == "compacted"
    st = open_storage(str(tmp_path))
    return request.param, st, LoaderState.load(st)


def reload(st, fmt: str, run_id: str, partition: int, files: list[int]) -> FileRecord:
    """A staged file of the rows of make_hour's ``files``, as a load task of ``run_id`` leaves it."""
    recs = [record(s, q) for f in files for s, q in file_ids(f)]
    name = layout.data_file_name(TOPIC, 0, partition, files[0] * 1000, 6000, fmt)
    staged = commit.staging_relpath(run_id, layout.staged_name(name))
    st.mkdirs(st.join(commit.staging_relpath(run_id)))
    st.write_bytes(st.join(staged), encode(recs, fmt))
    dt, hour = layout.hour_bucket(HOUR_START_MS)
    return FileRecord(path=layout.data_file_path(TOPIC, dt, hour, name), topic=TOPIC, broker_id=0,
                      partition=partition, start_offset=files[0] * 1000, end_offset=6000, rows=len(recs), format=fmt,
                      dt=dt, hour=hour, staging=staged)


def plan(run_id: str, seq: int, partition: int, start: int, end: int) -> LoadPlan:
    snap = PartitionSnapshot(TOPIC, 0, partition, "h", 1, earliest=0, latest=6000)
    return LoadPlan(run_id, seq, (PartitionPlan(snap, 6000, start, end, replay=True),))


def test_the_rewrite_keeps_exactly_the_rows_not_reloaded(hour):
    fmt, st, state = hour
    [compacted] = state.files(TOPIC)
    assert sorted(compacted.sources) == sorted((0, f % 2, f * 1000, f * 1000 + 999) for f in range(6))
    added = [reload(st, fmt, "rr", 0, [2, 4])]  # p0 from offset 2000: make_hour's files 2 and 4
    withdrawn, [new] = rewrite_compacted(st, plan("rr", state.seq, 0, 2000, 6000), state, added)
    assert withdrawn == [compacted.path]
    assert new.path == rewrite_path(compacted.path, "rr") and new.path.endswith(f".r-rr.{fmt}")
    assert new.staging.startswith(layout.staging_dir("rr"))
    data = st.read_bytes(st.join(new.staging))
    assert sorted(message_ids(fmt, data)) == sorted(i for f in (0, 1, 3, 5) for i in file_ids(f))
    assert new.rows == 4 * PER_FILE and new.bytes == len(data)
    assert sorted(new.sources) == [(0, 0, 0, 999), (0, 1, 1000, 1999), (0, 1, 3000, 3999), (0, 1, 5000, 5999)]
    assert (new.start_offset, new.end_offset, new.broker_id, new.partition, new.dt, new.hour) == (
        0, 5999, -1, -1, compacted.dt, compacted.hour)


def test_only_reloaded_files_of_the_compacted_files_hour_are_read(hour):
    """Same ids staged under another hour (impossible for real copies of a message) are not taken out."""
    import dataclasses

    fmt, st, state = hour
    elsewhere = dataclasses.replace(reload(st, fmt, "rr", 0, [2, 4]), hour=(layout.hour_bucket(HOUR_START_MS)[1] + 1) % 24)
    withdrawn, [new] = rewrite_compacted(st, plan("rr", state.seq, 0, 2000, 6000), state, [elsewhere])
    assert new.rows == 6 * PER_FILE and (0, 0, 2000, 2999) not in new.sources


def test_a_deferred_tail_keeps_its_source_so_the_next_run_finds_it(hour):
    """max.bytes.per.run stops this run at 3000: file 4's rows stay and so does its range."""
    fmt, st, state = hour
    withdrawn, [new] = rewrite_compacted(st, plan("rr", state.seq, 0, 2000, 3000), state,
                                         [reload(st, fmt, "rr", 0, [2])])
    assert sorted(message_ids(fmt, st.read_bytes(st.join(new.staging)))) == sorted(
        i for f in (0, 1, 3, 4, 5) for i in file_ids(f))
    assert (0, 0, 4000, 4999) in new.sources and (0, 0, 2000, 2999) not in new.sources


def test_no_row_left_means_no_rewrite_and_other_ranges_are_not_rewritten(hour):
    fmt, st, state = hour
    every = [reload(st, fmt, "rr", 0, [0, 2, 4]), reload(st, fmt, "rr", 1, [1, 3, 5])]
    p = LoadPlan("rr", state.seq, tuple(PartitionPlan(PartitionSnapshot(TOPIC, 0, q, "h", 1, earliest=0, latest=6000), 6000, 0, 6000,
                                                      replay=True) for q in (0, 1)))
    assert rewrite_compacted(st, p, state, every) == ([state.files(TOPIC)[0].path], [])
    assert rewrite_compacted(st, plan("rr", state.seq, 0, 6000, 7000), state, []) == ([], [])  # after the hour


def test_without_ids_keeps_order_schema_and_compression(tmp_path):
    recs = [record("s", i) for i in range(20)]
    data = encode(recs, "parquet")
    out = without_ids("parquet", data, {("s", 3), ("s", 7), ("x", 1)})
    assert (out.kept, out.dropped) == (18, 2)
    assert message_ids("parquet", out.data) == [("s", i) for i in range(20) if i not in (3, 7)]
    meta = pq.ParquetFile(io.BytesIO(out.data)).metadata
    assert meta.row_group(0).column(0).compression == pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0).compression
    assert pq.read_schema(io.BytesIO(out.data)) == pq.read_schema(io.BytesIO(data))
    avro = without_ids("avro", encode(recs, "avro"), {("s", 0)})
    assert (avro.kept, avro.dropped) == (19, 1) and message_ids("avro", avro.data)[0] == ("s", 1)


def test_trim_sources_and_rewrite_names():
    src = ((0, 0, 0, 100), (0, 0, 100, 300), (0, 1, 0, 300))
    assert trim_sources(src, {("t", 0, 0): (150, 250)}, "t") == ((0, 0, 0, 100), (0, 0, 100, 150), (0, 0, 250, 300),
                                                                  (0, 1, 0, 300))
    assert trim_sources(src, {("other", 0, 0): (0, 999)}, "t") == src
    assert rewrite_path("t/dt=d/hour=1/t.compacted.c1.0-0.avro", "R1") == "t/dt=d/hour=1/t.compacted.c1.0-0.r-R1.avro"
    assert rewrite_path("t/dt=d/hour=1/t.compacted.c1.0-0.r-R1.avro", "R2") == "t/dt=d/hour=1/t.compacted.c1.0-0.r-R2.avro"
