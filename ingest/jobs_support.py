"""What every ``jobs/*.py`` spark-submit entry point shares: logging, the SparkSession, failures.

The entry points stay thin mains (argument parsing, exit codes); they import this
module the way they import the rest of the product (``ingest`` is on the driver's
``PYTHONPATH``; executors get it the same way). Kept free of top-level pyspark
imports so ``--help`` and configuration errors cost no JVM.

Failures end a job the way they end an ``ingest`` command: the product's own
errors (:class:`~ingest.errors.IngestError`) as one line ``<prog>: error: <message>``
and their documented exit code (:func:`exit_code`), anything else as a bug (the
traceback, then one ``internal error`` line, exit 1). An error raised in an
executor reaches the driver wrapped by PySpark (``PythonException``,
``Py4JJavaError``) with the worker's Python traceback as text;
:func:`product_error` recovers the class and message from the traceback's final
line (``ingest.errors.BrokerUnavailableError: cannot connect ...``).
"""
from __future__ import annotations

import importlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from ingest import errors
from ingest.errors import DataLossError, IngestError

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NOISY_LOGGERS = ("py4j", "hdfs", "kazoo")

EXIT_INTERNAL = 1
EXIT_FAILED = 2
EXIT_DATA_LOSS = 3
EXIT_NOTHING_JUDGED = 5
"""The audit judged no window (every window PENDING, or none in the range): not OK (ingest/audit/verdict.py)."""
TRACEBACK_HEADER = "Traceback (most recent call last):"
PRODUCT_PACKAGE = "ingest."


def setup_logging(verbose: bool = False) -> None:
    """INFO (DEBUG when ``verbose``) to stderr; the chatty client libraries at WARNING."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


SHORT_JOB_DEFAULTS = (("spark.ui.enabled", "false"), ("spark.ui.showConsoleProgress", "false"))
"""Spark settings a job applies unless its config or spark-submit (``--conf``) sets them: a job
of a few seconds has nobody watching its web UI (its Jetty costs ~0.5-1 s of the start) and
logs its own progress."""


def build_spark(config: Mapping[str, Any], default_app_name: str, *, sql: bool = True):
    """The job's SparkSession (``sql=False``: SparkContext) from the config's ``spark.*`` keys (UTC time zone).

    Under spark-submit the master comes from ``--master``; the config's
    ``spark.master`` is used when given explicitly or when the job runs as plain
    ``python jobs/<job>.py`` (no ``PYSPARK_GATEWAY_PORT``), defaulting to ``local[*]``.
    The config's ``spark.*`` keys win over spark-submit's ``--conf``;
    :data:`SHORT_JOB_DEFAULTS` apply only where neither sets a key.

    ``sql=False`` returns a SparkContext only, for a job that runs RDD jobs and no
    SQL: creating the SQL session (its ``SessionState``: the SQL engine's classes)
    took 14.7 s from a ready SparkContext in a spark-submit probe at load average
    4.7 on the 2-core test machine (docs/performance.md, "A small hourly load's fixed cost").
    """
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Connect to spark-submit's JVM first, so that SparkConf() below holds its settings (--conf)
        # and the defaults apply only where they are missing. Without spark-submit the JVM is started
        # by SparkContext below, with this conf on its command line (driver memory, Java options).
        SparkContext._ensure_initialized()
    conf = SparkConf()
    conf.setAppName(config.get("spark.app.name") or default_app_name)
    master_given = getattr(config, "is_set", lambda key: key in config)("spark.master")
    if master_given or "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf.setMaster(config.get("spark.master") or "local[*]")
    for key, value in config.items():
        if key.startswith("spark.") and key not in ("spark.master", "spark.app.name") and value is not None:
            conf.set(key, str(value).lower() if isinstance(value, bool) else str(value))
    conf.set("spark.sql.session.timeZone", "UTC")
    for key, value in SHORT_JOB_DEFAULTS:
        conf.setIfMissing(key, value)
    sc = SparkContext.getOrCreate(conf)
    if not sql:
        return sc
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()  # over sc; its SQL conf starts from sc's (the UTC time zone)


@dataclass(frozen=True)
class ProductFailure:
    """The product's error behind a job's failure: its class and its message (the first line
    only when recovered from an executor's traceback, where a message's end is not marked)."""

    error_class: type[IngestError]
    message: str


def product_error(exc: BaseException) -> ProductFailure | None:
    """``exc`` itself when it is an IngestError; else the IngestError an executor raised, if any.

    Only the *final* exception of the wrapped worker traceback counts: an executor
    that failed with a bug while handling a product error is a bug.
    """
    if isinstance(exc, IngestError):
        return ProductFailure(type(exc), str(exc) or type(exc).__name__)
    final = final_exception_line(str(exc))
    if final is None:
        return None
    name, _, message = final.partition(": ")
    cls = _product_class(name.strip())
    return ProductFailure(cls, message.strip() or cls.__name__) if cls is not None else None


def final_exception_line(text: str) -> str | None:
    """The exception line (``module.Class: message``) ending the last Python traceback in ``text``."""
    lines = text.splitlines()
    final = None
    for i, line in enumerate(lines):
        if not line.rstrip().endswith(TRACEBACK_HEADER):
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j][0] in " \t"):
            j += 1  # frames and source lines are indented
        if j < len(lines):
            final = lines[j]
    return final


def _product_class(qualified: str) -> type[IngestError] | None:
    """``ingest.errors.BrokerUnavailableError`` -> the class, when it is one of the product's errors."""
    module_name, _, class_name = qualified.rpartition(".")
    if not module_name.startswith(PRODUCT_PACKAGE):
        return None  # a builtin (ValueError: ...), a library's or a Java exception
    cls = getattr(errors, class_name, None) if module_name == "ingest.errors" else None
    if cls is None:
        try:  # an error class defined next to its concept (ingest.loader.commit.CommitConflictError)
            cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            cls = None
    return cls if isinstance(cls, type) and issubclass(cls, IngestError) else None


def exit_code(error_class: type[IngestError]) -> int:
    """The documented exit code of a job failing with ``error_class`` (docs/operations.md)."""
    return EXIT_DATA_LOSS if issubclass(error_class, DataLossError) else EXIT_FAILED


def report_failure(prog: str, exc: BaseException, *, verbose: bool = False) -> int:
    """Print the one line for ``exc`` on stderr and return the job's exit code.

    A product error (raised here or in an executor) is one line, the traceback only
    with ``verbose``; anything else is a bug: its traceback is logged (a scheduled
    job's log is its only record) before the one line.
    """
    found = product_error(exc)
    if found is None:
        log.error("unexpected failure", exc_info=exc)
        print(f"{prog}: internal error: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return EXIT_INTERNAL
    if verbose:
        log.error("failed", exc_info=exc)
    print(f"{prog}: error: {found.message}", file=sys.stderr)
    return exit_code(found.error_class)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
