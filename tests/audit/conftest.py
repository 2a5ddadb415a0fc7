"""Fixtures of the audit tests: one real destination with a 21-minute hole and a loss (report_pipeline.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gap_and_loss(spark, tmp_path_factory):
    """The destination of tests/audit/report_pipeline.py, built once per session (about 20 s)."""
    from tests.audit.report_pipeline import build

    return build(spark, tmp_path_factory)
