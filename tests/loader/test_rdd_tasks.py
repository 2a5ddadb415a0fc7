"""The job's default task runner (an RDD job) against the ``ingest_load`` Data Source: same outcomes.

The RDD runner exists to skip the Data Source's three planner processes (docs/performance.md,
"A small hourly load's fixed cost"); what a run commits must not depend on which ran the tasks.
In-process loads on the shared local[2] SparkSession against real brokers and registry.
"""
from __future__ import annotations

import dataclasses

from ingest.loader.job import run_load
from ingest.loader.plan import TaskRange
from ingest.loader.state import LoaderState
from ingest.loader.task import TaskSettings
from ingest.storage import open_storage
from tests.loader.helpers import committed_ids, loader_config, produce

_NOT_COMPARED = ("path", "staging", "run_id", "bytes")  # names carry the run id; bytes, Parquet's metadata


def _files(dest, topic):
    state = LoaderState.load(open_storage(str(dest)))
    return sorted(tuple(v for k, v in dataclasses.asdict(f).items() if k not in _NOT_COMPARED)
                  for f in state.files(topic))


def test_rdd_and_datasource_runners_commit_the_same_rows_and_files(spark, brokers, registry_url, tmp_path):
    topic = "pv-runners"
    ids = produce(brokers, registry_url, topic, 400, chunk=40)
    results = {}
    for runner in ("rdd", "datasource"):
        dest = tmp_path / runner
        cfg = loader_config(dest, brokers, registry_url, topics=topic, format="parquet", task_runner=runner)
        assert cfg["task.runner"] == runner
        results[runner] = run_load(cfg, spark)
        assert results[runner].status == "committed"
        got = committed_ids(dest, topic)
        assert set(got) == set(ids) and max(got.values()) == 1  # exactly once, whichever runner
    rdd, ds = results["rdd"].record, results["datasource"].record
    assert rdd["totals"]["messages"] == ds["totals"]["messages"] == 400
    assert rdd["totals"]["tasks"] == ds["totals"]["tasks"] >= 2
    assert _files(tmp_path / "rdd", topic) == _files(tmp_path / "datasource", topic)


def test_the_default_runner_is_rdd_and_takes_a_spark_context(spark, tmp_path):
    from ingest.loader.config import LOADER_CONFIG
    from ingest.loader.rdd_tasks import execute_tasks

    assert LOADER_CONFIG.parse({"destination": "/x", "registry.url": "http://r"})["task.runner"] == "rdd"
    # empty ranges: each task runs run_task for real (no broker contacted) and reports its summary
    tasks = [TaskRange("startup", 0, i % 2, "127.0.0.1", 9, task_id=i, start=0, end=0) for i in range(5)]
    settings = TaskSettings(destination=str(tmp_path), run_id="rdd-test", format="parquet",
                            registry_url="http://127.0.0.1:9")
    outcomes = execute_tasks(spark.sparkContext, tasks, settings)
    assert [(o.task_id, o.summary.attempt, o.summary.messages, o.files) for o in outcomes] == \
        [(i, 0, 0, ()) for i in range(5)]
    assert execute_tasks(spark, [], settings) == []
    # one task per partition, as execute_tasks slices the list
    assert spark.sparkContext.parallelize(tasks, len(tasks)).glom().map(len).collect() == [1] * 5
