"""Run BY THE AIRFLOW VENV (/work/main/.venv-airflow/bin/python), never imported by pytest.

``python airflow_probe.py dagbag DAGS_DIR``: parse the DAG folder with the real
DagBag and print JSON: import errors, and per DAG its settings and task graph.
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


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "dagbag":
        print("PROBE-JSON " + json.dumps(dagbag(args[0])))
    else:
        raise SystemExit(f"unknown probe command {cmd!r}")
