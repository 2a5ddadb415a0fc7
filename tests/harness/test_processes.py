"""The ``processes`` marker and its guard (tests/harness/processes.py), run in a child pytest.

The child loads tests/conftest.py as a plugin and runs a small test file: under ``-m "not processes"``
a test that starts a process without the mark fails naming the command, also when it swallows the
error or starts its child past the audit hook (a ``spawn`` multiprocessing child); tests using a
process fixture are marked by the conftest and deselected; in a session that selects marked tests
as well, the guard is off.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # child pytest runs

REPO = Path(__file__).resolve().parents[2]

CHILD_TESTS = textwrap.dedent('''
    import multiprocessing
    import subprocess
    import sys
    import time

    import pytest


    def test_unmarked_runs_true():
        subprocess.run(["true"], check=True)


    def test_unmarked_swallows_the_refusal():
        try:
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        except Exception:
            pass


    @pytest.fixture
    def spawned():
        procs = []
        yield procs
        for p in procs:
            p.terminate()
            p.join()


    def test_unmarked_child_past_the_hook(spawned):
        p = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
        p.start()
        spawned.append(p)


    @pytest.mark.processes
    def test_marked_runs_true():
        subprocess.run(["true"], check=True)


    def test_uses_the_zookeeper_fixture(zookeeper):
        pass


    def test_pure():
        assert sum(range(4)) == 6
''')


def child_pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "test_child_processes.py"
    path.write_text(CHILD_TESTS)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(REPO), "-p", "tests.conftest",
         "-p", "no:cacheprovider", "-o", "addopts=",
         "-rA", "--basetemp", str(tmp_path / f"base{len(args)}"), *args, str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def outcomes(out: str) -> dict[str, str]:
    """``test name -> PASSED/FAILED/ERROR`` from the ``-rA`` summary."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASSED", "FAILED", "ERROR") and "::" in parts[1]:
            found.setdefault(parts[1].split("::")[-1], parts[0])
    return found


def test_unmarked_tests_that_start_processes_fail_naming_the_command(tmp_path):
    r = child_pytest(tmp_path, "-m", "not processes")
    out = r.stdout + r.stderr
    assert outcomes(out) == {"test_unmarked_runs_true": "FAILED", "test_unmarked_swallows_the_refusal": "FAILED",
                             "test_unmarked_child_past_the_hook": "FAILED", "test_pure": "PASSED"}, out
    assert "2 deselected" in out, out  # the marked test and the one using the zookeeper fixture
    assert "test_unmarked_runs_true is not marked 'processes' but starts a process: subprocess.Popen(true)" in out, out
    assert ("test_unmarked_swallows_the_refusal is not marked 'processes' but starts a process: "
            f"subprocess.Popen({sys.executable} -c pass)") in out, out
    assert ("test_unmarked_child_past_the_hook is not marked 'processes' but starts a process: child process "
            in out and "multiprocessing" in out), out


def test_process_fixtures_mark_their_tests(tmp_path):
    r = child_pytest(tmp_path, "--collect-only", "-q", "-m", "processes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(line.split("::")[-1] for line in r.stdout.splitlines() if "::" in line) == [
        "test_marked_runs_true", "test_uses_the_zookeeper_fixture"], r.stdout


def test_the_guard_is_off_when_marked_tests_run_too(tmp_path):
    r = child_pytest(tmp_path, "-k", "not zookeeper")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert set(outcomes(out).values()) == {"PASSED"} and len(outcomes(out)) == 5, out
