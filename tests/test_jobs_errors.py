"""Spark jobs fail like ``ingest`` commands: one line naming the problem and the documented exit code,
also when the product's error is raised in an executor and reaches the driver wrapped by PySpark.

The mapping is shared (ingest/jobs_support.py), so it is checked once against real PySpark wrappings
(an RDD task as jobs/compact.py runs them, a Python data source as the loader and the audit read),
and end to end with real ``spark-submit jobs/load.py`` runs: the registry unreachable, a broker
SIGKILLed while the load runs, and the same broker dead before it starts. Nothing may be committed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from ingest.errors import BrokerUnavailableError, DataLossError, IngestError, RegistryUnavailableError
from ingest.jobs_support import EXIT_DATA_LOSS, EXIT_FAILED, EXIT_INTERNAL, exit_code, product_error, report_failure
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.net import free_port
from tests.harness import reaper

TOPIC = "job-errors"


# --- recovering the product's error from PySpark's wrapping ---------------------------------------


def _raise_in_task(message: str):
    def task(_x):
        raise BrokerUnavailableError(message)

    return task


def test_an_error_raised_in_an_rdd_task_is_recovered_with_its_class_and_message(spark, capsys):
    with pytest.raises(Exception) as info:
        spark.sparkContext.parallelize([1], 1).map(_raise_in_task("cannot connect to 127.0.0.1:9: refused")).collect()
    assert not isinstance(info.value, IngestError)  # really wrapped by PySpark
    found = product_error(info.value)
    assert found is not None and found.error_class is BrokerUnavailableError
    assert found.message == "cannot connect to 127.0.0.1:9: refused"
    assert report_failure("jobs/x.py", info.value) == EXIT_FAILED
    assert capsys.readouterr().err == "jobs/x.py: error: cannot connect to 127.0.0.1:9: refused\n"


def test_an_error_raised_in_a_python_data_source_reader_is_recovered(spark):
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Reader(DataSourceReader):
        def read(self, partition):
            from ingest.errors import DataLossError

            raise DataLossError("page-views b0 p1 [0, 500): deleted by retention")
            yield (0,)  # pragma: no cover - a generator, as readers are

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "job_errors_test"

        def schema(self):
            return "x int"

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Source)
    with pytest.raises(Exception) as info:
        spark.read.format("job_errors_test").load().collect()
    found = product_error(info.value)
    assert found is not None and found.error_class is DataLossError
    assert exit_code(found.error_class) == EXIT_DATA_LOSS
    assert "deleted by retention" in found.message


def test_only_the_final_exception_of_the_worker_traceback_counts(capsys):
    chained = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
               '  File "task.py", line 3, in run\n    fetch()\n'
               "ingest.errors.RegistryUnavailableError: schema registry http://127.0.0.1:9 unreachable\n\n"
               "During handling of the above exception, another exception occurred:\n\n"
               "Traceback (most recent call last):\n  File \"task.py\", line 5, in run\n"
               "KeyError: 'schema'\n\tat org.apache.spark.api.python.BasePythonRunner(Unknown Source)\n")
    assert product_error(RuntimeError(chained)) is None  # a bug while handling a product error is a bug
    assert report_failure("jobs/x.py", RuntimeError(chained)) == EXIT_INTERNAL
    assert capsys.readouterr().err.splitlines()[-1].startswith("jobs/x.py: internal error: RuntimeError: ")
    wrapped = chained.split("\n\nDuring handling")[0]
    found = product_error(RuntimeError(wrapped))
    assert found is not None and found.error_class is RegistryUnavailableError
    # a name outside the product, or one that is no error class of it, is not recovered
    assert product_error(RuntimeError(wrapped.replace("ingest.errors.", "other.errors."))) is None
    assert product_error(RuntimeError(wrapped.replace("RegistryUnavailableError", "ErrorCode"))) is None


# --- spark-submit jobs/load.py ----------------------------------------------------------------------


BROKERS = 1  # the module's `brokers` (tests/conftest.py): one, which a test SIGKILLs


def _conf(tmp_path, broker, registry_url: str):
    dest = tmp_path / "out"
    conf = tmp_path / "loader.properties"
    conf.write_text(f"destination={dest}\nbrokers={broker.host}:{broker.port}\nregistry.url={registry_url}\n"
                    f"topics={TOPIC}\nformat=avro\n")
    return dest, conf


def _submit_cmd(conf):
    from tests.loader.helpers import REPO, spark_submit

    return [spark_submit(), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            "--driver-java-options", "-XX:TieredStopAtLevel=1", str(REPO / "jobs" / "load.py"), "--config", str(conf)]


def _assert_one_line_failure(output: str, error_class: type, *names: str) -> None:
    """``output``: the driver's stdout and stderr (spark-submit's PythonRunner merges them into stdout);
    the executors' tracebacks in Spark's own log lines are Spark's business."""
    ours = [ln for ln in output.splitlines() if ln.startswith("jobs/load.py: ")]
    assert len(ours) == 1, output[-4000:]
    assert ours[0].startswith("jobs/load.py: error: "), ours
    assert all(n in ours[0] for n in names), ours[0]
    assert 'jobs/load.py", line' not in output, "the driver printed a traceback"
    # the run summary names the product's error, not PySpark's wrapping with the worker's traceback
    (summary_error,) = [ln for ln in output.splitlines() if ln.startswith("  error: ")]
    assert summary_error.startswith(f"  error: {error_class.__name__}: "), summary_error


def _nothing_committed(dest) -> None:
    storage = open_storage(str(dest))
    assert LoaderState.load(storage).seq == 0
    assert not storage.exists(storage.join(TOPIC)), "data files became visible"


@pytest.mark.slow
def test_load_with_the_registry_unreachable_is_one_line_exit_2(brokers, registry_url, tmp_path):
    from tests.loader.helpers import REPO, produce, spark_env

    produce(brokers, registry_url, TOPIC, 40)
    closed = f"http://127.0.0.1:{free_port()}"
    dest, conf = _conf(tmp_path, brokers[0], closed)
    r = subprocess.run(_submit_cmd(conf), env=spark_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    output = r.stdout + r.stderr
    assert r.returncode == EXIT_FAILED, output[-4000:]
    assert "ingest.errors.RegistryUnavailableError" in r.stderr, "the error was not raised in an executor"
    _assert_one_line_failure(output, RegistryUnavailableError, closed)
    assert "FAILED" in r.stdout  # the run's summary still goes to stdout
    _nothing_committed(dest)


@pytest.mark.slow
def test_load_with_its_broker_killed_is_one_line_exit_2_and_commits_nothing(brokers, registry_url, tmp_path):
    """The broker is SIGKILLed once the run has planned (its plan line is logged) and before Spark's
    tasks fetch: starting the SparkContext takes seconds, so the tasks meet a dead broker and the
    BrokerUnavailableError is raised in the executors (a traceback once escaped, exit 1).
    A second run against the still-dead broker fails in the driver, the same way."""
    from tests.loader.helpers import REPO, produce, spark_env

    (broker,) = brokers
    produce(brokers, registry_url, TOPIC, 40, seed=3)
    dest, conf = _conf(tmp_path, broker, registry_url)
    proc = subprocess.Popen(_submit_cmd(conf), env=spark_env(), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reaper.watch(proc)  # stopped even if pytest itself is killed
    lines: list[str] = []
    planned = threading.Event()

    def read_output() -> None:
        for line in proc.stdout:
            lines.append(line)
            if not planned.is_set() and "ingest.loader.job: run " in line and " tasks, " in line:
                broker.kill()  # SIGKILL: no goodbye to the connections
                planned.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    output = "".join(lines)
    assert planned.is_set(), "the run never planned:\n" + output[-4000:]
    assert not broker.running
    assert proc.returncode == EXIT_FAILED, output[-4000:]
    assert "ingest.errors.BrokerUnavailableError" in output, "the error was not raised in an executor"
    _assert_one_line_failure(output, BrokerUnavailableError, f"{broker.host}:{broker.port}")
    _nothing_committed(dest)

    r = subprocess.run(_submit_cmd(conf), env=spark_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    output = r.stdout + r.stderr
    assert r.returncode == EXIT_FAILED, output[-4000:]
    _assert_one_line_failure(output, BrokerUnavailableError, f"{broker.host}:{broker.port}")
    _nothing_committed(dest)
