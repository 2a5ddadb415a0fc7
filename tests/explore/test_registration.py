"""How Spark finds ``format("ingest")``: its own auto-discovery of ``pyspark_*`` modules, or ``register(spark)``.

Spark 4 runs pyspark/sql/worker/lookup_data_sources.py once per JVM: every top-level
module on the Python workers' path whose name starts with ``pyspark_`` and has a
``DefaultSource`` is registered under ``DefaultSource.name()``. The test runs that
very code (Spark's, not a copy) in a Python process whose path holds what an
install of this project puts in site-packages (the top-level packages pyproject
ships), and reads back what it would hand to the JVM.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import setuptools

pytestmark = pytest.mark.processes  # a Python subprocess with Spark

REPO = Path(__file__).resolve().parents[2]

_LOOKUP = """
import io
from pyspark.serializers import read_int
from pyspark.sql.worker import lookup_data_sources
from pyspark.worker_util import pickleSer

out = io.BytesIO()
lookup_data_sources._main(io.BytesIO(), out)
out.seek(0)
for _ in range(read_int(out)):
    name = out.read(read_int(out)).decode()
    cls = pickleSer._read_with_length(out)
    print(name, cls.__module__ + "." + cls.__qualname__)
"""


def _shipped_top_level() -> list[str]:
    """The top-level packages an install of this project contains (pyproject's packages.find)."""
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return sorted({p.split(".")[0] for p in setuptools.find_packages(str(REPO), include=conf["include"])})


def test_an_installed_project_is_found_by_sparks_own_lookup_with_no_register_call(tmp_path):
    top = _shipped_top_level()
    assert top == ["ingest", "pyspark_ingest"]
    site = tmp_path / "site-packages"
    site.mkdir()
    for name in top:  # the layout a (non-editable) install leaves in site-packages
        (site / name).symlink_to(REPO / name, target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", _LOOKUP], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    found = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert found.get("ingest") == "ingest.explore.source.IngestDataSource", out.stdout


def test_register_makes_the_format_known_and_is_idempotent(spark):
    from ingest.explore import register

    register(spark)
    register(spark)  # a second call replaces the registration, it does not fail
    jvm_manager = spark._jsparkSession.sessionState().dataSourceManager()
    assert jvm_manager.dataSourceExists("ingest")
