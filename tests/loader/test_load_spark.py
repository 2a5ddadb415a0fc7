"""In-process loads on the shared local[2] SparkSession against real brokers and registry."""
from __future__ import annotations

import collections

import pytest

from ingest.loader.job import run_load
from ingest.loader.state import LoaderState, run_records
from ingest.storage import open_storage
from tests.loader.helpers import committed_ids, loader_config, produce


def test_incremental_runs_load_only_new_data_exactly_once(spark, brokers, registry_url, tmp_path):
    topic = "pageviews-inc"
    first = produce(brokers, registry_url, topic, 300)
    cfg = loader_config(tmp_path / "out", brokers, registry_url, topics="pageviews-inc")
    r1 = run_load(cfg, spark)
    assert r1.status == "committed"
    ids = committed_ids(tmp_path / "out", topic)
    assert set(ids) == set(first) and max(ids.values()) == 1
    second = produce(brokers, registry_url, topic, 200, seed=2)
    r2 = run_load(cfg, spark)
    ids = committed_ids(tmp_path / "out", topic)
    assert set(ids) == set(first) | set(second) and max(ids.values()) == 1
    assert r2.record["totals"]["messages"] == 200
    r3 = run_load(cfg, spark)
    assert r3.status == "nothing-to-do"
    state = LoaderState.load(open_storage(str(tmp_path / "out")))
    assert sum(f.rows for f in state.files(topic)) == 500
    assert [r["status"] for r in run_records(state.storage)] == ["committed", "committed", "nothing-to-do"]
