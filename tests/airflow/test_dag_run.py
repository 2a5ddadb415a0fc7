"""ONE real run of the hourly DAG (``airflow dags test``): real brokers, registry, local Spark, local storage.

Airflow runs from its own venv with a throw-away AIRFLOW_HOME; settings reach
the DAG exactly as in production: Airflow Variables (as AIRFLOW_VAR_* env) and
the ``ingest_spark`` connection (AIRFLOW_CONN_INGEST_SPARK). The run must end
with committed data, an audit report and a compaction summary.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.airflow.harness import AIRFLOW_BIN, ROOT, airflow_available, airflow_env, checkout_python, install_db
from tests.harness.brokers import broker_factory  # noqa: F401 - fixture
from tests.harness.registry import RegistryProcess
from tests.harness import reaper

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not airflow_available(), reason=".venv-airflow missing (scripts/bootstrap.sh)")]

WINDOW_MS = 10_000


def produce(brokers: str, registry: str, topic: str, count: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "ingest.cli", "produce", "--brokers", brokers, "--registry", registry,
         "--topic", topic, "--count", str(count), "--rate", "0", "--window-ms", str(WINDOW_MS), "--json",
         "--close-timeout", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def dags_test(env: dict, home: Path, logical_date: str, log_path: Path, timeout_s: float = 400) -> tuple[int, str]:
    """``airflow dags test``; stops at the first task failure instead of sitting out the retry delays."""
    lines: list[str] = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(AIRFLOW_BIN), "dags", "test", "ingest_hourly", logical_date], env=env, cwd=home,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        reaper.watch(proc)  # stopped even if pytest itself is killed
        deadline = time.monotonic() + timeout_s
        try:
            for line in proc.stdout:
                lines.append(line)
                log.write(line)
                if "up_for_retry" in line or time.monotonic() > deadline:
                    os.killpg(proc.pid, 9)
                    break
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    return code, "".join(lines)


def props(path: Path, values: dict) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return str(path)


@pytest.mark.skipif(not (ROOT / "jobs" / "audit.py").exists(), reason="jobs/audit.py not there yet")
def test_hourly_dag_run_loads_audits_and_compacts(tmp_path, broker_factory, airflow_db):  # noqa: F811
    brokers = broker_factory(n=2, num_partitions=2)
    broker_list = ",".join(f"{b.broker_id}:{b.host}:{b.port}" for b in brokers)
    registry = RegistryProcess(tmp_path / "registry").start()
    try:
        started = datetime.now(timezone.utc)
        produced = produce(broker_list, registry.url, "page-views", 400)
        assert produced["acknowledged"] == 400
        # let the last monitoring window close (plus the audit's 1 s grace) before auditing
        last_window_end = (int(time.time() * 1000) // WINDOW_MS + 1) * WINDOW_MS
        while time.time() * 1000 < last_window_end + 1_500:
            time.sleep(0.2)

        dest = tmp_path / "warehouse"
        common = {"destination": dest}
        cfg = {
            "loader": props(tmp_path / "loader.properties", {**common, "registry.url": registry.url,
                                                             "brokers": ",".join(f"{b.host}:{b.port}" for b in brokers),
                                                             "format": "parquet"}),
            "audit": props(tmp_path / "audit.properties", {**common, "window.ms": WINDOW_MS, "grace.ms": 1000}),
            "compaction": props(tmp_path / "compaction.properties", common),
        }
        home = tmp_path / "airflow-home"
        home.mkdir()
        env = airflow_env(
            home,
            PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",  # the project's spark-submit
            AIRFLOW_VAR_INGEST_HOME=str(ROOT),
            AIRFLOW_VAR_INGEST_PYTHON=checkout_python(tmp_path),
            AIRFLOW_VAR_INGEST_LOADER_CONFIG=cfg["loader"],
            AIRFLOW_VAR_INGEST_AUDIT_CONFIG=cfg["audit"],
            AIRFLOW_VAR_INGEST_COMPACTION_CONFIG=cfg["compaction"],
            AIRFLOW_VAR_INGEST_REPORT_DIR=str(tmp_path / "reports"),
            AIRFLOW_CONN_INGEST_SPARK=json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client"}}),
        )
        install_db(airflow_db, home)  # the session's migrated DB (`airflow db migrate` once)
        # the run at the next full hour covers the current hour, where our events are
        hour = started.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        code, out = dags_test(env, home, hour.isoformat(), tmp_path / "dags-test.log")
        assert "state=success" in out and code == 0, out[-8000:]
    finally:
        registry.stop()

    # committed data, through the loader's state (what every reader uses)
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage

    state = LoaderState.load(open_storage(str(dest)))
    assert sum(f.rows for f in state.files("page-views")) >= 400
    # the audit report of this run, judging the windows that hold our events
    [report] = list((tmp_path / "reports" / "ingest_hourly").glob("*/audit.jsonl"))
    text = report.read_text()
    assert "page-views" in text and "COMPLETE" in text
    # ... and its verdict, as the revision compaction read (--audit-run), named after this DAG run
    revisions = [p.name for p in (dest / "_audit" / "revisions").glob("*.revision")]
    assert [n for n in revisions if n.split("-", 1)[1] == f"ingest_hourly.{report.parent.name}.revision"], revisions
    summary = json.loads((report.parent / "compaction.json").read_text())
    # compaction saw the audited hour; it is still open, so it is left for a later run
    hours = [h for h in summary["hours"] if h["hour"].startswith("page-views/")]
    assert hours and all(h["action"] == "skipped" and "not closed" in h["reason"] for h in hours), hours
    assert "AUDIT FAILED" not in out
