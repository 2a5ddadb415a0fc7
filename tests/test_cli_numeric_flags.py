"""Every numeric command-line flag reads ASCII digits only, as config values do.

``type=int`` and ``type=float`` took other scripts' digits: ``ingest produce --count ４`` (a full-width
four) published 4 events, ``--rate ５`` five a second. Each numeric flag of ``ingest`` (found by walking
its real parser, so a flag added later is covered) must refuse such a value with argparse's usage error,
exit 2, naming the flag, the value and what is allowed; flags whose value the command parses itself (a
time, a broker address) refuse it before anything starts. No ``type=int`` / ``type=float`` is left in
``ingest/`` or ``jobs/`` (they read through :mod:`ingest.cli_numbers`).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
FULLWIDTH_FOUR = "\uff14"      # '４'
NUMERIC_TYPES = (int, float)


def _numeric(action: argparse.Action) -> bool:
    return action.type in NUMERIC_TYPES or getattr(action.type, "__module__", "") == "ingest.cli_numbers"


def _numeric_flags(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """``(subcommand path, flag)`` of every option of ``parser`` and its subparsers that takes a number."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _numeric_flags(sub, path + (name,))
        elif action.option_strings and _numeric(action):
            found.append((path, action.option_strings[-1]))
    return found


FLAGS = _numeric_flags(build_parser())


def test_the_walk_finds_the_numeric_flags():
    names = {" ".join(p + (f,)) for p, f in FLAGS}
    assert {"produce --count", "produce --rate", "registry start --port", "demo --duration",
            "console-consumer --timeout-ms"} <= names, sorted(names)


@pytest.mark.parametrize("path,flag", FLAGS, ids=[" ".join(p + (f,)) for p, f in FLAGS])
def test_a_full_width_digit_is_refused_naming_the_flag_the_value_and_what_is_allowed(path, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*path, flag, FULLWIDTH_FOUR])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert f"argument {flag}: '{FULLWIDTH_FOUR}' is not" in last and "allowed is" in last, last
    assert "U+FF14 FULLWIDTH DIGIT FOUR" in last and "ASCII digits" in last, last


@pytest.mark.parametrize("value", ["1_000", "nan", "inf", "0x10", "٣"])
def test_other_forms_python_would_read_are_refused_too(value, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["produce", "--rate", value])
    assert f"argument --rate: '{value}' is not a number" in capsys.readouterr().err


def test_ascii_values_still_parse():
    args = build_parser().parse_args(["produce", "--brokers", "0:h:1", "--registry", "r", "--topic", "t",
                                      "--count", "12", "--rate", "2.5", "--seed", "-3"])
    assert (args.count, args.rate, args.seed) == (12, 2.5, -3)


def test_no_builtin_int_or_float_flag_types_are_left():
    offenders = []
    for root in ("ingest", "jobs"):
        for path in sorted((REPO / root).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"\btype\s*=\s*(int|float)\s*[,)]", line):
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, "numeric flags must use ingest.cli_numbers:\n" + "\n".join(offenders)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


CONF = str(REPO / "conf")
PARSED_BY_THE_COMMAND = [
    # (command line, what the one error line must contain besides the value)
    (["-m", "ingest.cli", "topics", "preferred-leader", "--zookeeper", "127.0.0.1:1", "--wait", "３０"],
     "--wait '３０': allowed is seconds from 0 to 86400"),
    (["-m", "ingest.cli", "loader", "reset-offsets", "--config", f"{CONF}/loader.properties", "--topic", "t",
      "--to", "１７００000000000"], "allowed are earliest, latest, epoch milliseconds"),
    (["-m", "ingest.cli", "compaction", "run", "--config", f"{CONF}/compaction.properties",
      "--from", "１７００000000000"], "allowed is ISO-8601"),
    (["jobs/load.py", "--config", f"{CONF}/loader.properties", "--reset-offsets", "１７００000000000",
      "--topic", "t"], "allowed are earliest, latest, epoch milliseconds"),
    (["jobs/audit.py", "--config", f"{CONF}/audit.properties", "--report", "/nonexistent/r.jsonl",
      "--from", "１７００000000000"], "give epoch milliseconds or ISO 8601"),
    (["-m", "ingest.cli", "produce", "--brokers", "127.0.0.1:９０９２", "--registry", "http://127.0.0.1:1",
      "--topic", "t", "--count", "1"], "is not host:port or id:host:port"),
    (["-m", "ingest.cli", "loader", "status", "--config", f"{CONF}/loader.properties",
      "--set", "brokers=127.0.0.1:９０９２"], "is not host:port"),
]


@pytest.mark.processes
@pytest.mark.parametrize("argv,expected", PARSED_BY_THE_COMMAND, ids=lambda a: " ".join(a[:4]) if isinstance(a, list) else "")
def test_values_a_command_parses_itself_are_refused_before_anything_starts(argv, expected):
    r = _run(*argv)
    value = next(a for a in argv if any(ord(c) > 127 for c in a)).split("=", 1)[-1]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert repr(value) in last and expected in last and "U+FF1" in last, last
