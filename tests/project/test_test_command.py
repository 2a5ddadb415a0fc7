"""``./scripts/test.sh`` runs pytest with two pytest-xdist workers unless told otherwise.

The script runs in a copy of itself beside a ``scripts/bootstrap.sh`` that does nothing and a
``.venv/bin/python`` that prints its arguments, so what reaches pytest is seen without running the suite.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs the script (bash)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ["-m", "pytest", "-n", "2", "--dist", "loadgroup"]


def _pytest_args(tmp_path: Path, *args: str, **env: str) -> list[str]:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    script = tmp_path / "scripts" / "test.sh"
    script.write_text((ROOT / "scripts" / "test.sh").read_text())
    (tmp_path / "scripts" / "bootstrap.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / ".venv" / "bin" / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    for f in (script, tmp_path / "scripts" / "bootstrap.sh", tmp_path / ".venv" / "bin" / "python"):
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "INGEST_TEST_WORKERS"} | env
    r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_two_workers_by_default_and_the_arguments_follow(tmp_path):
    assert _pytest_args(tmp_path) == DEFAULT
    assert _pytest_args(tmp_path, "-m", "not processes", "tests/loader") == DEFAULT + ["-m", "not processes",
                                                                                      "tests/loader"]
    assert _pytest_args(tmp_path, "-k", "-n 3") == DEFAULT + ["-k", "-n 3"]  # a value, not the option


@pytest.mark.parametrize("args", [["-n", "0"], ["-n0"], ["-n", "4"], ["--numprocesses=auto"], ["-nauto"],
                                  ["--dist", "loadfile"], ["--dist=load"], ["-p", "no:xdist"], ["-pno:xdist"]])
def test_the_workers_given_replace_the_default(tmp_path, args):
    assert _pytest_args(tmp_path, "tests/broker", *args) == ["-m", "pytest", "tests/broker", *args]


def test_the_number_of_workers_from_the_environment(tmp_path):
    assert _pytest_args(tmp_path, INGEST_TEST_WORKERS="3") == ["-m", "pytest", "-n", "3", "--dist", "loadgroup"]
