"""What every ``jobs/*.py`` spark-submit entry point shares: logging setup and the SparkSession.

The entry points stay thin mains (argument parsing, exit codes); they import this
module the way they import the rest of the product (``ingest`` is on the driver's
``PYTHONPATH``; executors get it the same way). Kept free of top-level pyspark
imports so ``--help`` and configuration errors cost no JVM.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Mapping

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NOISY_LOGGERS = ("py4j", "hdfs", "kazoo")


def setup_logging(verbose: bool = False) -> None:
    """INFO (DEBUG when ``verbose``) to stderr; the chatty client libraries at WARNING."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def build_spark(config: Mapping[str, Any], default_app_name: str):
    """The job's SparkSession from the config's ``spark.*`` keys (UTC session time zone).

    Under spark-submit the master comes from ``--master``; the config's
    ``spark.master`` is used when given explicitly or when the job runs as plain
    ``python jobs/<job>.py`` (no ``PYSPARK_GATEWAY_PORT``), defaulting to ``local[*]``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(config.get("spark.app.name") or default_app_name)
    master_given = getattr(config, "is_set", lambda key: key in config)("spark.master")
    if master_given or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(config.get("spark.master") or "local[*]")
    for key, value in config.items():
        if key.startswith("spark.") and key not in ("spark.master", "spark.app.name") and value is not None:
            builder = builder.config(key, value)
    builder = builder.config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
    return builder.getOrCreate()
