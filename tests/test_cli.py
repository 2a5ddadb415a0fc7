"""The ``ingest`` command line as a user meets it: help with examples everywhere, one-line errors.

Help is checked in process (argparse exits 0 after printing); the error paths run
``python -m ingest.cli`` in a subprocess so stderr is exactly what a user sees.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.cli import EXIT_BROKEN_PIPE, build_parser, main
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.net import free_port

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


def _run_stdin(stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=REPO, input=stdin, capture_output=True,
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


@pytest.mark.processes
@pytest.mark.parametrize("args", CONFIG_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_missing_config_file_is_one_line_exit_2(args, tmp_path):
    missing = tmp_path / "no-such.properties"
    r = _run(*args, str(missing))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ingest {args[0]}: error: ") and str(missing) in lines[0]


@pytest.mark.processes
@pytest.mark.parametrize("args", CONFIG_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_binary_config_file_is_one_line_exit_2(args, tmp_path):
    binary = tmp_path / "ls-by-mistake"
    binary.write_bytes(Path("/bin/ls").read_bytes()[:4096])
    r = _run(*args, str(binary))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ingest {args[0]}: error: ") and str(binary) in lines[0]
    if args[0] != "audit":  # a report is JSON lines: "line 1 is not an audit report row"
        assert "is not a text file" in lines[0] and "allowed is a UTF-8" in lines[0], lines[0]


@pytest.mark.processes
def test_one_line_and_exit_2_for_bad_inputs_refused_before_anything_starts(tmp_path):
    work = tmp_path / "demo"
    # (not a number at all, such as nan: argparse's usage error, tests/test_cli_numeric_flags.py)
    for flag, value, allowed in (("--duration", "-3", "seconds > 0"), ("--rate", "0", "events per second > 0")):
        r = _run("demo", flag, value, "--workdir", str(work))
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"ingest demo: error: {flag} {value}: allowed is a number of {allowed}"], r.stderr
        assert r.stdout == "" and not work.exists()  # nothing started, nothing created
    dead = f"0:127.0.0.1:{free_port()}"
    produce = ("produce", "--brokers", dead, "--registry", "http://127.0.0.1:1", "--topic", "t", "--count", "1")
    for extra, expected in ((("--rate", "-5"), "--rate -5: allowed is events per second >= 0"),
                            (("--schema", "nope"), "--schema: no generator for schema 'nope'; choose one of")):
        r = _run(*produce, *extra)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and expected in lines[0], r.stderr
    r = _run("registry", "start", "--port", "99999", "--store", str(tmp_path / "registry"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "ingest registry: error: --port 99999: allowed is a TCP port 0-65535 (0 picks a free one)"], r.stderr
    for flag, value, allowed in (("--max-messages", "0", ">= 1"), ("--timeout-ms", "-5", "-1 (wait forever)")):
        r = _run("console-consumer", "--brokers", f"0:127.0.0.1:{free_port()}", "--topic", "t", flag, value)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and f"{flag} {value}: allowed is" in lines[0], r.stderr
        assert allowed in lines[0] and "connect" not in lines[0]


@pytest.mark.processes
def test_unreachable_brokers_in_topics_are_one_line_exit_2():
    dead = f"0:127.0.0.1:{free_port()}"
    for extra in ((), ("--json",)):
        r = _run("topics", "--brokers", dead, *extra)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr  # docs/operations.md: unreachable service
        assert lines[0].startswith("ingest topics: error: no broker answered: ") and dead in lines[0]
        assert r.stdout == ""


def test_unknown_topics_are_named_with_the_topics_there(broker_factory, tmp_path):
    (broker,) = broker_factory(n=1, num_partitions=1)
    r = _run_stdin(b"x\n", "console-producer", "--brokers", broker.address, "--topic", "known")
    assert r.returncode == 0, r.stderr
    r = _run("console-consumer", "--brokers", broker.address, "--topic", "nope", "--timeout-ms", "100")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("ingest console-consumer: error: topic 'nope' does not exist") and "known" in lines[0]
    assert broker.address.split(":", 1)[1] in lines[0]

    r = _run("topics", "--brokers", broker.address, "--topic", "nope", "--topic", "known")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and r.stdout == "", r.stderr  # no phantom 0-byte partitions
    assert "topic 'nope' does not exist on any broker that answered; topics there: known" in lines[0]

    report = tmp_path / "audit.jsonl"
    report.write_text(json.dumps({"row_type": "window", "topic": "page-views", "status": "COMPLETE"}) + "\n")
    r = _run("audit", "show", "--report", str(report), "--topic", "nope")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "'nope'" in lines[0] and "audited topics: page-views" in lines[0] and str(report) in lines[0]


def test_console_consumer_of_a_topic_unknown_to_zookeeper_is_one_line_exit_2(zk_connect):
    r = _run("console-consumer", "--zk", zk_connect, "--topic", "nope", "--timeout-ms", "100")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "topic 'nope' does not exist" in lines[0] and zk_connect in lines[0]


@pytest.mark.processes
def test_compaction_status_of_a_missing_destination_is_one_line_exit_2(tmp_path):
    missing = tmp_path / "no-warehouse"
    r = _run("compaction", "status", "--config", str(REPO / "conf/compaction.properties"),
             "--set", f"destination={missing}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("ingest compaction: error: destination ") and str(missing) in lines[0]
    assert not missing.exists()  # reading never creates it
    r = _run("compaction", "run", "--config", str(REPO / "conf/compaction.properties"),
             "--set", f"destination={missing}", "--set", "compaction.require.audit=false")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and str(missing) in r.stderr, r.stderr
    assert not missing.exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    r = _run("compaction", "status", "--config", str(REPO / "conf/compaction.properties"),
             "--set", f"destination={empty}", "--json")
    assert r.returncode == 0 and r.stdout == "" and "no committed load" in r.stderr
    r = _run("compaction", "status", "--config", str(REPO / "conf/compaction.properties"),
             "--set", f"destination={empty}", "--topic", "nope")
    assert r.returncode == 2 and "--topic nope" in r.stderr and "nothing loaded yet" in r.stderr


@pytest.mark.processes
def test_compaction_run_gated_on_an_audit_run_that_wrote_nothing_is_one_line_exit_2(tmp_path):
    dest = tmp_path / "warehouse"
    dest.mkdir()
    r = _run("compaction", "run", "--config", str(REPO / "conf/compaction.properties"),
             "--set", f"destination={dest}", "--audit-run", "ingest_hourly.never-ran")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "no audit revision of run 'ingest_hourly.never-ran'" in lines[0] and "_audit" in lines[0]


def _run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """The command's stdout is a pipe whose reader is already gone (``... | head`` after head exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=REPO, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


def test_output_into_a_closed_pipe_ends_quietly_like_a_unix_tool(broker_factory, tmp_path):
    r = _run_into_closed_pipe("config", "docs")  # fails while the command writes
    assert (r.returncode, r.stderr) == (EXIT_BROKEN_PIPE, "")
    (broker,) = broker_factory(n=1, num_partitions=1)
    conf = tmp_path / "loader.properties"
    conf.write_text(f"destination={tmp_path / 'out'}\nbrokers={broker.host}:{broker.port}\n"
                    f"registry.url=http://127.0.0.1:1\n")
    r = _run_into_closed_pipe("loader", "status", "--config", str(conf), "--json")  # fails at the final flush
    assert (r.returncode, r.stderr) == (EXIT_BROKEN_PIPE, "")


@pytest.mark.processes
def test_verbose_after_the_subcommand_shows_the_traceback(tmp_path):
    missing = tmp_path / "no-such.properties"
    r = _run("loader", "status", "--config", str(missing), "--verbose")
    assert r.returncode == 2
    assert "Traceback" in r.stderr and str(missing) in r.stderr


@pytest.mark.processes
def test_bad_values_name_the_value_and_what_is_allowed(tmp_path):
    r = _run("loader", "reset-offsets", "--config", str(REPO / "conf/loader.properties"), "--topic", "t",
             "--to", "sometime")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # refused before any broker is contacted (none runs here), naming the value and the allowed forms
    assert "'sometime'" in r.stderr and "earliest, latest" in r.stderr and "connect" not in r.stderr

    r = _run("loader", "status", "--config", str(REPO / "conf/loader.properties"), "--set", "format=orc")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "'orc'" in r.stderr and "avro" in r.stderr and "parquet" in r.stderr


@pytest.mark.processes
def test_audit_show_of_a_destination_never_audited_is_an_error(tmp_path):
    r = _run("audit", "show", "--destination", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(tmp_path) in r.stderr and "jobs/audit.py" in r.stderr


@pytest.mark.processes
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


@pytest.mark.processes
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


@pytest.mark.processes
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
