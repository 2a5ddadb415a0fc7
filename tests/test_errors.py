"""The one error tree: every error lives in it, says whether a retry helps, keeps what it carries.
(Its wire codes: tests/wire/test_errors.py.)"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ingest import errors
from ingest.errors import IngestError

ROOT = Path(__file__).resolve().parent.parent


def _error_classes_of_errors_module() -> list[type]:
    return [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]


@pytest.mark.parametrize("cls,retriable", [
    (IngestError, False), (errors.StorageError, True), (errors.DiskFullError, True),
    (errors.LogCorruptionError, False), (errors.BrokerUnavailableError, True),
    (errors.MalformedResponseError, True), (errors.MalformedRequestError, False),
    (errors.CommitConflictError, True), (errors.CommitError, False), (errors.BrokerIdTakenError, False),
    (errors.CoordinationError, True), (errors.RegistryUnavailableError, True), (errors.DataLossError, False),
])
def test_retriable_flags(cls, retriable):
    assert cls.retriable is retriable


def test_data_loss_error_carries_its_lost_ranges():
    exc = errors.DataLossError("lost [0, 5)", lost_ranges=["r1", "r2"])
    assert exc.lost_ranges == ("r1", "r2") and str(exc) == "lost [0, 5)"
    assert errors.DataLossError("none given").lost_ranges == ()


def test_registry_http_error_is_in_the_tree_and_keeps_its_http_fields():
    exc = errors.RegistryHttpError(404, 40403, "Schema 7 not found")
    assert isinstance(exc, errors.SchemaError) and (exc.status, exc.error_code, exc.message) == (404, 40403, "Schema 7 not found")


def test_every_error_class_of_the_errors_module_is_in_the_tree():
    for cls in _error_classes_of_errors_module():
        assert issubclass(cls, IngestError), cls


def test_error_classes_are_defined_only_in_ingest_errors():
    # One tree in one file: a module that needs a new error adds it to ingest/errors.py.
    found = []
    for path in sorted((ROOT / "ingest").rglob("*.py")):
        if path == ROOT / "ingest" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and re.search(r"(Error|Exception)$", node.name):
                found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert found == []
