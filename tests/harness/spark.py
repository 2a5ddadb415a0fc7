"""Spark for tests: one local SparkSession per test session (starting Spark costs ~5 s), and the JVM
options of the short-lived Spark JVMs that tests start with spark-submit."""
from __future__ import annotations

import os
import sys
from typing import Mapping

#: JIT options for a test's spark-submit: C1 only. A small Spark job is over before C2's compilations
#: pay off, and on this 2-core machine C2 compiles compete with the job for the CPU: an audit
#: spark-submit of the demo's warehouse took 43 s of CPU with the default tiered JIT and 23-26 s with
#: C1 only (3 runs each, alternating). What the JVM computes is the same; only how its code is compiled
#: differs.
SHORT_JVM_OPTS = "-XX:TieredStopAtLevel=1"


def spark_submit_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ``os.environ``) with :data:`SHORT_JVM_OPTS` added to ``SPARK_SUBMIT_OPTS``.

    spark-submit puts ``SPARK_SUBMIT_OPTS`` on the command line of the JVM it starts (the driver in
    client and local mode), so this reaches a spark-submit started by a process in between too: the
    demo's steps, an Airflow SparkSubmitOperator.
    """
    out = dict(os.environ if env is None else env)
    opts = out.get("SPARK_SUBMIT_OPTS", "")
    if SHORT_JVM_OPTS not in opts.split():
        out["SPARK_SUBMIT_OPTS"] = f"{opts} {SHORT_JVM_OPTS}".strip()
    return out


def make_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.extraJavaOptions", SHORT_JVM_OPTS)  # the JVM is started with these options
        .appName("ingest-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
