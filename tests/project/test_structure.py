"""The code's structure stays as docs/architecture.md describes it: layers that point one way, no import cycles,
function-level imports that say why, a current module map."""
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


def test_imports_between_packages_point_down_the_layers_and_form_no_cycle():
    problems = structure.layer_problems()
    assert problems == [], "layering (docs/architecture.md, \"Layers\"):\n" + "\n".join(problems)


def test_every_function_level_import_of_an_ingest_module_says_why():
    found = [f"{structure._where(i)}: {i.target}" for i in structure.unexplained_function_imports()]
    assert found == [], ("import at the top, or say on the line why not (a heavy third-party library):\n"
                         + "\n".join(found))


LAYERS = (("root", ("ingest", "errors")), ("low", ("storage", "wire")), ("high", ("loader", "compaction")))


def _package(tmp_path, files: dict[str, str]) -> Path:
    for name, text in {"ingest/__init__.py": '"""package: root."""\n', **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_an_upward_import_inside_a_function_fails_the_layer_check(tmp_path):
    root = _package(tmp_path, {
        "ingest/errors.py": '"""Errors."""\n',
        "ingest/wire/__init__.py": '"""package: wire."""\n',
        "ingest/wire/frame.py": textwrap.dedent('''\
            """Frames."""
            from ingest.errors import *  # down: fine


            def late():
                from ingest.loader import plan  # up, hidden in a function
                return plan
            '''),
        "ingest/loader/__init__.py": '"""package: loader."""\n',
        "ingest/loader/plan.py": '"""Plan."""\nfrom ingest.wire import frame\n',
    })
    (bad,) = structure.layer_violations(root, LAYERS, frozenset())
    assert (bad.source, bad.target, bad.line, bad.in_function) == ("ingest.wire.frame", "ingest.loader.plan", 6, True)
    # a known exception names the importing unit and the imported module
    assert structure.layer_violations(root, LAYERS, frozenset({("wire", "ingest.loader.plan")})) == []
    assert structure.stale_exceptions(root, frozenset({("wire", "ingest.loader.gone")})) == [("wire", "ingest.loader.gone")]


def test_two_packages_of_one_layer_that_import_each_other_fail_as_a_package_cycle(tmp_path):
    root = _package(tmp_path, {
        "ingest/loader/__init__.py": '"""package: loader."""\n',
        "ingest/loader/replay.py": '"""Replay."""\nfrom ingest.compaction import formats\n',
        "ingest/loader/state.py": '"""State."""\n',
        "ingest/compaction/__init__.py": '"""package: compaction."""\n',
        "ingest/compaction/formats.py": '"""Formats."""\n',
        "ingest/compaction/runner.py": '"""Runner."""\n\n\ndef run():\n    from ingest.loader import state\n',
    })
    assert structure.cycles(structure.import_graph(root)) == []   # no module cycle: the old check passed
    assert structure.layer_violations(root, LAYERS, frozenset()) == []
    assert structure.package_cycles(root, frozenset()) == [["compaction", "loader"]]


def test_a_package_missing_from_the_layer_table_fails(tmp_path):
    root = _package(tmp_path, {"ingest/newthing/__init__.py": '"""package: new."""\n'})
    assert structure.unknown_units(root, LAYERS) == ["newthing"]


def test_the_layer_table_places_the_wire_and_records_packages_below_broker_and_client():
    where = structure.layer_index()
    assert where["wire"] == where["records"] == where["storage"] < where["broker"] == where["client"]
    assert where["errors"] < where["wire"] and where["loader"] < where["explore"]


def test_a_function_level_import_is_explained_by_a_comment_on_its_line_or_above_its_block(tmp_path):
    root = _package(tmp_path, {
        "ingest/errors.py": '"""Errors."""\n',
        "ingest/config.py": '"""Config."""\n',
        "ingest/clock.py": textwrap.dedent('''\
            """Clock."""


            def a():
                from ingest import errors  # deferred: imports a heavy library
                return errors


            def b():
                # deferred: these import a heavy library
                from ingest import errors
                from ingest import config
                return errors, config


            def c():
                from ingest import errors
                return errors
            '''),
    })
    assert [(i.line, i.target) for i in structure.unexplained_function_imports(root)] == [(17, "ingest.errors")]


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
