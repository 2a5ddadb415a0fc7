"""First use of the loader's Python Data Source in a fresh Spark session, against an RDD job.

    .venv/bin/python bench/bench_datasource_startup.py [--repeat 2] [--modes rdd,loader_rdd,datasource] [--conf key=value ...]

Each measurement runs in a fresh child process (fresh JVM, fresh Python workers):
the time to a ready local[2] SparkSession, then the first action, then a second
one. ``datasource``: ``spark.read.format("ingest_load")`` over one empty task
range (the real data source, planner and ``run_task``, no data); ``loader_rdd``:
the same task through the hourly job's default runner (``ingest.loader.rdd_tasks``,
an RDD job); ``rdd``:
``parallelize([1], 1).map(...).collect()``, the reference for "start a Python
worker and run one task". ``--imports`` also times, in a fresh interpreter, the
imports a planner worker pays to unpickle the data source.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def child(mode: str, confs: list[str]) -> dict:
    from tests.harness.spark import make_session

    t0 = time.perf_counter()
    spark = make_session()
    out = {"session_s": round(time.perf_counter() - t0, 2)}
    for label in ("first_s", "second_s"):
        t0 = time.perf_counter()
        if mode == "rdd":
            assert spark.sparkContext.parallelize([1], 1).map(lambda x: x + 1).collect() == [2]
        else:
            from ingest.loader.plan import TaskRange
            from ingest.loader.task import TaskSettings

            if mode == "loader_rdd":
                from ingest.loader.rdd_tasks import execute_tasks
            else:
                from ingest.loader.source import execute_tasks

            outcomes = execute_tasks(spark, [TaskRange("startup", 0, 0, "127.0.0.1", 9, task_id=0, start=0, end=0)],
                                 TaskSettings(destination=tempfile.mkdtemp(prefix="ds-startup-"), run_id="startup",
                                              format="parquet", registry_url="http://127.0.0.1:9"))
            assert [(o.task_id, o.files) for o in outcomes] == [(0, ())], outcomes
        out[label] = round(time.perf_counter() - t0, 2)
    spark.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["rdd", "datasource", "loader_rdd"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--modes", default="rdd,loader_rdd,datasource")
    ap.add_argument("--conf", action="append", default=[], help="Spark conf key=value (given to spark-submit)")
    ap.add_argument("--imports", action="store_true")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.conf)))
        return 0
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    if args.imports:
        for mod in ("pyspark.sql.datasource", "ingest.loader.source"):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {mod}"], check=True, cwd=REPO, env=env)
            print(f"fresh interpreter, import {mod}: {time.perf_counter() - t0:.2f} s (incl. interpreter start)")
    print(f"confs: {args.conf or 'defaults'}")
    print(f"{'mode':<11} {'session s':>10} {'first use s':>12} {'second use s':>13}")
    for mode in args.modes.split(","):
        for _ in range(args.repeat):
            cmd = [sys.executable, __file__, "--child", mode]
            # core confs (spark.python.*) are read when the context starts: pass them to spark-submit
            child_env = dict(env, PYSPARK_SUBMIT_ARGS=" ".join(f"--conf {c}" for c in args.conf) + " pyspark-shell")
            res = subprocess.run(cmd, cwd=REPO, env=child_env, capture_output=True, text=True)
            line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(res.stdout[-2000:], res.stderr[-4000:])
                return 1
            r = json.loads(line[7:])
            print(f"{mode:<11} {r['session_s']:>10} {r['first_s']:>12} {r['second_s']:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
