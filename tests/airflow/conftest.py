"""Fixtures of the Airflow tests."""
from __future__ import annotations

import pytest

from tests.airflow.harness import airflow_available, migrate_once


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory):
    """A migrated Airflow metadata DB, made once per session; each test copies it into its own home
    (``install_db``), so runs stay isolated without paying ``airflow db migrate`` each time."""
    if not airflow_available():
        pytest.skip(".venv-airflow missing (scripts/bootstrap.sh)")
    return migrate_once(tmp_path_factory.mktemp("airflow-template"))
