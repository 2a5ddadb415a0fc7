#!/usr/bin/env python3
"""The code's structure, read with ``ast``: the import graph of ``ingest``, its layers and the module map.

Checks that keep docs/architecture.md true, all run by tests/project/test_structure.py:

* ``cycles()``: strongly connected components of the import graph among ingest's own
  modules, counting imports inside functions too (a function-level import that closes a
  cycle hides a misplaced concept; deferring a heavy third-party library is fine and is
  not an edge here, because only ingest's own modules are nodes).
* ``layer_violations()``: imports between packages that point up the layers of
  :data:`LAYERS` (function-level imports counted), and ``package_cycles()``: cycles among
  the packages themselves (two packages of one layer may import each other one way only).
* ``unexplained_function_imports()``: imports of ingest's own modules inside a function
  without a comment on the line saying why they are not at the top.
* ``render_module_map()``: the module map table (first docstring line of every module),
  written between markers in docs/architecture.md.

Usage::

    python3 scripts/structure.py cycles          # prints each module cycle, exit 1 if any
    python3 scripts/structure.py layers          # prints each upward import and package cycle, exit 1 if any
    python3 scripts/structure.py map --check     # exit 1 if docs/architecture.md is stale
    python3 scripts/structure.py map --update    # rewrite the generated block
"""
from __future__ import annotations

import argparse
import ast
import functools
import io
import sys
import tokenize
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ingest"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- BEGIN GENERATED MODULE MAP (python3 scripts/structure.py map --update) -->"
END = "<!-- END GENERATED MODULE MAP -->"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # A unit is a subpackage of ingest (``broker``) or a module directly under it (``errors``).
    # Imports between units point down this table, or sideways within a layer without a cycle.
    ("root", ("ingest", "errors", "config", "cli_numbers", "clock", "znodes", "ratelimited_log", "lost_ranges",
              "jobs_support", "stop_signals", "zk_security", "config_providers", "registry_client_config",
              "home_broker")),
    ("storage, wire and formats", ("storage", "wire", "records", "metrics")),
    ("broker, clients and events", ("broker", "client", "events")),
    ("pipelines", ("mirror", "loader", "audit", "compaction")),
    ("applications", ("explore", "demo", "cli", "config_docs", "package")),
)
"""The layers of docs/architecture.md, bottom first. A unit missing here fails the check."""

KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()
"""(unit, module) imports that point up the layers, tolerated until the change that removes them lands."""

# Entry points outside the package, described by hand (they have no importable name).
EXTRA_ROWS = (
    ("`jobs/load.py`, `jobs/audit.py`, `jobs/compact.py`",
     "thin spark-submit entry points (argument parsing, exit codes; shared setup in `ingest/jobs_support.py`)"),
    ("`airflow_dags/ingest_hourly.py`, `airflow_dags/ingest_replay.py`",
     "the hourly DAG (load >> audit >> compact), the manual replay DAG; declarative only"),
    ("`airflow_dags/ingest_dag_support.py`",
     "templated settings, the audit operator, alerting, the load/audit/compact task factories"),
)


class Import(NamedTuple):
    """One import of an ingest module by another: where it is and whether it sits inside a function."""

    source: str
    target: str
    path: Path
    line: int
    in_function: bool


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


def _function_nodes(tree: ast.AST) -> set[int]:
    """ids of the import statements inside a function body (at any depth)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(sub) for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom)))
    return inside


def imports(root: Path = ROOT) -> list[Import]:
    """Every import of one of the package's modules by another, anywhere in its body."""
    return list(_imports(root, tuple((p, p.stat().st_mtime_ns) for p in modules(root).values())))


@functools.lru_cache(maxsize=8)
def _imports(root: Path, _stamps: tuple) -> tuple[Import, ...]:
    known = modules(root)
    found: list[Import] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        inside = _function_nodes(tree)
        for node in ast.walk(tree):
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
            for target in dict.fromkeys(targets):
                resolved = _resolve(target, known)
                if resolved and resolved != name:
                    found.append(Import(name, resolved, path, node.lineno, id(node) in inside))
    return tuple(found)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's own modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {name: set() for name in modules(root)}
    for imp in imports(root):
        graph[imp.source].add(imp.target)
    return graph


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one node (Tarjan, iterative)."""
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


def cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Every import cycle among ingest's modules (strongly connected components of more than one)."""
    return _components(import_graph() if graph is None else graph)


# --- layers ------------------------------------------------------------------------------

def unit_of(module: str) -> str:
    """The layer unit of a module: ``ingest.broker.log`` -> ``broker``, ``ingest.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_index(layers=LAYERS) -> dict[str, int]:
    """Unit -> its layer's position in ``layers`` (0 at the bottom)."""
    return {unit: i for i, (_name, units) in enumerate(layers) for unit in units}


def unknown_units(root: Path = ROOT, layers=LAYERS) -> list[str]:
    """Units of the package that the layer table does not place."""
    placed = layer_index(layers)
    return sorted({unit_of(m) for m in modules(root)} - set(placed))


def layer_violations(root: Path = ROOT, layers=LAYERS, known=KNOWN_UPWARD) -> list[Import]:
    """Imports from a unit to a unit of a higher layer, function-level ones included (minus ``known``)."""
    placed = layer_index(layers)
    out = []
    for imp in imports(root):
        low, high = placed.get(unit_of(imp.source)), placed.get(unit_of(imp.target))
        if low is not None and high is not None and high > low and (unit_of(imp.source), imp.target) not in known:
            out.append(imp)
    return out


def package_graph(root: Path = ROOT, known=KNOWN_UPWARD) -> dict[str, set[str]]:
    """Unit -> the units it imports (function-level imports counted, ``known`` exceptions left out)."""
    graph: dict[str, set[str]] = {unit_of(m): set() for m in modules(root)}
    for imp in imports(root):
        a, b = unit_of(imp.source), unit_of(imp.target)
        if a != b and (a, imp.target) not in known:
            graph[a].add(b)
    return graph


def package_cycles(root: Path = ROOT, known=KNOWN_UPWARD) -> list[list[str]]:
    """Every cycle among the units (packages and root modules)."""
    return _components(package_graph(root, known))


def stale_exceptions(root: Path = ROOT, known=KNOWN_UPWARD) -> list[tuple[str, str]]:
    """Known upward imports that no longer exist (remove them from :data:`KNOWN_UPWARD`)."""
    present = {(unit_of(imp.source), imp.target) for imp in imports(root)}
    return sorted(set(known) - present)


def unexplained_function_imports(root: Path = ROOT) -> list[Import]:
    """Function-level imports of ingest modules that no comment explains.

    A comment explains an import when it is on the import's line(s), or on a comment line
    right above the block of consecutive import statements the import belongs to.
    """
    explained: dict[Path, set[int]] = {}
    out = []
    for imp in imports(root):
        if not imp.in_function:
            continue
        if imp.path not in explained:
            explained[imp.path] = _explained_import_lines(imp.path)
        if imp.line not in explained[imp.path]:
            out.append(imp)
    return out


def _explained_import_lines(path: Path) -> set[int]:
    """First lines of the import statements of ``path`` that a comment explains (see above)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    comments = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT}
    spans = sorted((n.lineno, n.end_lineno or n.lineno) for n in ast.walk(ast.parse(text))
                   if isinstance(n, (ast.Import, ast.ImportFrom)))
    ends = {end: start for start, end in spans}
    out: set[int] = set()
    for start, end in spans:
        if any(line in comments for line in range(start, end + 1)):
            out.add(start)
            continue
        above = start - 1
        while above in ends and ends[above] not in out:   # the statement above, unexplained: keep looking
            above = ends[above] - 1
        if above in ends or (above in comments and lines[above - 1].lstrip().startswith("#")):
            out.add(start)
    return out


# --- module map --------------------------------------------------------------------------

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


def _where(imp: Import) -> str:
    return f"{imp.path.relative_to(ROOT).as_posix()}:{imp.line}"


def layer_problems(root: Path = ROOT) -> list[str]:
    """Every layering problem as one line (empty when the layers hold)."""
    placed = layer_index()
    lines = [f"unit {u!r} is in no layer: add it to LAYERS in scripts/structure.py" for u in unknown_units(root)]
    for imp in layer_violations(root):
        a, b = unit_of(imp.source), unit_of(imp.target)
        kind = "function-level import" if imp.in_function else "import"
        lines.append(f"{_where(imp)}: upward {kind} {imp.source} -> {imp.target} "
                     f"({a}: {LAYERS[placed[a]][0]}; {b}: {LAYERS[placed[b]][0]})")
    lines += ["package cycle: " + " <-> ".join(c) for c in package_cycles(root)]
    lines += [f"KNOWN_UPWARD lists {s} -> {t}, which no longer exists: remove it" for s, t in stale_exceptions(root)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("cycles", help="print every import cycle among ingest's modules")
    sub.add_parser("layers", help="print every upward import between packages and every package cycle")
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
    if args.what == "layers":
        problems = layer_problems()
        for line in problems:
            print(line)
        return 1 if problems else 0
    if args.update:
        update_map()
        return 0
    if map_is_current():
        return 0
    print(f"{ARCHITECTURE.relative_to(ROOT)}: module map is stale; run: python3 scripts/structure.py map --update")
    return 1


if __name__ == "__main__":
    sys.exit(main())
