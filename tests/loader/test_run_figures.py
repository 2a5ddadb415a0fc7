"""Loader and audit runs add their figures to their results and print them.

A real load (the session's SparkSession, a real broker and registry) of ``N`` events:
the run record, as written to the destination, holds the wall seconds of each stage,
the messages, bytes and files of the run and its rates, and the printed summary
names them. An audit of the same destination reports what it read (files, rows),
seconds per step and rows/s. The stage clock itself is checked with a fake clock.
"""
from __future__ import annotations

import json

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import figures_text, run_audit
from ingest.loader import layout
from ingest.loader.job import run_load
from ingest.loader.runrecord import STAGES, StageTimes, stages_text, summary_text
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess
from tests.loader.helpers import loader_config, produce

N = 120
TOPIC = "metered-views"


def test_stage_times_are_the_time_between_ends():
    ticks = iter([10.0, 10.25, 11.0, 14.5, 14.75])
    record: dict = {}
    stages = StageTimes(record, monotonic=lambda: next(ticks))
    for stage in STAGES:
        stages.end(stage)
    assert record["stage_seconds"] == {"prepare": 0.25, "plan": 0.75, "execute": 3.5, "commit": 0.25}
    assert stages_text(record) == "prepare 0.25 s, plan 0.75 s, execute 3.50 s, commit 0.25 s"
    assert stages_text({"stage_seconds": {"prepare": 0.1}}) == "prepare 0.10 s"


@pytest.fixture(scope="module")
def loaded(spark, tmp_path_factory):
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=2)
    try:
        produce(brokers, registry.url, TOPIC, N)
        dest = tmp_path_factory.mktemp("runs") / "out"
        result = run_load(loader_config(dest, brokers, registry.url, topics=TOPIC), spark)
        yield dest, result
    finally:
        stop_all(brokers)
        registry.stop()


def test_the_load_run_record_holds_its_figures_and_the_summary_prints_them(loaded):
    dest, result = loaded
    assert result.status == "committed"
    storage = open_storage(str(dest))
    record = json.loads(storage.read_bytes(storage.join(layout.run_record_path(result.run_id))))
    state = LoaderState.load(storage)
    t = record["totals"]
    assert sorted(record["stage_seconds"]) == sorted(STAGES)          # the record is written with sorted keys
    assert all(s >= 0 for s in record["stage_seconds"].values())
    assert t["messages"] == N == sum(f.rows for f in state.files(TOPIC))
    assert t["files"] == len(state.files(TOPIC)) >= 2          # two partitions: at least a file each
    assert t["bytes"] == sum(o.offset for o in state.offsets.values())
    # the record's seconds are rounded to ms, the rates computed from the unrounded ones: equal within 0.5 %
    assert t["execute_messages_per_s"] == pytest.approx(N / record["stage_seconds"]["execute"], rel=5e-3)
    assert t["messages_per_s"] == pytest.approx(N / t["elapsed_s"], rel=5e-3)
    text = summary_text(record)
    assert f"messages {N}, bytes {t['bytes']}, files {t['files']}" in text
    assert f"  stages: {stages_text(record)}; {t['execute_messages_per_s']} msg/s while executing" in text


def test_the_audit_run_reports_what_it_read_and_how_long_each_step_took(loaded, spark):
    dest, _ = loaded
    run = run_audit(spark, AUDIT_CONFIG.parse({"destination": str(dest), "window.lookback": 6}),
                    write_history=False)
    f = run.figures
    files = len(LoaderState.load(open_storage(str(dest))).files(TOPIC))
    assert (f["data_files"], f["rows_read"], f["monitoring_files"]) == (files, N, 0)
    assert f["windows"] == len([r for r in run.rows if r["row_type"] != "producer"]) >= 1
    assert list(f["step_seconds"]) == ["loader state", "monitoring", "distinct counts", "attribution candidates",
                                       "missing-id samples"]
    assert f["elapsed_s"] >= sum(f["step_seconds"].values()) - 0.01
    # elapsed_s is rounded to ms, rows_per_s to 0.1 (which is more than 5e-3 of a slow run's rate)
    assert f["rows_per_s"] == pytest.approx(N / f["elapsed_s"], rel=5e-3, abs=0.051)
    assert figures_text(run).startswith(f"audit {run.run_id} read {files} data files ({N} rows counted) "
                                        "and 0 monitoring files;")
