"""Every command in README.md, docs/*.md and conf/*.properties comments runs as written after bootstrap.

Referenced files, links and their anchors exist too.

Checked statically against the real programs (argparse parsers, ``spark-submit --help``, Airflow's
CLI parser, the jobs' ``--help``): see tests/harness/doc_commands.py. Nothing that needs a cluster is
run. Re-run alone: ``.venv/bin/python -m pytest -q tests/project/test_docs_commands.py``, or print every
problem as page:line with ``.venv/bin/python -m tests.harness.doc_commands``.
"""
from __future__ import annotations

import subprocess

import pytest

from tests.harness import doc_commands, doc_extract
from tests.harness.doc_commands import Checker
from tests.harness.doc_references import reference_problems
from tests.harness.doc_extract import ROOT, split_commands

PAGES = [str(p.relative_to(ROOT)) for p in [*doc_extract.pages(), *doc_extract.config_examples()]]
# wrong on purpose, to prove the checks catch each kind of mistake
BAD_AIRFLOW = ["dags", "trigger"]  # no dag id


@pytest.fixture(scope="module")
def checker():
    checker = Checker(ROOT)
    written = [c.argv[1:] for c in doc_extract.commands(ROOT) if c.argv[0].endswith("airflow") and not c.mention]
    checker.airflow_errors(written + [BAD_AIRFLOW, ["dags", "trigger", "ingest_hourly"]])  # one Airflow start
    yield checker
    checker.close()


@pytest.fixture(scope="module")
def found(checker) -> dict[str, list[str]]:
    return doc_commands.problems(ROOT, checker)


@pytest.mark.processes
@pytest.mark.parametrize("page", PAGES)
def test_every_command_and_file_reference_on_the_page_is_true(found, page):
    assert found[page] == [], f"{len(found[page])} problem(s):\n" + "\n".join(found[page])


def _check(checker: Checker, line: str) -> list[str]:
    (command,) = split_commands("t.md", 1, line, {})
    return checker.check(command)


@pytest.mark.processes
@pytest.mark.parametrize("line, expected", [
    (".venv/bin/ingest loader status --config conf/loader.properties", []),
    ("ingest loader status --config conf/loader.properties",
     ["`ingest` is not on PATH after bootstrap: write `.venv/bin/ingest`"]),
    (".venv/bin/ingest loader stats --config conf/loader.properties",
     ["`ingest loader` has no subcommand 'stats' (it has: status, reset-offsets)"]),
    (".venv/bin/ingest loader status --confg conf/loader.properties", ["`ingest loader status` has no option --confg"]),
    (".venv/bin/ingest loader status [--json] --config FILE", []),
    ("PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master 'local[2]' jobs/load.py --config c", []),
    ("PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --mastr yarn jobs/load.py --config c",
     ["spark-submit has no option --mastr"]),
    ("PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit jobs/load.py --reset-offsets earliest",
     ["`jobs/load.py` requires --config"]),
    ("PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit jobs/lod.py",
     ["spark-submit application `jobs/lod.py` does not exist"]),
    (".venv/bin/python jobs/compact.py --config conf/compaction.properties --audit-runs x",
     ["`jobs/compact.py` has no option --audit-runs"]),
    (".venv/bin/python -m pytest -q tests/no_such_test.py", ["pytest path `tests/no_such_test.py` does not exist"]),
    (".venv/bin/python -m no_such_module", ["no module no_such_module in .venv"]),
    ("cd /tmp && ./environment/bin/python -c 'import ingest'", []),  # outside the checkout: not checkable
    ("/opt/x/bin/tool --flag", []),
    ("./scripts/no_such.sh", ["`./scripts/no_such.sh` does not exist after bootstrap"]),
    ("jobs/load.py --config c", ["`jobs/load.py` is not executable: run it as `.venv/bin/python jobs/load.py`"]),
    (".venv-airflow/bin/airflow dags trigger ingest_hourly", []),
    (".venv/bin/python bench/bench_clients.py --cnt 5", ["`bench/bench_clients.py` has no option --cnt"]),
    ("python3 scripts/structure.py map --update", []),
    ("python3 scripts/structure.py map --updat", ["`scripts/structure.py map` has no option --updat",
                                                  "`scripts/structure.py map` requires --check or --update"]),
])
def test_the_checks_catch_each_kind_of_mistake(checker, line, expected):
    assert _check(checker, line) == expected


@pytest.mark.processes
def test_spark_home_airflow_and_python_code_mistakes_are_caught(checker):
    (problem,) = _check(checker, ".venv/bin/spark-submit jobs/load.py --config conf/loader.properties")
    assert problem.startswith("spark-submit finds SPARK_HOME only with PYSPARK_PYTHON set")
    (problem,) = _check(checker, ".venv-airflow/bin/airflow " + " ".join(BAD_AIRFLOW))
    assert problem.startswith("airflow: ") and "dag_id" in problem
    (problem,) = _check(checker, ".venv/bin/python -c 'print((1)'")
    assert problem.startswith("python -c code does not compile: '(' was never closed")


def test_commands_are_extracted_from_blocks_prompts_and_inline_spans(tmp_path):
    (tmp_path / "README.md").write_text("no commands here\n")
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "Run `.venv/bin/ingest demo --duration 20` or read `ingest loader status`.\n"
        "```bash\n"
        "export PYSPARK_PYTHON=.venv/bin/python\n"
        ".venv/bin/spark-submit --archives env.tar.gz#environment \\\n"
        "    jobs/load.py --config conf/loader.properties   # a comment\n"
        "echo hi | .venv/bin/ingest console-producer --topic t --brokers 0:h:1 2>&1\n"
        "cd /tmp/elsewhere && ./environment/bin/python -c 'import ingest'\n"
        "```\n"
        "```console\n$ .venv/bin/ingest config docs\noutput line\n```\n"
        "```\n   services ──► ingest mirror --config x   (a picture)\ningest topics --brokers 0:h:1\n"
        "ingest broker: error: conf/x: invalid value\n```\n"
        "```python\nimport ingest\n```\n", encoding="utf-8")
    got = [(c.line, c.argv, c.env.get("PYSPARK_PYTHON"), c.mention) for c in doc_extract.commands(tmp_path)]
    assert got == [
        (1, [".venv/bin/ingest", "demo", "--duration", "20"], None, False),
        (1, ["ingest", "loader", "status"], None, True),
        (4, [".venv/bin/spark-submit", "--archives", "env.tar.gz#environment", "jobs/load.py",
             "--config", "conf/loader.properties"], ".venv/bin/python", False),
        (6, ["echo", "hi"], ".venv/bin/python", False),
        (6, [".venv/bin/ingest", "console-producer", "--topic", "t", "--brokers", "0:h:1"], ".venv/bin/python", False),
        (7, ["./environment/bin/python", "-c", "import ingest"], ".venv/bin/python", False),
        (10, [".venv/bin/ingest", "config", "docs"], None, False),
        (15, ["ingest", "topics", "--brokers", "0:h:1"], None, False),
    ]


def test_missing_files_and_links_are_caught(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "loader.properties").write_text("")
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("## Running it (`conf/x`)\n"
                    "see conf/loader.properties and conf/lodaer.properties, [x](../README.md), [y](other.md#a)\n"
                    "<!-- doc-check: expect-missing conf/typo.properties --> `--config conf/typo.properties`\n"
                    "[a](#running-it-confx) [b](#running-it) [c](../README.md#two-commands) [d](../README.md#tests)\n"
                    "see ENVIRONMENT.md and README.md, and delta-io/delta `PROTOCOL.md`\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("# ingest\n## Two commands\n```\n## Tests\n```\n")
    assert reference_problems(page, tmp_path) == [
        "docs/page.md:1: `conf/x` does not exist in the repository",
        "docs/page.md:2: `conf/lodaer.properties` does not exist in the repository",
        "docs/page.md:2: link `other.md` does not exist",
        "docs/page.md:4: link `#running-it`: no such heading in page.md",
        "docs/page.md:4: link `../README.md#tests`: no such heading in README.md",
        "docs/page.md:5: `ENVIRONMENT.md` does not exist in the repository",
    ]


@pytest.mark.processes
def test_the_readme_draft_is_gone_and_nothing_refers_to_it():
    name = "_readme" + "_draft"  # not spelled out, so this file does not refer to it
    assert not (ROOT / "docs" / f"{name}.md").exists()
    hits = subprocess.run(["git", "grep", "-l", name], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert [h for h in hits if h != "tests/project/test_docs_commands.py"] == []  # this test's own name
