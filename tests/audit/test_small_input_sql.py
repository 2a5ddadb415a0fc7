"""A small audit's queries run with the small-input SQL settings, give the same ids, and leave the
session as it was; a large input, an unknown row count or a key the operator set is left alone."""
from __future__ import annotations

from ingest.audit import counts, small_input
from ingest.audit.inputs import LoadedFile
from tests.audit.synth import T0, W

SETTINGS = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled", "spark.sql.codegen.wholeStage")


def _files(*rows):
    return [LoadedFile(topic="pv", path=f"p{i}", spark_path=f"p{i}", format="parquet", hour_start_ms=T0, rows=r)
            for i, r in enumerate(rows)]


def _ids(spark):
    rows = [("pv", "s1", seq, T0 + seq, "host-a") for seq in range(100) if seq not in range(40, 45)]
    df = counts.local_frame(spark, (("topic", "string"), ("session", "string"), ("seq", "long"), ("time", "long"),
                                    ("server", "string")), rows)
    return counts.with_windows(df, window_ms=W, plausible_hi_ms=T0 + 10 * W)


def _conf(spark):
    return {k: spark.conf.get(k, None) for k in SETTINGS}


def test_small_input_queries_plan_without_aqe_and_codegen_and_give_the_same_ids(spark):
    before = _conf(spark)
    ids = _ids(spark)
    expected = counts.missing_samples(spark, ids, [("pv", T0, "s1", 0, 99)], 3)
    with small_input.small_input_sql(spark, _files(10_000, 5)):
        inside = _conf(spark)
        missing = counts._missing_seqs(spark, ids, [("pv", T0, "s1", 0, 99)])
        plan = missing._jdf.queryExecution().executedPlan().toString()
        got = counts.missing_samples(spark, ids, [("pv", T0, "s1", 0, 99)], 3)
    assert got == expected == {("pv", T0): ["s1:40", "s1:41", "s1:42"]}
    assert inside["spark.sql.adaptive.enabled"] == "false" and inside["spark.sql.codegen.wholeStage"] == "false"
    assert "AdaptiveSparkPlan" not in plan and "WholeStageCodegen" not in plan, plan
    # The test session sets spark.sql.shuffle.partitions in its SparkConf (as --conf would): kept.
    assert inside["spark.sql.shuffle.partitions"] == before["spark.sql.shuffle.partitions"]
    assert _conf(spark) == before


def test_large_or_unknown_inputs_keep_the_session_settings(spark):
    before = _conf(spark)
    for files in (_files(small_input.SMALL_INPUT_ROWS, 1), _files(5, None)):
        with small_input.small_input_sql(spark, files):
            assert _conf(spark) == before
    assert _conf(spark) == before


def test_small_input_settings_use_one_shuffle_partition_per_core():
    assert small_input.small_input_settings(2) == {"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false",
                                           "spark.sql.codegen.wholeStage": "false"}
