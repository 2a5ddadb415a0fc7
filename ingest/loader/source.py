"""The Spark side for users who read through the Data Source API: ``ingest_load``.

``spark.read.format("ingest_load").option("tasks", ...).load()`` yields, per
input partition (= one :class:`~ingest.loader.plan.TaskRange`), the
:class:`~ingest.loader.results.TaskOutcome` of :func:`ingest.loader.task.run_task`
as rows (their shape: :mod:`ingest.loader.results`). Collecting that
DataFrame is how the driver learns which files the *successful* attempts wrote:
Spark returns the output of exactly one successful attempt per partition,
whatever retries or speculative copies ran.

The hourly job runs its tasks as an RDD job by default (:mod:`ingest.loader.rdd_tasks`,
``task.runner=rdd``): a Python Data Source's first use in a Spark application
starts three planner processes one after the other before the first task (4-5 s
on a quiet 2-core machine, docs/performance.md), a fixed cost an hourly load
pays every hour. ``task.runner=datasource`` runs the job through this module.

Options (strings, as the Data Source API requires): ``tasks`` (JSON list of task
ranges) and ``settings`` (JSON of :class:`~ingest.loader.task.TaskSettings`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ingest.loader.plan import TaskRange
from ingest.loader.results import RESULT_SCHEMA, TaskOutcome, outcome_rows, outcomes_from_rows
from ingest.loader.task import TaskSettings, run_task

log = logging.getLogger(__name__)

FORMAT_NAME = "ingest_load"
AUTH_OPTION = "registry.auth.secret"  # matches Spark's default spark.redaction.regex: hidden in the UI and plans
_registered: set[str] = set()  # application ids this data source is registered with


class TaskPartition(InputPartition):
    """One input partition = one task range (picklable: a frozen dataclass inside)."""

    def __init__(self, task: TaskRange) -> None:
        super().__init__(task.task_id)
        self.task = task


class LoadReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.tasks = [TaskRange(**t) for t in json.loads(options["tasks"])]
        # the registry's credentials travel in an option whose name Spark's spark.redaction.regex hides
        self.settings = TaskSettings.from_json({**json.loads(options["settings"]),
                                                "registry_auth": json.loads(options[AUTH_OPTION])})

    def partitions(self) -> Sequence[InputPartition]:
        return [TaskPartition(t) for t in self.tasks]

    def read(self, partition: TaskPartition) -> Iterator[tuple]:
        from pyspark import TaskContext


        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        yield from outcome_rows(run_task(partition.task, self.settings, attempt))


class LoadDataSource(DataSource):
    """``ingest_load``: runs the load tasks and returns what they staged."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return RESULT_SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return LoadReader(dict(self.options))


def execute_tasks(spark, tasks: Sequence[TaskRange], settings: TaskSettings) -> list[TaskOutcome]:
    """Run every task on Spark; the outcomes of the successful attempts, by task id."""
    if not tasks:
        return []
    app = spark.sparkContext.applicationId
    if app not in _registered:
        spark.dataSource.register(LoadDataSource)
        _registered.add(app)
    plain = asdict(settings)
    auth = plain.pop("registry_auth")
    df = (
        spark.read.format(FORMAT_NAME)
        .option("tasks", json.dumps([asdict(t) for t in tasks]))
        .option("settings", json.dumps(plain))
        .option(AUTH_OPTION, json.dumps(auth))
        .load()
    )
    return outcomes_from_rows(row.asDict() for row in df.collect())
