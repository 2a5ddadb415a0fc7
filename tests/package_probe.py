"""spark-submit application of tests/test_package.py (copied into the run directory, never imported by pytest).

    spark-submit ... package_probe.py JOBS_LOAD_PY LOADER_CONFIG [NEGATIVE_PYTHON]

Runs the shipped ``jobs/load.py`` (its ``main``, as spark-submit would) on this application's
SparkSession, then asks the driver and the executors where their Python and ``ingest`` come
from, and prints one ``PROBE-JSON {...}`` line. With NEGATIVE_PYTHON, one more stage runs
its tasks with that interpreter instead (``SparkContext.pythonExec``, which every Python
function shipped after it is set carries): the negative check that the test's assertion
catches an executor importing ``ingest`` from the checkout.
"""
from __future__ import annotations

import json
import runpy
import sys
import time


def where(_=None):
    """Where this Python process and its ``ingest`` come from (a mapPartitions function)."""
    import os
    import sys as _sys
    import time as _time

    import ingest

    _time.sleep(0.5)  # hold the executor's one core so the next task goes to the other executor
    importable = [p for p in _sys.path if p and os.path.isfile(os.path.join(p, "ingest", "__init__.py"))]
    try:  # the compiled column decoder, shipped in the wheel
        from ingest.loader import _cdecode
        cdecode = _cdecode.__file__
    except ImportError:
        cdecode = None
    yield {
        "pid": os.getpid(), "cwd": os.getcwd(), "executable": _sys.executable, "prefix": _sys.prefix,
        "ingest": ingest.__file__, "importable_from": importable, "sys_path": list(_sys.path),
        "editable_finders": [m for m in _sys.modules if m.startswith("__editable__")],
        "pythonpath": os.environ.get("PYTHONPATH", ""), "cdecode": cdecode,
    }


def main(argv: list[str]) -> int:
    load_py, config, *negative = argv
    from pyspark.sql import SparkSession

    started = time.monotonic()
    spark = SparkSession.builder.appName("package-probe").getOrCreate()
    sc = spark.sparkContext
    deadline = time.monotonic() + 120
    # both local-cluster executors registered (driver + 2) before any task, so both get tasks
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    stop = spark.stop
    # jobs/load.py stops what it got (a SparkContext by default, a SparkSession with
    # task.runner=datasource); the probe runs on the same context afterwards
    spark.stop = lambda: None
    sc_stop = sc.stop
    sc.stop = lambda: None
    seconds = {"session and executors": time.monotonic() - started}
    try:
        t = time.monotonic()
        rc = runpy.run_path(load_py)["main"](["--config", config])
        seconds["load"] = time.monotonic() - t
        t = time.monotonic()
        report = {"load_rc": rc, "driver": next(where()), "seconds": seconds,
                  "executors": sc.parallelize(range(4), 4).mapPartitions(where).collect()}
        seconds["probe"] = time.monotonic() - t
        if negative:
            t = time.monotonic()
            sc.pythonExec = negative[0]
            report["negative"] = sc.parallelize(range(2), 2).mapPartitions(where).collect()
            seconds["negative probe"] = time.monotonic() - t
        print("PROBE-JSON " + json.dumps(report), flush=True)
    finally:
        sc.stop = sc_stop
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
