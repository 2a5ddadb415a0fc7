"""File references in README.md and docs/*.md: repo paths, root files and relative links exist.

``conf/x.properties``, ``docs/y.md``, ``jobs/*.py`` (a glob must match), ``ENVIRONMENT.md`` (an
upper-case name at the root), ``[text](other.md#anchor)`` with the anchor GitHub gives the heading.
A page may show a deliberate mistake: ``<!-- doc-check: expect-missing conf/loader.propertes -->``.
Used by tests/harness/doc_commands.py.
"""
from __future__ import annotations

import re
from pathlib import Path

from tests.harness.doc_extract import ROOT, strip_fences

REPO_PATH = re.compile(r"(?<![\w./~:$-])((?:conf|docs|bench|scripts|jobs|tests|ingest|airflow_dags|pyspark_ingest|"
                       r"\.ci)/[\w./*$-]*[\w*])")
TOP_FILE = re.compile(r"(?<![\w./-])([A-Z][A-Z0-9_-]*\.md)(?![\w/])")  # README.md, ENVIRONMENT.md: at the root
MD_LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]*))?\)")


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives a Markdown page (github-slugger: lower case, punctuation dropped,
    spaces to '-', '-1', '-2' for repeats); headings inside fenced blocks do not count."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"(?m)^#{1,6}\s+(.+?)\s*#*$", strip_fences(path.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def reference_problems(path: Path, root: Path = ROOT) -> list[str]:
    """Repo paths (``conf/x``, ``docs/y.md``, ``jobs/*.py``) and relative links that do not exist."""
    page = str(path.relative_to(root))
    problems, text = [], path.read_text(encoding="utf-8")
    # a page may show a deliberate mistake: <!-- doc-check: expect-missing conf/loader.propertes -->
    expected_missing = set(re.findall(r"<!-- doc-check: expect-missing (\S+) -->", text))
    for number, line in enumerate(text.splitlines(), 1):
        for ref in REPO_PATH.findall(line):
            ref = ref.rstrip(".")
            if "<" in ref or "{" in ref or "$" in ref or ref in expected_missing:
                continue
            stem, _, attr = ref.rpartition(".")
            if attr.isidentifier() and attr not in ("py", "md", "sh") and (root / f"{stem}.py").is_file():
                continue  # tests/harness/zookeeper.expire_session: a function of that module
            found = list(root.glob(ref)) if "*" in ref else [root / ref] if (root / ref).exists() else []
            if not found:
                problems.append(f"{page}:{number}: `{ref}` does not exist in the repository")
        for m in TOP_FILE.finditer(line):
            ref = m.group(1)
            if re.search(r"[\w.-]+/[\w.-]+[\s`(]*$", line[:m.start()]):
                continue  # delta-io/delta `PROTOCOL.md`: another repository's file
            if not (root / ref).is_file() and not (path.parent / ref).is_file():
                problems.append(f"{page}:{number}: `{ref}` does not exist in the repository")
        for link, anchor in MD_LINK.findall(line):
            if "://" in link or link.startswith("mailto:") or not (link or anchor):
                continue
            target = path.parent / link if link else path
            if not target.exists():
                problems.append(f"{page}:{number}: link `{link}` does not exist")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                problems.append(f"{page}:{number}: link `{link}#{anchor}`: no such heading in {target.name}")
    return problems
