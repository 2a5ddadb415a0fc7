#!/usr/bin/env python3
"""The code's structure, read with ``ast``: the import graph of ``ingest`` and the module map.

Two checks that keep docs/architecture.md true, both run by tests/project/test_structure.py:

* ``cycles()``: strongly connected components of the import graph among ingest's own
  modules, counting imports inside functions too (a function-level import that closes a
  cycle hides a misplaced concept; deferring a heavy third-party library is fine and is
  not an edge here, because only ingest's own modules are nodes).
* ``render_module_map()``: the module map table (first docstring line of every module),
  written between markers in docs/architecture.md.

Usage::

    python3 scripts/structure.py cycles          # prints each cycle, exit 1 if any
    python3 scripts/structure.py map --check     # exit 1 if docs/architecture.md is stale
    python3 scripts/structure.py map --update    # rewrite the generated block
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ingest"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- BEGIN GENERATED MODULE MAP (python3 scripts/structure.py map --update) -->"
END = "<!-- END GENERATED MODULE MAP -->"

# Entry points outside the package, described by hand (they have no importable name).
EXTRA_ROWS = (
    ("`jobs/load.py`, `jobs/audit.py`, `jobs/compact.py`",
     "thin spark-submit entry points (argument parsing, exit codes; shared setup in `ingest/jobs_support.py`)"),
    ("`airflow_dags/ingest_hourly.py`, `airflow_dags/ingest_replay.py`",
     "the hourly DAG (load >> audit >> compact), the manual replay DAG; declarative only"),
    ("`airflow_dags/ingest_dag_support.py`",
     "templated settings, the audit operator, alerting, the load/audit/compact task factories"),
)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's own modules it imports anywhere in its body."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                # `from pkg import mod` imports the submodule; `from mod import name` the module
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
            for target in targets:
                resolved = _resolve(target, known)
                if resolved and resolved != name:
                    graph[name].add(resolved)
    return graph


def cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan, iterative)."""
    graph = import_graph() if graph is None else graph
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def purpose(path: Path) -> str:
    """First line of the module's docstring (``package: ...`` for a bare ``__init__``)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise ValueError(f"{path.relative_to(ROOT)} has no docstring: its first line is its one-line purpose")
    return doc.strip().splitlines()[0].strip()


def render_module_map(root: Path = ROOT) -> str:
    rows = ["| module | one-line purpose |", "| --- | --- |"]
    for name, path in modules(root).items():
        if name == PACKAGE:
            continue
        text = purpose(path).replace("``", "`").replace("|", "\\|")  # reST literals -> Markdown
        if path.name == "__init__.py" and not text.startswith("package:"):
            text = f"package: {text}"
        rows.append(f"| `{path.relative_to(root).as_posix()}` | {text} |")
    rows += [f"| {where} | {what} |" for where, what in EXTRA_ROWS]
    return "\n".join([BEGIN, "", *rows, "", END])


def _block(text: str) -> str:
    if BEGIN not in text or END not in text:
        raise ValueError(f"{ARCHITECTURE} has no generated module-map markers")
    return text[text.index(BEGIN): text.index(END) + len(END)]


def map_is_current(path: Path = ARCHITECTURE) -> bool:
    return _block(path.read_text(encoding="utf-8")) == render_module_map()


def update_map(path: Path = ARCHITECTURE) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(_block(text), render_module_map()), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("cycles", help="print every import cycle among ingest's modules")
    mapper = sub.add_parser("map", help="the module map of docs/architecture.md")
    mode = mapper.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--update", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "cycles":
        found = cycles()
        for component in found:
            print("cycle: " + " <-> ".join(component))
        return 1 if found else 0
    if args.update:
        update_map()
        return 0
    if map_is_current():
        return 0
    print(f"{ARCHITECTURE.relative_to(ROOT)}: module map is stale; run: python3 scripts/structure.py map --update")
    return 1


if __name__ == "__main__":
    sys.exit(main())
