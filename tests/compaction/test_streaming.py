"""Compaction streams: batches smaller than a file, files split across batches, ids seen across batches."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.clock import FakeClock
from ingest.compaction.config import COMPACTION_CONFIG
from ingest.compaction.formats import SeenIds
from ingest.compaction.plan import HOUR_MS
from ingest.compaction.runner import run
from ingest.errors import ConfigError
from tests.compaction.helpers import (HOUR_START_MS, commit_hour_files, committed_paths, make_hour,
                                      read_ids, record)

AFTER_HOUR = HOUR_START_MS + HOUR_MS + 11 * 60 * 1000


def compact(root, **overrides) -> dict:
    cfg = COMPACTION_CONFIG.parse({"destination": str(root), "compaction.require.audit": "false", **overrides})
    [result] = run(cfg, clock=FakeClock(AFTER_HOUR))
    return result


def first_occurrences(ids: list) -> list:
    seen: set = set()
    return [i for i in ids if not (i in seen or seen.add(i))]


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_small_batches_keep_every_row_once_in_input_order(tmp_path, fmt):
    make_hour(tmp_path, fmt, files=5, per_file=4000, dup_every=3)
    before = read_ids(committed_paths(tmp_path), fmt)
    result = compact(tmp_path, **{"compaction.batch.bytes": 64 * 1024, "compaction.target.bytes": 150_000})
    paths = committed_paths(tmp_path)
    after = read_ids(paths, fmt)
    assert after == first_occurrences(before) and len(after) == 20_000
    assert result["rows_in"] == len(before) and result["duplicates"] == len(before) - 20_000
    assert result["files_out"] == len(paths) > 1
    if fmt == "parquet":
        # a 64 KB batch holds some thousand page views: a row group per batch, several per file
        assert sum(pq.ParquetFile(p).num_row_groups for p in paths) > len(paths)


def test_columns_missing_or_all_null_in_some_files_are_promoted_as_before(tmp_path):
    """A file without a column, or with it only null (pyarrow infers type null), joins the others' schema."""
    recs = [record("s", i) for i in range(30)]
    for r in recs[10:20]:
        r["referrer"] = None
    for r in recs[20:]:
        r["referrer"] = f"/from/{r['header']['seq']}"
    commit_hour_files(tmp_path, [(0, 0, 9, recs[:10]), (0, 10, 19, recs[10:20]), (1, 20, 29, recs[20:])],
                      "parquet")
    compact(tmp_path, **{"compaction.batch.bytes": 64 * 1024})
    [path] = committed_paths(tmp_path)
    table = pq.read_table(path)
    assert table.schema.field("referrer").type == pa.string()
    assert table.column("referrer").to_pylist() == [None] * 20 + [f"/from/{i}" for i in range(20, 30)]
    assert read_ids([path], "parquet") == [("s", i) for i in range(30)]


def test_seen_ids_is_exact_across_chunks_sessions_nulls_and_negative_numbers():
    seen = SeenIds()
    ids = [("a", 0), ("a", 4095), ("a", 4096), ("b", 0), ("a", 0), (0, 7), ("0", 7), ("a", -1), ("a", -1),
           ("a", None), ("a", None), (None, 5), ("a", 2**62), ("a", 2**62), ("b", 4096)]
    assert seen.mask([g for g, _ in ids], [n for _, n in ids]) == [
        True, True, True, True, False, True, True, True, False, True, False, True, True, False, True]
    assert seen.first("a", 4096) is False and seen.first("a", 4097) is True


def test_batch_bytes_out_of_range_names_the_key_and_range():
    with pytest.raises(ConfigError, match="compaction.batch.bytes"):
        COMPACTION_CONFIG.parse({"compaction.batch.bytes": "100"})


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_an_hour_on_webhdfs_streams_through_downloads_and_uploads(tmp_path, fmt):
    """The merge reads through ``open_read`` (a local copy of each file) and writes through ``open_write``."""
    from tests.harness.webhdfs import WebHdfsServer

    with WebHdfsServer(tmp_path / "hdfs") as server:
        uri = server.uri("/warehouse")
        recs = [record("s-a" if i % 2 else "s-b", i) for i in range(12_000)]
        files = [(f % 2, f * 1000, f * 1000 + 999, recs[f * 3000:(f + 1) * 3000] + recs[f * 3000 + 2500:f * 3000 + 3000])
                 for f in range(4)]  # the last 500 rows of each file twice
        commit_hour_files(uri, files, fmt)
        ids = {(r["header"]["session"], r["header"]["seq"]) for r in recs}
        before = read_ids([str(tmp_path / "hdfs" / p.lstrip("/")) for p in hdfs_paths(uri)], fmt)
        result = compact(uri, **{"compaction.batch.bytes": 64 * 1024})
        paths = hdfs_paths(uri)
        assert all(".compacted." in p for p in paths)
        after = read_ids([str(tmp_path / "hdfs" / p.lstrip("/")) for p in paths], fmt)
        assert after == first_occurrences(before) and set(after) == ids
        assert result["bytes_out"] == sum((tmp_path / "hdfs" / p.lstrip("/")).stat().st_size for p in paths)


def hdfs_paths(uri: str) -> list[str]:
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage

    state = LoaderState.load(open_storage(uri))
    return [state.full_path(f) for f in state.files("page-views")]
