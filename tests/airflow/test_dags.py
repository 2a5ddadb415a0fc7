"""The DAG files load in the real Airflow and declare the intended task graph and settings."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.airflow.harness import DAGS, airflow_available, probe

pytestmark = pytest.mark.skipif(not airflow_available(), reason=".venv-airflow missing (scripts/bootstrap.sh)")


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    return probe(tmp_path_factory.mktemp("airflow-home"), "dagbag", str(DAGS))


@pytest.mark.processes
def test_every_dag_file_imports_without_errors(bag):
    assert bag["import_errors"] == {}
    assert {"ingest_hourly", "ingest_replay"} <= set(bag["dags"])


@pytest.mark.processes
def test_hourly_graph_is_load_then_audit_then_compact(bag):
    dag = bag["dags"]["ingest_hourly"]
    tasks = dag["tasks"]
    assert set(tasks) == {"load", "audit", "compact"}
    assert tasks["load"]["downstream"] == ["audit"]
    assert tasks["audit"]["downstream"] == ["compact"]
    assert tasks["compact"]["downstream"] == []
    assert tasks["audit"]["operator"] == "AuditSubmitOperator"
    assert {t["operator"] for n, t in tasks.items() if n != "audit"} == {"IngestSubmitOperator"}
    assert dag["max_active_runs"] == 1 and dag["catchup"] is False
    assert dag["schedule"] == "0 * * * *" and dag["interval"] == "1:00:00"  # data interval = the past hour


@pytest.mark.processes
def test_hourly_tasks_retry_with_backoff_alert_and_use_the_spark_connection(bag):
    for name, t in bag["dags"]["ingest_hourly"]["tasks"].items():
        assert t["retries"] >= 1 and t["exponential"], name
        assert t["on_failure_callback"], name
        assert t["conn_id"] == "ingest_spark", name
        assert "{{" in t["application"] and t["application"].endswith(f"jobs/{dict(load='load', audit='audit', compact='compact')[name]}.py")
    args = bag["dags"]["ingest_hourly"]["tasks"]["audit"]["application_args"]
    assert "data_interval_start" in " ".join(args) and "data_interval_end" in " ".join(args)


@pytest.mark.processes
def test_replay_dag_takes_topic_and_time_and_reaudits(bag):
    dag = bag["dags"]["ingest_replay"]
    assert dag["schedule"] in ("None", "none")
    assert {"topic", "from_time"} <= set(dag["params"])
    tasks = dag["tasks"]
    assert tasks["reload"]["downstream"] == ["audit"]
    assert "--reset-offsets" in tasks["reload"]["application_args"]
    assert dag["max_active_runs"] == 1


HEAVY = {"pyspark", "pandas", "pyarrow", "ingest", "requests", "numpy"}


@pytest.mark.parametrize("path", sorted(DAGS.glob("*.py")), ids=lambda p: p.name)
def test_dag_files_only_declare(path: Path):
    """No heavy imports and no calls that do I/O at module top level."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not {n.split(".")[0] for n in names} & HEAVY, f"{path.name}: top-level import {names}"
        for call in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(call, ast.Call):
                fn = ast.unparse(call.func)
                assert not fn.startswith(("open", "Variable.get", "os.listdir", "subprocess", "requests")), \
                    f"{path.name}: top-level call {fn}"


@pytest.mark.processes
def test_compaction_gets_the_verdict_from_the_audit_run_not_the_local_report(bag):
    """The audit names its revision under <destination>/_audit/ and compaction gates on that run id: it
    reaches compaction wherever the audit's Spark driver ran (the local report exists only on its host)."""
    for dag_id in ("ingest_hourly", "ingest_replay"):
        tasks = bag["dags"][dag_id]["tasks"]
        audit, compact = tasks["audit"]["application_args"], tasks["compact"]["application_args"]
        run_id = audit[audit.index("--run-id") + 1]
        assert "run_id" in run_id and compact[compact.index("--audit-run") + 1] == run_id
        report = audit[audit.index("--report") + 1]
        assert "--audit-report" not in compact and report not in compact


SUBMITTING = ("ingest_hourly.load", "ingest_hourly.audit", "ingest_hourly.compact",
              "ingest_replay.reload", "ingest_replay.audit", "ingest_replay.compact")
CONNECTION = '{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client", "queue": "etl"}}'


@pytest.mark.processes
def test_every_spark_submit_carries_the_packed_environment_from_the_variables(tmp_path):
    """With ``ingest_archives`` and ``ingest_executor_python`` set (docs/cluster.md), the command line the
    operator builds ships the archive and runs the executors on its python, the driver on ``ingest_python``;
    with them unset, no ``spark.archives`` at all and every python is ``ingest_python``."""
    archive = "hdfs:///apps/ingest/ingest-env.tar.gz#environment"
    base = {"AIRFLOW_VAR_INGEST_HOME": "/opt/ingest", "AIRFLOW_CONN_INGEST_SPARK": CONNECTION,
            "AIRFLOW_VAR_INGEST_PYTHON": "/opt/ingest/dist/cluster/environment/bin/python"}
    shipped = probe(tmp_path, "commands", str(DAGS), *SUBMITTING, env={
        **base, "AIRFLOW_VAR_INGEST_ARCHIVES": archive, "AIRFLOW_VAR_INGEST_EXECUTOR_PYTHON": "./environment/bin/python"})
    plain = probe(tmp_path, "commands", str(DAGS), *SUBMITTING, env=base)
    for name in SUBMITTING:
        cmd = shipped[name]["command"]
        confs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--conf"]
        assert cmd[:3] == ["spark-submit", "--master", "yarn"], cmd
        assert f"spark.archives={archive}" in confs, (name, cmd)
        assert "spark.pyspark.python=./environment/bin/python" in confs, (name, cmd)
        assert "spark.pyspark.driver.python=/opt/ingest/dist/cluster/environment/bin/python" in confs, (name, cmd)
        assert cmd[cmd.index("--deploy-mode") + 1] == "client" and cmd[cmd.index("--queue") + 1] == "etl"
        app = {"load": "load", "reload": "load", "audit": "audit", "compact": "compact"}[name.split(".")[1]]
        assert f"/opt/ingest/jobs/{app}.py" in cmd

        cmd = plain[name]["command"]
        confs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--conf"]
        assert not [c for c in confs if c.startswith("spark.archives")] and "--archives" not in cmd, cmd
        assert "spark.pyspark.python=/opt/ingest/dist/cluster/environment/bin/python" in confs, (name, cmd)
