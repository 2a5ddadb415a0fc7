"""The README is a landing page: small, its two commands first, CI runs its test command, every page indexed.

Where a command stands on the page is not pinned beyond "the first command block"; that every command
runs under its parser and every link and anchor resolves is tests/project/test_docs_commands.py's job.
"""
from __future__ import annotations

import re
from pathlib import Path

from ingest.loader.config import LOADER_CONFIG
from tests.harness.doc_extract import fenced_blocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 10_240  # the landing page's budget; details live in docs/


def _first_command_block() -> list[str]:
    """The commands of the README's first fenced block, which must be a bash block."""
    blocks = list(fenced_blocks(README.read_text(encoding="utf-8")))
    assert blocks, "the README has no command block"
    lang, _, body = blocks[0]
    assert lang == "bash", f"the README's first fenced block must be the bash block of its two commands, not {lang!r}"
    return [line.split("#")[0].strip() for line in body if line.strip()]


def test_the_readme_is_a_landing_page_of_at_most_10_kb():
    size = README.stat().st_size
    assert size <= MAX_BYTES, (f"README.md is {size:,} bytes, over {MAX_BYTES:,}: move details to docs/ "
                               "and link them from the documentation index")


def test_readme_opens_with_the_demo_and_the_test_command():
    commands = _first_command_block()
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]
    for command in commands:
        assert (ROOT / command).stat().st_mode & 0o111, f"{command} must be executable"


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    steps = [line.strip() for line in ci if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert steps == [_first_command_block()[1]]


def test_the_readme_configuration_example_is_accepted_by_the_loader(tmp_path):
    blocks = [body for lang, _, body in fenced_blocks(README.read_text(encoding="utf-8")) if lang == "properties"]
    assert len(blocks) == 1, "the README shows one minimal configuration (the hourly load's)"
    example = tmp_path / "loader.properties"
    example.write_text("\n".join(blocks[0]) + "\n", encoding="utf-8")
    LOADER_CONFIG.load(example)  # raises ConfigError naming the key and what is allowed


def test_every_docs_page_is_in_the_documentation_index():
    text = README.read_text(encoding="utf-8")
    index = text[text.index("## Documentation"):]
    index = index[: index.index("\n## ", 1)]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if f"]({p})" not in index] == [], "add a row to the README's Documentation index"
