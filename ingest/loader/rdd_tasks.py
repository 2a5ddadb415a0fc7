"""The hourly job's tasks as one RDD job: ``parallelize(tasks, len(tasks)).mapPartitions(run)``.

One partition per :class:`~ingest.loader.plan.TaskRange`, each running
:func:`ingest.loader.task.run_task` with its attempt number and yielding the
outcome as rows (:mod:`ingest.loader.results`, the same rows the
``ingest_load`` Data Source yields). Spark returns the rows of exactly one
successful attempt per partition, whatever retries or speculative copies ran, so
the commit sees what the Data Source path would show it. The difference is the
fixed cost: an RDD job starts one Python worker per core, where a Python Data
Source's first use in an application starts three planner processes (lookup,
create, plan) one after the other before its first task (docs/performance.md,
"A small hourly load's fixed cost").

No pyspark import at module top: the Python workers unpickle :func:`run_partition`
by reference, importing this module, and need none of it.
"""
from __future__ import annotations

import functools
import logging
from typing import Iterable, Iterator, Sequence

from ingest.loader.plan import TaskRange
from ingest.loader.results import RESULT_FIELDS, TaskOutcome, outcome_rows, outcomes_from_rows
from ingest.loader.task import TaskSettings, run_task

log = logging.getLogger(__name__)

_COLUMNS = tuple(name for name, _ in RESULT_FIELDS)


def run_partition(settings: TaskSettings, tasks: Iterable[TaskRange]) -> Iterator[tuple]:
    """Run the task(s) of one RDD partition (one, as :func:`execute_tasks` slices); their rows."""
    from pyspark import TaskContext  # deferred: the worker has pyspark loaded already, the driver needs none here


    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx is not None else 0
    for task in tasks:
        yield from outcome_rows(run_task(task, settings, attempt))


def execute_tasks(spark, tasks: Sequence[TaskRange], settings: TaskSettings) -> list[TaskOutcome]:
    """Run every task on Spark as one RDD job; the outcomes of the successful attempts, by task id.

    ``spark``: a SparkContext, or a SparkSession (its context is used).
    """
    if not tasks:
        return []
    tasks = list(tasks)
    sc = getattr(spark, "sparkContext", spark)
    # numSlices == len(tasks): Spark's slicing of a list puts exactly one element in each partition
    rdd = sc.parallelize(tasks, len(tasks))
    rows = rdd.mapPartitions(functools.partial(run_partition, settings)).collect()
    return outcomes_from_rows(dict(zip(_COLUMNS, row)) for row in rows)
