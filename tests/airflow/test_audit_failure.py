"""A data-loss verdict fails the audit task at once (no retries), logs the summary and fires the alert."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.airflow.harness import AIRFLOW_BIN, DAGS, ROOT, airflow_available, airflow_env, install_db

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not airflow_available(), reason=".venv-airflow missing (scripts/bootstrap.sh)")]

DAG_FILE = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from ingest_dag_support import DEFAULT_ARGS, SPARK_CONN_ID, AuditSubmitOperator, alert

with DAG("loss_audit", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={**DEFAULT_ARGS, "on_failure_callback": alert}) as dag:
    AuditSubmitOperator(task_id="audit", conn_id=SPARK_CONN_ID, application=APP,
                        application_args=["--report", REPORT], report=REPORT)
'''


def test_loss_verdict_fails_without_retry_with_summary_and_alert(tmp_path, airflow_db):
    dags = tmp_path / "dags"
    dags.mkdir()
    report = tmp_path / "reports" / "audit.jsonl"
    app = Path(__file__).with_name("loss_audit_app.py")
    (dags / "loss_audit.py").write_text(f"APP = {str(app)!r}\nREPORT = {str(report)!r}\n" + DAG_FILE)
    alert_file = tmp_path / "alert.txt"
    home = tmp_path / "home"
    home.mkdir()
    env = airflow_env(home, AIRFLOW__CORE__DAGS_FOLDER=str(dags), PYTHONPATH=str(DAGS),
                      PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
                      # the project checkout: the operator loads ingest.audit.report_reader from there, since
                      # the Airflow venv has no ingest package (PYTHONPATH holds only the DAG folder)
                      AIRFLOW_VAR_INGEST_HOME=str(ROOT),
                      AIRFLOW_CONN_INGEST_SPARK=json.dumps({"conn_type": "spark", "host": "local[1]"}),
                      AIRFLOW_VAR_INGEST_ALERT_COMMAND=f"cat > {alert_file}")
    install_db(airflow_db, home)  # the session's migrated DB (`airflow db migrate` once)
    run = subprocess.run([str(AIRFLOW_BIN), "dags", "test", "loss_audit"], env=env, cwd=home,
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert "up_for_retry" not in out, out[-4000:]      # a verdict is not retried
    assert "new_state=failed" in out or "state=failed" in out, out[-4000:]
    assert "AUDIT FAILED" in out and "DATA_LOSS page-views" in out and "missing 5" in out
    assert "ALERT ingest: dag=loss_audit task=audit" in out
    assert "ALERT ingest: dag=loss_audit task=audit" in alert_file.read_text()  # ingest_alert_command got it
