"""The driver's small tables (seq ranges, gap bounds) enter Spark as local relations: no Python worker.

A Python list given to ``createDataFrame`` becomes an RDD of pickled rows; scanning it starts
Python workers (1.5-2 s of a small audit). The missing-id sample query must read the ranges in
the JVM, and give the same ids.
"""
from __future__ import annotations

from ingest.audit import counts
from tests.audit.synth import T0, W


def _ids(spark):
    rows = [("pv", "s1", seq, T0 + seq, "host-a") for seq in range(100) if seq not in range(40, 45)]
    df = counts.local_frame(spark, (("topic", "string"), ("session", "string"), ("seq", "long"), ("time", "long"),
                                    ("server", "string")), rows)
    return counts.with_windows(df, window_ms=W, plausible_hi_ms=T0 + 10 * W)


def test_the_missing_seq_query_scans_no_python_rdd(spark):
    ids = _ids(spark)
    missing = counts._missing_seqs(spark, ids, [("pv", T0, "s1", 0, 99)])
    plan = missing._jdf.queryExecution().executedPlan().toString()
    assert "ExistingRDD" not in plan, plan
    assert counts.missing_samples(spark, ids, [("pv", T0, "s1", 0, 99)], 3) == {("pv", T0): ["s1:40", "s1:41", "s1:42"]}


def test_local_frames_keep_types_nulls_and_empty_tables(spark):
    df = counts.local_frame(spark, counts.BOUNDS_FIELDS, [("g1", "pv", "s1", None, 7), ("g2", "pv", "s2", 3, None)])
    assert df.schema.simpleString() == "struct<gap:string,b_topic:string,b_session:string,lo:bigint,hi:bigint>"
    assert [tuple(r) for r in df.collect()] == [("g1", "pv", "s1", None, 7), ("g2", "pv", "s2", 3, None)]
    assert counts.local_frame(spark, counts.RANGES_FIELDS, []).collect() == []
