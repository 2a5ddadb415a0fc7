"""The audit verdict reaches compaction through the destination's storage, not a local report file.

A real ``airflow dags test`` of a DAG made of the production pieces: a stand-in audit
(``revision_audit_app.py``, run by the real spark-submit) writes its verdict only as the revision
of run ``AUDIT_RUN_ID`` under ``<destination>/_audit/`` (no local report, as when the audit's driver
runs in cluster mode), then ``compact_task()`` from ``ingest_dag_support`` runs jobs/compact.py.
It must merge the hour judged COMPLETE and leave the hour with a DATA_LOSS window alone.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.airflow.harness import AIRFLOW_BIN, DAGS, ROOT, airflow_available, airflow_env, checkout_python, install_db
from tests.compaction.helpers import HOUR_START_MS, committed_paths, make_hour
from tests.harness import reaper

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not airflow_available(), reason=".venv-airflow missing (scripts/bootstrap.sh)")]

WINDOW_MS = 600_000

DAG_FILE = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from ingest_dag_support import AUDIT_RUN_ID, DEFAULT_ARGS, SPARK_CONN_ID, SPARK_ENV, compact_task

with DAG("verdict_passing", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={**DEFAULT_ARGS, "retries": 0}) as dag:
    audit = SparkSubmitOperator(task_id="audit", conn_id=SPARK_CONN_ID, application=APP, env_vars=SPARK_ENV,
                                application_args=["--destination", DEST, "--rows", ROWS, "--run-id", AUDIT_RUN_ID])
    audit >> compact_task()
'''


def window_rows(topic: str, bad: int | None = None) -> list[dict]:
    return [{"topic": topic, "row_type": "window", "producer": None, "window_start_ms": HOUR_START_MS + i * WINDOW_MS,
             "window_end_ms": HOUR_START_MS + (i + 1) * WINDOW_MS, "status": "DATA_LOSS" if i == bad else "COMPLETE",
             "judged": True, "causes": {}} for i in range(6)]


def test_compaction_gates_on_the_audit_revision_without_a_local_report(tmp_path, airflow_db):
    dest = tmp_path / "warehouse"
    make_hour(dest, "parquet", topic="page-views")
    make_hour(dest, "parquet", topic="clicks")
    rows = tmp_path / "verdict.json"
    rows.write_text(json.dumps(window_rows("page-views") + window_rows("clicks", bad=3)))
    app = Path(__file__).with_name("revision_audit_app.py")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "verdict_passing.py").write_text(f"APP = {str(app)!r}\nDEST = {str(dest)!r}\nROWS = {str(rows)!r}\n"
                                             + DAG_FILE)
    compaction = tmp_path / "compaction.properties"
    compaction.write_text(f"destination={dest}\n")
    reports = tmp_path / "reports"
    home = tmp_path / "home"
    home.mkdir()
    env = airflow_env(home, AIRFLOW__CORE__DAGS_FOLDER=str(dags), PYTHONPATH=str(DAGS),
                      PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
                      AIRFLOW_VAR_INGEST_HOME=str(ROOT),
                      AIRFLOW_VAR_INGEST_PYTHON=checkout_python(tmp_path),
                      AIRFLOW_VAR_INGEST_COMPACTION_CONFIG=str(compaction),
                      AIRFLOW_VAR_INGEST_REPORT_DIR=str(reports),
                      AIRFLOW_CONN_INGEST_SPARK=json.dumps({"conn_type": "spark", "host": "local[1]",
                                                            "extra": {"deploy-mode": "client"}}))
    install_db(airflow_db, home)  # the session's migrated DB (`airflow db migrate` once)
    log = tmp_path / "dags-test.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([str(AIRFLOW_BIN), "dags", "test", "verdict_passing"], env=env, cwd=home,
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        reaper.watch(proc)  # stopped even if pytest itself is killed
        try:
            code = proc.wait(timeout=480)
        finally:
            if proc.poll() is None:  # `dags test` can linger after a failed run: never leave it behind
                os.killpg(proc.pid, 9)
                proc.wait()
    out = log.read_text()
    assert code == 0 and "state=success" in out, out[-6000:]

    [revision] = list((dest / "_audit" / "revisions").glob("*.revision"))
    assert revision.name.split("-", 1)[1].startswith("verdict_passing.manual__")  # AUDIT_RUN_ID of this run
    assert not list(reports.rglob("audit.jsonl")) and not list(tmp_path.rglob("audit.jsonl"))  # no local report
    [summary] = list(reports.rglob("compaction.json"))
    hours = {h["hour"].split("/")[0]: h for h in json.loads(summary.read_text())["hours"]}
    assert hours["page-views"]["action"] == "compacted", hours
    assert hours["clicks"]["action"] == "skipped" and "COMPLETE" in hours["clicks"]["reason"], hours
    assert len(committed_paths(dest, "page-views")) == 1 and len(committed_paths(dest, "clicks")) == 6
