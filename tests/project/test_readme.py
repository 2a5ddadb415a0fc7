"""The README stays true: its two commands come first, CI runs its test command, config tables are current."""
from __future__ import annotations

import re
from pathlib import Path

from ingest import config_docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _commands_at_top() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block and text.index(block.group(0)) < 400, "the two commands must open the README"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_the_demo_and_the_test_command():
    commands = _commands_at_top()
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]
    for command in commands:
        assert (ROOT / command).stat().st_mode & 0o111, f"{command} must be executable"


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    steps = [line.strip() for line in ci if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert steps == [_commands_at_top()[1]]


def test_readme_configuration_tables_match_the_code():
    assert config_docs.check(README), "run: .venv/bin/ingest config docs --update README.md"


def test_every_config_key_has_a_one_line_meaning():
    undocumented = [f"{d.name}:{k.name}" for _, d in config_docs.discover() for k in d.keys if not k.doc.strip()]
    assert undocumented == []


def test_every_docs_page_is_in_the_documentation_table():
    text = README.read_text(encoding="utf-8")
    table = text[text.index("## Documentation"):]
    table = table[: table.index("\n## ", 1)]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if f"]({p})" not in table] == [], "add a row to the README's Documentation table"
