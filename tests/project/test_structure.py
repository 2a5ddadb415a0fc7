"""The code's structure stays as docs/architecture.md describes it: no import cycles, a current module map."""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _structure():
    spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


structure = _structure()


def test_no_import_cycle_among_ingest_modules():
    found = structure.cycles()
    assert found == [], "import cycles (a third concept is missing): " + "; ".join(" <-> ".join(c) for c in found)


def test_cycle_detection_counts_imports_inside_functions(tmp_path):
    pkg = tmp_path / "ingest"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""package: root."""\n')
    (pkg / "sub" / "__init__.py").write_text('"""package: sub."""\n')
    (pkg / "a.py").write_text('"""A."""\nfrom ingest.sub import b\n')
    (pkg / "sub" / "b.py").write_text(textwrap.dedent('''\
        """B."""
        import json  # third-party/stdlib imports are not nodes


        def late():
            from .. import a  # closes the cycle from inside a function
            return a
        '''))
    (pkg / "c.py").write_text('"""C, imports only downward."""\nfrom ingest.sub.b import late\n')
    graph = structure.import_graph(tmp_path)
    assert graph["ingest.a"] == {"ingest.sub.b"}
    assert graph["ingest.sub.b"] == {"ingest.a"}
    assert structure.cycles(graph) == [["ingest.a", "ingest.sub.b"]]


def test_module_map_in_architecture_doc_is_generated_from_the_code():
    assert structure.map_is_current(), "run: python3 scripts/structure.py map --update"


def test_every_module_states_its_purpose_in_its_first_docstring_line():
    missing = []
    for name, path in structure.modules().items():
        try:
            structure.purpose(path)
        except ValueError:
            missing.append(name)
    assert missing == []
