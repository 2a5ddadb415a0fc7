"""The only reason the Kafka 0.7 client tests may skip: no Python 2.7 interpreter to install them with."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.harness.py27 import VENV, Py27Unavailable, interpreter

pytestmark = pytest.mark.processes  # scripts/py27_env.sh


def test_without_a_2_7_interpreter_the_env_is_not_built_and_the_reason_says_so(tmp_path):
    env = dict(os.environ, PY27_CANDIDATES=f"{tmp_path}/python2.7 /usr/bin/python3",
               INGEST_PY27_VENV=str(tmp_path / "venv"))
    with pytest.raises(Py27Unavailable, match=r"no Python 2\.7 interpreter on this machine, so the Kafka 0\.7 "
                                              r"clients \(\.venv-py27\) cannot be installed"):
        interpreter(env)
    assert not (tmp_path / "venv").exists()


def test_with_one_the_env_holds_the_pinned_clients(py27):
    assert py27 == VENV / "bin" / "python" and py27.exists()
    out = subprocess.run([str(py27), "-c", "import samsa, brod, kazoo, sys; print(sys.version_info[:2], "
                                           "samsa.__version__, kazoo.version.__version__)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "((2, 7), '0.3.11', '2.7.0')"        # Python 2's print of a tuple
