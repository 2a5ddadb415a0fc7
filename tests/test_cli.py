"""The ``ingest`` command line as a user meets it: help with examples everywhere, one-line errors.

Help is checked in process (argparse exits 0 after printing); the error paths run
``python -m ingest.cli`` in a subprocess so stderr is exactly what a user sees.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
EXPECTED_COMMANDS = {"broker", "log", "console-producer", "console-consumer", "topics", "registry", "produce",
                     "loader", "audit", "compaction", "demo", "config"}


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, path + (name,))


ALL_COMMANDS = [path for path, _ in _walk(build_parser())]


def test_every_expected_command_is_registered():
    top = {path[0] for path in ALL_COMMANDS if len(path) == 1}
    assert EXPECTED_COMMANDS <= top, f"missing: {sorted(EXPECTED_COMMANDS - top)}"


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "ingest")
def test_help_of_every_command_and_subcommand_has_examples(path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: ingest" in out
    assert "examples:" in out, f"`ingest {' '.join(path)} --help` shows no examples"
    # every example line names the command it documents
    examples = out.split("examples:", 1)[1]
    assert f"ingest {' '.join(path[:1])}".strip() in examples


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


CONFIG_COMMANDS = [
    ("broker", "start", "--config"),
    ("loader", "status", "--config"),
    ("loader", "reset-offsets", "--to", "earliest", "--topic", "t", "--config"),
    ("compaction", "run", "--config"),
    ("compaction", "status", "--config"),
    ("produce", "--brokers", "127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--topic", "t", "--count", "1",
     "--config"),
    ("audit", "show", "--report"),
    ("config", "docs", "--check"),
]


@pytest.mark.parametrize("args", CONFIG_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_missing_config_file_is_one_line_exit_2(args, tmp_path):
    missing = tmp_path / "no-such.properties"
    r = _run(*args, str(missing))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ingest {args[0]}: error: ") and str(missing) in lines[0]


def test_verbose_after_the_subcommand_shows_the_traceback(tmp_path):
    missing = tmp_path / "no-such.properties"
    r = _run("loader", "status", "--config", str(missing), "--verbose")
    assert r.returncode == 2
    assert "Traceback" in r.stderr and str(missing) in r.stderr


def test_bad_values_name_the_value_and_what_is_allowed(tmp_path):
    r = _run("loader", "reset-offsets", "--config", str(REPO / "conf/loader.properties"), "--topic", "t",
             "--to", "sometime")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # refused before any broker is contacted (none runs here), naming the value and the allowed forms
    assert "'sometime'" in r.stderr and "earliest, latest" in r.stderr and "connect" not in r.stderr

    r = _run("loader", "status", "--config", str(REPO / "conf/loader.properties"), "--set", "format=orc")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "'orc'" in r.stderr and "avro" in r.stderr and "parquet" in r.stderr


def test_audit_show_of_a_destination_never_audited_is_an_error(tmp_path):
    r = _run("audit", "show", "--destination", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(tmp_path) in r.stderr and "jobs/audit.py" in r.stderr


def test_usage_mistakes_exit_2_with_usage_and_one_error_line():
    r = _run("loader", "status")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("usage: ingest loader status")
    assert r.stderr.strip().splitlines()[-1] == "ingest loader status: error: the following arguments are required: --config"


def test_an_unexpected_exception_is_one_line_pointing_at_verbose(monkeypatch, capsys):
    def boom(_args):
        raise ValueError("unexpected 42")

    parser = build_parser()
    monkeypatch.setattr("ingest.cli.build_parser", lambda: parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["loader"].set_defaults(func=boom)
    assert main(["loader"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ingest loader: internal error: ValueError: unexpected 42 (run with --verbose for the traceback)"]


@pytest.mark.parametrize("args,names", [
    (("audit", "show", "--report", "/etc/passwd"), ["/etc/passwd line 1", "jobs/audit.py --report"]),
    (("log", "dump", "{tmp}"), ["no segment files", "{tmp}"]),
    (("topics", "--zk", "127.0.0.1:1"), ["ZooKeeper", "127.0.0.1:1"]),  # no kazoo reconnect chatter
], ids=["not-a-report", "no-segments", "zookeeper-down"])
def test_wrong_inputs_are_one_line_naming_them(args, names, tmp_path):
    r = _run(*(a.format(tmp=tmp_path) for a in args))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ingest {args[0]}: error: ")
    assert all(n.format(tmp=tmp_path) in lines[0] for n in names), lines[0]


@pytest.mark.parametrize("job", ["load", "audit", "compact"])
def test_every_spark_job_help_has_examples(job):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, str(root / "jobs" / f"{job}.py"), "--help"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and "examples:" in proc.stdout and "spark-submit" in proc.stdout
