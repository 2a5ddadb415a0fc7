"""Fixtures of the events tests: a real registry subprocess per module."""
from __future__ import annotations

import pytest

from ingest.events.registry_client import RegistryClient
from tests.harness.registry import RegistryProcess


@pytest.fixture(scope="module")
def registry_proc(tmp_path_factory):
    proc = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    yield proc
    proc.stop()


@pytest.fixture
def registry(registry_proc) -> RegistryClient:
    return RegistryClient(registry_proc.url)
