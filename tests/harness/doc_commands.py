"""Static checks of the commands and file references written in README.md and docs/*.md.

Every command must run as written from the repo root after ``./scripts/test.sh``'s
bootstrap. Nothing is executed that needs a cluster; each command is checked against
the real thing it would run:

- the program exists: ``.venv/bin/...``, ``./scripts/...``, ``jobs/*.py`` in the checkout, or
  a program on PATH. ``ingest``, ``spark-submit``, ``pytest`` and ``airflow`` are NOT on
  PATH after bootstrap (lead decision: write ``.venv/bin/ingest``, ``.venv/bin/spark-submit``);
- ``.venv/bin/ingest ...`` is parsed by the real argparse parser (``ingest.cli.build_parser``);
  a synopsis (``[--json]``, ``...``, ``PLACEHOLDER``) only has its subcommand and option
  names checked;
- ``spark-submit`` options are checked against ``.venv/bin/spark-submit --help``; it needs
  ``PYSPARK_PYTHON`` (or ``PYSPARK_DRIVER_PYTHON``/``SPARK_HOME``) in its environment, because
  pip's ``find-spark-home`` runs ``python3`` from PATH otherwise, which has no pyspark, and
  fails with "Could not find valid SPARK_HOME" (measured here, pyspark 4.3.0);
- ``jobs/*.py`` arguments against that job's ``--help`` (options and required options);
- ``airflow ...`` by Airflow's own CLI parser in ``.venv-airflow`` (one subprocess for all);
- ``python -m M`` that M can be imported, ``pytest`` paths exist;
- every ``conf/``, ``docs/``, ``jobs/``, ... path and every relative Markdown link exists
  (tests/harness/doc_references.py).

Run ``.venv/bin/python -m tests.harness.doc_commands [CHECKOUT]`` to print every problem as page:line
(CHECKOUT: another worktree's docs, checked against that worktree's ``ingest`` when it comes first
on PYTHONPATH).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from functools import cached_property
from pathlib import Path

from ingest.cli import build_parser
from tests.harness import reaper
from tests.harness.doc_extract import ELSEWHERE, ROOT, Command, commands, config_examples, pages
from tests.harness.doc_references import reference_problems

# bare names a doc must not use: not on PATH after bootstrap (ingest, spark-submit, airflow), or on PATH
# but not the project's environment (python, pip: the system's, without pyspark or ingest)
NOT_ON_PATH = {"ingest": ".venv/bin/ingest", "spark-submit": ".venv/bin/spark-submit",
               "pyspark": ".venv/bin/pyspark", "pytest": ".venv/bin/python -m pytest",
               "airflow": ".venv-airflow/bin/airflow", "python": ".venv/bin/python",
               "pip": ".venv/bin/pip", "pip3": ".venv/bin/pip"}
BUILTINS = frozenset({"cd", "echo", "export", "set", "source", ".", "test", "true", "false", "exec",
                      "unset", "kill", "wait", "read", "printf", "ulimit", "time"})
SPARK_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
# spark-submit options that take no value (from `spark-submit --help`: --help, --verbose, --version,
# --supervise, --load-spark-defaults); every other option takes one
SPARK_FLAGS = frozenset({"--help", "-h", "--verbose", "-v", "--version", "--supervise", "--load-spark-defaults"})
AIRFLOW_PARSE = """
import json, sys, contextlib, io
from airflow.cli.cli_parser import get_parser
parser, out = get_parser(), []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
        out.append("")
    except SystemExit as exc:
        out.append("" if not exc.code else (err.getvalue().strip().splitlines() or ["error"])[-1])
print(json.dumps(out))
"""


def _short(command: Command) -> str:
    text = " ".join(command.text.split())
    return text if len(text) <= 90 else text[:87] + "..."


def _help_options(text: str) -> tuple[set[str], list[set[str]]]:
    """(every option, the required ones) from an argparse ``--help`` text; a required
    ``(--check | --update)`` group is one set: any of its options will do."""
    options = set(re.findall(r"(?m)^ {2,}(-[-\w]+(?:[ ,=][^\n]*?)?)(?: {2,}|$)", text))
    names = {n for o in options for n in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", o.split("  ")[0])}
    usage = re.sub(r"^usage: \S+(?: -m \S+)?", "", text.split("\n\n", 1)[0])  # not the program's name
    required: list[set[str]] = []
    depth, group = 0, None
    for token in re.findall(r"[\[\]()]|--?[A-Za-z][\w-]*", usage):
        if token in "[]":
            depth += 1 if token == "[" else -1
        elif token == "(" and depth == 0:
            group = set()
        elif token == ")" and group is not None:
            required.append(group)
            group = None
        elif token.startswith("-") and depth == 0:
            (group.add(token) if group is not None else required.append({token}))
    return names, required


class Checker:
    """Checks commands; the expensive references (spark-submit --help, Airflow's parser) run once."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        self._job_help: dict[str, tuple[set[str], list[set[str]]] | None] = {}
        self._airflow: dict[tuple[str, ...], str] = {}
        self._spark = subprocess.Popen(  # started now: the JVM runs while the rest is checked
            [str(root / ".venv/bin/spark-submit"), "--help"], cwd=root, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": str(root / ".venv/bin/python")})
        reaper.watch(self._spark)

    def close(self) -> None:
        """Stop ``spark-submit --help`` if nobody read it (its JVM is in its process group)."""
        if self._spark.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._spark.pid, signal.SIGKILL)
        self._spark.communicate()
        reaper.forget(self._spark)

    @cached_property
    def ingest_parser(self) -> argparse.ArgumentParser:
        return build_parser()

    @cached_property
    def spark_options(self) -> set[str]:
        out, _ = self._spark.communicate(timeout=300)
        names = set(re.findall(r"(?m)^\s+(--[\w-]+|-[a-z])\b", out)) | set(re.findall(r",\s+(-\w)\b", out))
        assert "--master" in names, f"spark-submit --help gave no options:\n{out}"
        return names

    def airflow_errors(self, argvs: list[list[str]]) -> None:
        todo = [a for a in argvs if tuple(a) not in self._airflow]
        if not todo:
            return
        home = self.root / ".venv-airflow"
        with tempfile.TemporaryDirectory(prefix="doc-airflow-") as airflow_home:
            proc = subprocess.Popen([str(home / "bin/python"), "-c", AIRFLOW_PARSE], text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env={**os.environ, "AIRFLOW_HOME": airflow_home})
            reaper.watch(proc)
            out, err = proc.communicate(json.dumps(todo), timeout=300)
            reaper.forget(proc)
        assert proc.returncode == 0, err[-2000:]
        for argv, error in zip(todo, json.loads(out.strip().splitlines()[-1])):
            self._airflow[tuple(argv)] = error

    def job_help(self, script: str) -> tuple[set[str], list[set[str]]] | None:
        """(options, required options) from ``script --help`` (a path, or ``-m module``); None if it fails."""
        if script not in self._job_help:
            words = script.split()  # a path or -m module, then any subcommand words
            target = words if words[0] == "-m" else [str(self.root / words[0]), *words[1:]]
            proc = subprocess.run([sys.executable, *target, "--help"], cwd=self.root, text=True,
                                  capture_output=True, timeout=120)
            ok = proc.returncode == 0 and proc.stdout.startswith("usage:")
            self._job_help[script] = _help_options(proc.stdout) if ok else None
        return self._job_help[script]

    # --- per program ---------------------------------------------------------------------

    def check(self, c: Command) -> list[str]:
        program, args = c.argv[0], c.argv[1:]
        problems: list[str] = []
        if "/" not in program:
            if c.mention:
                return (self._ingest(c, args) if program == "ingest"
                        else self._spark_submit(c, args) if program == "spark-submit" else [])
            if program in NOT_ON_PATH:
                problems.append(f"`{program}` is not on PATH after bootstrap: write `{NOT_ON_PATH[program]}`"
                                if program not in ("python", "pip", "pip3") else
                                f"`{program}` is not the project's environment: write `{NOT_ON_PATH[program]}`")
                program = NOT_ON_PATH[program].split()[0]
            elif program == "python3":
                return problems + self._python(c, args, venv=False)
            elif program not in BUILTINS and not shutil.which(program):
                return [f"`{program}` is not installed here (not on PATH)"]
            else:
                return problems
        if program.startswith(("/", "~", "$", '"')) or ELSEWHERE in c.env:
            return problems  # outside the checkout (an unpacked archive, a cluster node): not checkable here
        path = self.root / program
        if not path.exists():
            return problems + [f"`{program}` does not exist after bootstrap"]
        if not c.mention and not os.access(path, os.X_OK):
            problems.append(f"`{program}` is not executable: run it as `.venv/bin/python {program}`")
        name = program.rsplit("/", 1)[-1]
        if program.startswith("jobs/") or program.endswith(".py") and self._options(args):
            problems += self._job(c, program, args)
        elif name == "ingest":
            problems += self._ingest(c, args)
        elif name == "spark-submit":
            problems += self._spark_submit(c, args)
        elif name.startswith("python"):
            problems += self._python(c, args, venv=True)
        elif name == "airflow":
            self.airflow_errors([args])
            if self._airflow[tuple(args)]:
                problems.append(f"airflow: {self._airflow[tuple(args)]}")
        return problems

    def _ingest(self, c: Command, args: list[str]) -> list[str]:
        parser, rest = self.ingest_parser, [a for a in args if a not in ("-v", "--verbose")]
        while rest and not rest[0].startswith("-") and rest[0] != "PLACEHOLDER":  # `ingest <command>`
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            if sub is None:
                break
            if rest[0] not in sub.choices:
                return [f"`{parser.prog}` has no subcommand '{rest[0]}' (it has: {', '.join(sub.choices)})"]
            parser = sub.choices[rest.pop(0)]
        known = set(parser._option_string_actions) | set(self.ingest_parser._option_string_actions)
        problems = [f"`{parser.prog}` has no option {o}" for o in self._options(args) if o not in known]
        if problems or c.synopsis or c.mention:
            return problems
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                self.ingest_parser.parse_args(args)
        except SystemExit as exc:
            if exc.code:
                return [f"argparse: {(err.getvalue().strip().splitlines() or ['error'])[-1]}"]
        return []

    @staticmethod
    def _options(args: list[str]) -> list[str]:
        return [a.split("=", 1)[0] for a in args if re.match(r"^--?[A-Za-z]", a)]

    def _job(self, c: Command, script: str, args: list[str]) -> list[str]:
        while args and not args[0].startswith("-") and "/" not in args[0] and "=" not in args[0]:
            script, args = f"{script} {args[0]}", args[1:]  # `structure.py map --update`: map's options
        found = self.job_help(script)
        if found is None:
            return [f"`{script} --help` does not run"]
        names, required = found
        problems = [f"`{script}` has no option {o}" for o in self._options(args) if o not in names]
        if not (c.synopsis or c.mention) and "--help" not in args and "-h" not in args:
            used = set(self._options(args))
            problems += [f"`{script}` requires {' or '.join(sorted(r))}" for r in required if not r & used]
        return problems

    def _spark_submit(self, c: Command, args: list[str]) -> list[str]:
        problems = []
        if not any(v in c.env for v in SPARK_ENV) and not c.mention:
            problems.append("spark-submit finds SPARK_HOME only with PYSPARK_PYTHON set (else it runs python3 "
                            "from PATH, which has no pyspark): write `PYSPARK_PYTHON=.venv/bin/python "
                            ".venv/bin/spark-submit ...`")
        i = 0
        while i < len(args) and args[i].startswith("-"):
            name = args[i].split("=", 1)[0]
            if name not in self.spark_options:
                problems.append(f"spark-submit has no option {name}")
            i += 1 if name in SPARK_FLAGS or "=" in args[i] else 2
        if i >= len(args):
            if not (c.mention or c.synopsis or {"--help", "-h", "--version"} & set(args)):
                problems.append("spark-submit without an application file")
            return problems
        app = args[i]
        if "://" in app:
            return problems  # local:///opt/ingest/jobs/load.py: inside an image, not checkable here
        if not (self.root / app).is_file():
            problems.append(f"spark-submit application `{app}` does not exist")
        elif app.startswith("jobs/"):
            problems += self._job(c, app, args[i + 1:])
        return problems

    def _python(self, c: Command, args: list[str], venv: bool) -> list[str]:
        if args[:1] == ["-c"] and len(args) > 1:
            try:
                compile(args[1], f"{c.where} -c", "exec")
            except SyntaxError as exc:
                return [f"python -c code does not compile: {exc}"]
            return []
        if not args or args[0] in ("--version", "-V"):
            return []
        if args[0] == "-m" and len(args) > 1:
            module = args[1]
            if not venv and module.split(".")[0] not in sys.stdlib_module_names:
                return [f"`python3 -m {module}` needs the project's environment: write `.venv/bin/python -m {module}`"]
            local = self.root / module.replace(".", "/")
            if module.split(".")[0] in ("tests", "bench", "ingest", "jobs"):  # this checkout's, not sys.path's
                found = local.with_suffix(".py").is_file() or (local / "__init__.py").is_file()
            else:
                try:
                    found = importlib.util.find_spec(module) is not None
                except ImportError:
                    found = False
            if not found:
                return [f"no module {module} in .venv"]
            if module == "pytest":
                return [f"pytest path `{a}` does not exist" for a in self._pytest_paths(args[2:])]
            if module.startswith(("tests.", "bench.", "ingest.")) and self._options(args[2:]):
                return self._job(c, f"-m {module}", args[2:])
            return []
        script = args[0]
        if not (self.root / script).is_file():
            return [f"python script `{script}` does not exist"]
        if not venv and script.startswith(("jobs/", "bench/", "tests/")):
            return [f"`python3 {script}` needs the project's environment: write `.venv/bin/python {script}`"]
        if script.startswith("jobs/") or self._options(args[1:]):  # a bench's options: from its --help
            return self._job(c, script, args[1:])
        return []

    def _pytest_paths(self, args: list[str]) -> list[str]:
        paths, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a in ("-k", "-m", "-p", "-n", "--dist", "-o", "--deselect", "--durations"):
                skip = True
            elif not a.startswith("-") and not (self.root / a.split("::")[0]).exists():
                paths.append(a)
        return paths


def problems(root: Path = ROOT, checker: Checker | None = None) -> dict[str, list[str]]:
    """page -> every problem on it, as 'page:line: `command`: what is wrong'."""
    own = checker is None
    checker = checker or Checker(root)
    found = {str(p.relative_to(root)): reference_problems(p, root) for p in pages(root)}
    found.update({str(p.relative_to(root)): [] for p in config_examples(root)})
    all_commands = commands(root)
    checker.airflow_errors([c.argv[1:] for c in all_commands if c.argv[0].endswith("airflow") and not c.mention])
    for c in all_commands:
        for problem in checker.check(c):
            found[c.page].append(f"{c.where}: `{_short(c)}`: {problem}")
    if own:
        checker.close()
    return {page: sorted(set(p), key=lambda s: int(s.split(":")[1])) for page, p in found.items()}


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.harness.doc_commands [CHECKOUT]``: every problem as page:line (exit 1 if any)."""
    args = sys.argv[1:] if argv is None else argv
    found = problems(Path(args[0]).resolve() if args else ROOT)
    for page, page_problems in found.items():
        for p in page_problems:
            print(p)
    total = sum(len(p) for p in found.values())
    print(f"{total} problem(s) in {sum(1 for p in found.values() if p)} page(s)", file=sys.stderr)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
