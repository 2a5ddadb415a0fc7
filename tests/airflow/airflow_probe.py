"""Run BY THE AIRFLOW VENV (/work/main/.venv-airflow/bin/python), never imported by pytest.

``python airflow_probe.py dagbag DAGS_DIR``: parse the DAG folder with the real
DagBag and print JSON: import errors, and per DAG its settings and task graph.
``python airflow_probe.py commands DAGS_DIR DAG_ID.TASK_ID...``: the spark-submit command line each
task's operator builds (see ``commands``).
"""
from __future__ import annotations

import json
import sys


def dagbag(folder: str) -> dict:
    from pathlib import Path

    from airflow.dag_processing.dagbag import BundleDagBag

    # As the DAG processor parses a bundle: the bundle directory is on sys.path.
    bag = BundleDagBag(dag_folder=folder, bundle_path=Path(folder))
    out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
    for dag_id, dag in bag.dags.items():
        out["dags"][dag_id] = {
            "file": dag.fileloc,
            "catchup": dag.catchup,
            "max_active_runs": dag.max_active_runs,
            "schedule": str(getattr(dag.timetable, "expression", None)),
            "interval": str(getattr(dag.timetable, "interval", None)),
            "params": sorted(dag.params.keys()),
            "tasks": {
                t.task_id: {
                    "downstream": sorted(t.downstream_task_ids),
                    "operator": type(t).__name__,
                    "retries": t.retries,
                    "exponential": bool(t.retry_exponential_backoff),
                    "on_failure_callback": bool(t.on_failure_callback),
                    "conn_id": getattr(t, "_conn_id", None),
                    "application": getattr(t, "application", None),
                    "application_args": getattr(t, "application_args", None),
                }
                for t in dag.tasks
            },
        }
    return out


def commands(folder: str, *tasks: str) -> dict:
    """The spark-submit command line (and environment) of each ``DAG_ID.TASK_ID``, as its operator builds it:
    templates rendered with Variables from ``AIRFLOW_VAR_*`` and the connection from
    ``AIRFLOW_CONN_INGEST_SPARK`` (Airflow's environment-variable backends), nothing submitted."""
    import os
    from pathlib import Path
    from types import SimpleNamespace

    import pendulum
    from airflow.dag_processing.dagbag import BundleDagBag

    class EnvVariables:  # what the template sees as var.value
        def get(self, name, default=None):
            return os.environ.get("AIRFLOW_VAR_" + name.upper(), default)

    bag = BundleDagBag(dag_folder=folder, bundle_path=Path(folder))
    out = {}
    for name in tasks:
        dag_id, task_id = name.split(".")
        dag = bag.dags[dag_id]
        task = dag.get_task(task_id)
        start = pendulum.datetime(2026, 11, 23, 1, tz="UTC")
        # the replay DAG's params as a trigger would give them; the hourly DAG has none
        params = {"topic": "page-views", "from_time": "2026-11-22T01:00:00Z", "to_time": None}
        context = {"var": {"value": EnvVariables()}, "dag": dag, "task": task, "params": params,
                   "dag_run": SimpleNamespace(run_after=start.add(hours=1), run_id="manual__x"),
                   "run_id": "scheduled__2026-11-23T02:00:00+00:00", "ds": "2026-11-23",
                   "data_interval_start": start, "data_interval_end": start.add(hours=1)}
        task.render_template_fields(context)
        hook = task._get_hook()
        out[name] = {"command": hook._build_spark_submit_command(task.application), "env": hook._env or {}}
    return out


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "dagbag":
        print("PROBE-JSON " + json.dumps(dagbag(args[0])))
    elif cmd == "commands":
        print("PROBE-JSON " + json.dumps(commands(*args)))
    else:
        raise SystemExit(f"unknown probe command {cmd!r}")
