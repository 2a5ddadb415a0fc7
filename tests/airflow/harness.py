"""Run the real Airflow (its own venv) from pytest in the project venv."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.harness.spark import spark_submit_env

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_VENV = ROOT / ".venv-airflow"
AIRFLOW_PY = AIRFLOW_VENV / "bin" / "python"
AIRFLOW_BIN = AIRFLOW_VENV / "bin" / "airflow"
DAGS = ROOT / "airflow_dags"
PROBE = Path(__file__).with_name("airflow_probe.py")


def airflow_available() -> bool:
    return AIRFLOW_BIN.exists()


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for an isolated Airflow: its own home, sqlite DB, our DAG folder only."""
    # the DAG's spark-submits inherit SPARK_SUBMIT_OPTS: C1 JIT for their short jobs (tests/harness/spark.py)
    env = {k: v for k, v in spark_submit_env().items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "PYTHONPATH": "",
    })
    env.update(extra)
    return env


def probe(home: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> dict:
    """Run tests/airflow/airflow_probe.py in the Airflow venv; ``env`` adds variables (``AIRFLOW_VAR_*``...)."""
    proc = subprocess.run([str(AIRFLOW_PY), str(PROBE), *args], env=airflow_env(home, **(env or {})), capture_output=True,
                          text=True, timeout=timeout, cwd=home)
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE-JSON "):
            return json.loads(line[len("PROBE-JSON "):])
    raise AssertionError(f"probe failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")


def checkout_python(directory: Path) -> str:
    """A python for spark-submit's driver and executors that imports ``ingest`` from THIS checkout.

    The project venv's editable install may point at another checkout (worktrees share one venv); the
    jobs a DAG submits must run the code under test.
    """
    path = directory / "checkout-python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{ROOT / ".venv" / "bin" / "python"}" "$@"\n')
    path.chmod(0o755)
    return str(path)


def migrate_once(template_dir: Path) -> Path:
    """``airflow db migrate`` in ``template_dir`` (an empty AIRFLOW_HOME); returns the migrated sqlite DB.

    Run once per test session (the ``airflow_db`` fixture in tests/airflow/conftest.py): a migration
    costs 8-15 s of Airflow start-up and schema creation, and its result holds nothing of the home it
    was made in (alembic version, the two log templates, ``default_pool``).
    """
    subprocess.run([str(AIRFLOW_BIN), "db", "migrate"], env=airflow_env(template_dir), cwd=template_dir, check=True,
                   capture_output=True, timeout=120)
    db = template_dir / "airflow.db"
    assert db.is_file(), f"airflow db migrate wrote no {db}"
    return db


def install_db(template_db: Path, home: Path) -> None:
    """Give ``home`` its own copy of the migrated DB (what ``airflow db migrate`` there would write)."""
    shutil.copyfile(template_db, home / "airflow.db")
