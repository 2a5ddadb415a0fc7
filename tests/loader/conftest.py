"""Fixtures of the loader tests: a real schema registry and real broker processes per module."""
from __future__ import annotations

import pytest

from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    proc = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    yield proc.url
    proc.stop()


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """Two brokers, two partitions per topic each (static broker list)."""
    started = broker_cluster(tmp_path_factory, n=2, num_partitions=2)
    yield started
    stop_all(started)
