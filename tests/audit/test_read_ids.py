"""The loaded ids of many topics' Parquet files are read in one scan that packs small files into few
tasks, each row carrying its own file's topic."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.audit.inputs import LoadedFile, read_ids
from ingest.loader import layout

HEADER = pa.struct([("time", pa.int64()), ("server", pa.string()), ("session", pa.string()), ("seq", pa.int64())])


def _write(root, topic: str, partition: int, seqs: range) -> LoadedFile:
    rel = layout.data_file_path(topic, "2026-11-28", 3, layout.data_file_name(topic, 0, partition, 0, len(seqs), "parquet"))
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "header": pa.array([{"time": 1_000 + s, "server": "h", "session": f"{topic}-{partition}", "seq": s} for s in seqs],
                           type=HEADER),
        "_partition": pa.array([partition] * len(seqs), pa.int32()),
        "_offset": pa.array(list(seqs), pa.int64()),
        "_timestamp": pa.array([1_000 + s for s in seqs], pa.int64()),
    })
    pq.write_table(table, path)
    return LoadedFile(topic=topic, path=str(path), spark_path=str(path), format="parquet", hour_start_ms=0)


def test_many_topics_files_are_one_scan_of_few_tasks_and_each_row_has_its_files_topic(spark, tmp_path):
    # Topic names with dots, one a prefix of another: the topic is never parsed out of a name.
    topics = ["page.view", "page.view.b1", "click", "t3", "t4", "t5"]
    files = [_write(tmp_path, t, p, range(p * 10, p * 10 + 7)) for t in topics for p in range(5)]
    df = read_ids(spark, files)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan parquet") == 1, plan
    # 30 files of a few hundred bytes: Spark packs them (openCostInBytes 4 MB, 2 cores) into few tasks.
    assert df.rdd.getNumPartitions() < len(files)
    got = sorted((r.topic, r.session, r.seq) for r in df.collect())
    assert got == sorted((t, f"{t}-{p}", s) for t in topics for p in range(5) for s in range(p * 10, p * 10 + 7))


def test_one_topic_needs_no_join(spark, tmp_path):
    files = [_write(tmp_path, "pv", p, range(3)) for p in range(3)]
    df = read_ids(spark, files)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Join" not in plan and plan.count("FileScan parquet") == 1, plan
    assert sorted((r.topic, r.session, r.seq) for r in df.collect()) == sorted(
        ("pv", f"pv-{p}", s) for p in range(3) for s in range(3))
